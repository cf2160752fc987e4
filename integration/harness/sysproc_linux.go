package harness

import "syscall"

// sysProcAttr makes the child die with the test process (Pdeathsig), so a
// test binary killed by a timeout leaves no server behind, and puts it in
// its own process group, so a Ctrl-C at the terminal reaches only the test
// or command, which then stops its servers in order (limiterd nodes push
// their last counts before their store goes away).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
}
