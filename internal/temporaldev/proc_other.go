//go:build !linux

package temporaldev

import "syscall"

// sysProcAttr puts the server in its own process group, so a Ctrl-C in the
// terminal reaches only toolmesh, which stops the server last and in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
