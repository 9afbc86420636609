package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// procAttr runs a child as runAs (when not nil) in its own process group.
// With dieWithParent the kernel sends the child SIGQUIT (PostgreSQL's
// immediate shutdown, which also stops its backends) when the thread that
// started it exits — in practice, when the test process dies.
func procAttr(runAs *account, dieWithParent bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if runAs != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(runAs.uid), Gid: uint32(runAs.gid), Groups: []uint32{}}
	}
	if dieWithParent {
		attr.Pdeathsig = syscall.SIGQUIT
	}
	return attr
}

// processAlive reports whether pid is a live process; a zombie (exited,
// waiting for a parent to reap it) is not.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// canReach reports an error when a directory on the way to dir is not
// searchable by the account.
func (a *account) canReach(dir string) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			switch {
			case int(st.Uid) == a.uid:
				mode >>= 6
			case int(st.Gid) == a.gid:
				mode >>= 3
			}
		}
		if mode&0o1 == 0 {
			return fmt.Errorf("%s is not searchable", d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
