package porttest_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

func TestFreeOffsetSkipsATakenPort(t *testing.T) {
	ports := porttest.Range(7100, 7110)
	first := porttest.FreeOffset(t, ports...)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(7105+first)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	next := porttest.FreeOffset(t, ports...)
	if next == first {
		t.Fatalf("FreeOffset = %d again while port %d is taken", next, 7105+first)
	}
	for _, p := range ports {
		c, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+next)))
		if err != nil {
			t.Errorf("port %d at offset %d is not free: %v", p+next, next, err)
			continue
		}
		c.Close()
	}
}

// Two reservations never get the same offset, even while its ports are
// still free (the first mesh has not bound them yet): the second skips it.
func TestFreeOffsetIsReserved(t *testing.T) {
	ports := porttest.Range(7100, 7110)
	first := porttest.FreeOffset(t, ports...)
	second := porttest.FreeOffset(t, ports...)
	if second == first {
		t.Fatalf("FreeOffset gave offset %d twice while the first reservation is held", first)
	}
}

// Two reserved addresses differ while both are held, though neither is
// bound yet, and each is free to bind.
func TestAddrIsReserved(t *testing.T) {
	first, second := porttest.Addr(t), porttest.Addr(t)
	if first == second {
		t.Fatalf("Addr gave %s twice while the first reservation is held", first)
	}
	for _, a := range []string{first, second} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("reserved address %s is not free: %v", a, err)
			continue
		}
		l.Close()
	}
}
