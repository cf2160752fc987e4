package harness

import "syscall"

// sysProcAttr makes the child die with the test process (Pdeathsig), so a
// test binary killed by a timeout leaves no server behind.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
}
