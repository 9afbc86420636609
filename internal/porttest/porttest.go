// Package porttest finds room on 127.0.0.1 for tests that start a whole mesh
// at its fixed default ports shifted by one offset (`--port-offset`).
package porttest

import (
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
)

// FreeOffset returns an offset in [10000, 22000) at which every port of
// ports (a mesh's default ports) is free on 127.0.0.1, below the ephemeral
// range the Temporal dev server takes its internal ports from. The default
// ports may be in use by a developer's own mesh; concurrent test binaries
// start their search at different offsets. It fails the test when no
// offset is free.
func FreeOffset(tb testing.TB, ports ...int) int {
	tb.Helper()
	offset, err := Offset(ports...)
	if err != nil {
		tb.Fatal(err)
	}
	return offset
}

// Offset is FreeOffset for programs (make bench-mesh): it returns an error
// when no offset is free.
func Offset(ports ...int) (int, error) {
	start := os.Getpid() % 40 * 300
	for i := range 40 {
		offset := 10000 + (start+i*300)%12000
		if allFree(ports, offset) {
			return offset, nil
		}
	}
	return 0, errors.New("no free port range for the mesh")
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

// Range returns the ports from lo up to, not including, hi.
func Range(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out
}
