package temporaldev

import "syscall"

// sysProcAttr puts the server in its own process group, so a Ctrl-C in the
// terminal reaches only toolmesh, which stops the server last and in order;
// and asks the kernel to SIGTERM the server if toolmesh itself dies without
// stopping it, so it is never left behind. (The kernel sends it when the
// thread that started the server ends; Go ends a thread only when a goroutine
// exits while locked to it, which nothing in toolmesh does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
