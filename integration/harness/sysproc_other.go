//go:build unix && !linux

package harness

import "syscall"

// sysProcAttr puts the child in its own process group, as on Linux (where
// it also dies with its parent).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
