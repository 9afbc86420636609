//go:build !linux

package pgtest

import "syscall"

// procAttr runs children as the current user. Outside Linux there is no
// parent-death signal: a cluster can outlive a test process that is killed
// (Stop still runs on every normal exit, failed tests included).
func procAttr(runAs *account, dieWithParent bool) *syscall.SysProcAttr {
	return nil
}

// processAlive answers true, so stale directories are never swept.
func processAlive(pid int) bool { return true }

// canReach is not checked outside Linux, where the cluster runs as the
// current user.
func (a *account) canReach(dir string) error { return nil }
