// Package childproc starts helper processes (services under `toolmesh up`,
// the Temporal dev server) so that they never outlive the process that
// started them.
package childproc

import "syscall"

// Attr returns the process attributes for a child: its own process group (a
// terminal's Ctrl-C reaches the parent, which stops children in order) and,
// on Linux, a parent-death signal so the kernel stops the child if the parent
// dies without stopping it.
func Attr() *syscall.SysProcAttr { return attr() }
