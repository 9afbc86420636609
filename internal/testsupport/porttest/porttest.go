// Package porttest finds room on 127.0.0.1 for tests that start a whole mesh
// at its fixed default ports shifted by one offset (`--port-offset`), and
// single ports for tests that start one server process on an address they
// must know before it binds.
//
// An offset is reserved, not merely found free: a mesh binds its ports over
// seconds after its offset is chosen, and test binaries of several packages
// (and of several checkouts) run at once, so two of them seeing the same
// ports free would start two meshes on them. A reservation is an exclusive
// lock (flock) on a file named for the offset in the system's temporary
// directory, held by an open file: another reservation of the offset, by
// this process or any other, fails until it is released, and the kernel
// releases it when the holder exits, however it exits.
package porttest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// FreeOffset returns an offset in [10000, 22000) at which every port of
// ports (a mesh's default ports) is free on 127.0.0.1, below the ephemeral
// range the Temporal dev server takes its internal ports from, reserved
// until tb's cleanup. The default ports may be in use by a developer's own
// mesh; concurrent test binaries start their search at different offsets.
// It fails the test when no offset is free.
func FreeOffset(tb testing.TB, ports ...int) int {
	tb.Helper()
	offset, release, err := reserveOffset(ports)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(release)
	return offset
}

// Offset is FreeOffset for programs (make bench-mesh) and for a mesh a
// whole test binary shares: the offset stays reserved until the process
// exits.
func Offset(ports ...int) (int, error) {
	offset, _, err := reserveOffset(ports)
	return offset, err
}

func reserveOffset(ports []int) (int, func(), error) {
	dir := filepath.Join(os.TempDir(), "toolmesh-port-offsets")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, err
	}
	start := os.Getpid() % 40 * 300
	for i := range 40 {
		offset := 10000 + (start+i*300)%12000
		release, ok := reserve(dir, strconv.Itoa(offset))
		if !ok {
			continue
		}
		if allFree(ports, offset) {
			return offset, release, nil
		}
		release()
	}
	return 0, nil, errors.New("no free port range for the mesh")
}

// reserve takes the lock named name; ok is false when another holder has it.
func reserve(dir, name string) (release func(), ok bool) {
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

func allFree(ports []int, offset int) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+offset)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// Single ports come from [singleLow, singleHigh): above every mesh offset's
// ports (at most 22000+8233) and below the kernel's ephemeral range
// (32768 up), so no outgoing connection's local port and no other test's
// mesh can take a port between its reservation and its server's bind.
const singleLow, singleHigh = 30300, 32700

// Addr returns a free 127.0.0.1 address ("127.0.0.1:port") reserved for tb:
// no other Addr or Port, in this process or another, returns it until tb's
// cleanup. It fails the test when no port is free.
func Addr(tb testing.TB) string {
	tb.Helper()
	port, release, err := reservePort()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(release)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Port is Addr's port for programs and for servers a whole test binary
// shares (a Temporal dev server, a PostgreSQL cluster restarted on the same
// port): it stays reserved until the process exits.
func Port() (int, error) {
	port, _, err := reservePort()
	return port, err
}

func reservePort() (int, func(), error) {
	dir := filepath.Join(os.TempDir(), "toolmesh-port-offsets")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, err
	}
	n := singleHigh - singleLow
	start := os.Getpid() * 37 % n
	for i := range n {
		port := singleLow + (start+i)%n
		release, ok := reserve(dir, "port-"+strconv.Itoa(port))
		if !ok {
			continue
		}
		if allFree([]int{port}, 0) {
			return port, release, nil
		}
		release()
	}
	return 0, nil, errors.New("no free port on 127.0.0.1 for a test server")
}

// Range returns the ports from lo up to, not including, hi.
func Range(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out
}
