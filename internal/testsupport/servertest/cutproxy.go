package servertest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// CutProxy forwards TCP connections to a server until Cut drops them all at
// once, as the crash of the server's process would.
type CutProxy struct {
	// Addr is the proxy's host:port.
	Addr string

	mu    sync.Mutex
	conns []net.Conn
}

// StartCutProxy forwards connections to target (host:port) until the test
// ends.
func StartCutProxy(tb testing.TB, target string) *CutProxy {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &CutProxy{Addr: lis.Addr().String()}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	tb.Cleanup(func() { lis.Close(); p.Cut() })
	return p
}

// Cut drops every connection through the proxy; new ones are still
// forwarded.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
