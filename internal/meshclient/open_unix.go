//go:build unix

package meshclient

import (
	"errors"
	"net"
	"syscall"
)

// open reports whether an idle connection is still open: the service has
// neither closed it nor sent anything on it. It peeks at the socket
// without waiting, one system call.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = raw.Read(func(fd uintptr) bool {
		var one [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = errors.Is(rerr, syscall.EAGAIN)
		return true
	})
	return err == nil && alive
}
