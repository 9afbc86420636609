package meshclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Transport is the mesh's HTTP/1.1 transport. Each call is written in one
// write and its answer read on the caller's own goroutine, over a
// kept-alive connection of the transport's pool.
//
// net/http's Transport gives every connection a reader and a writer
// goroutine of its own and hands each call from its caller to the writer,
// and its answer from the reader back, waking another goroutine at each
// hand-off. Under make bench-mesh's read load that client and its two
// goroutines took 36% of the edge's CPU; here the caller writes and then
// waits for its answer itself, and the network poller wakes it once.
//
// What this does not carry goes to a net/http Transport with the same
// dialer: a URL other than http, a body of unknown length or over 64 KiB
// (a stream), an upgrade, trailers. So does nothing else: the pool is
// one connection per call in flight, as net/http's, and up to 256 idle
// connections per service are kept for 90 seconds (the services close
// theirs after two minutes). A connection the service has closed while
// idle is found before it is used again and dropped.
type Transport struct {
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	other *http.Transport

	mu   sync.Mutex
	idle map[string][]*conn // by host:port, the most recently used last
}

// NewTransport returns a transport that dials with dial (nil: a plain
// net.Dialer).
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Transport {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &Transport{
		dial: dial,
		other: &http.Transport{
			Protocols:           protocols,
			DialContext:         dial,
			MaxIdleConnsPerHost: maxIdle,
			IdleConnTimeout:     idleTimeout,
			ReadBufferSize:      connBuffer,
			WriteBufferSize:     connBuffer,
		},
		idle: map[string][]*conn{},
	}
}

const (
	// maxIdle is how many idle connections to one service are kept.
	maxIdle = 256
	// idleTimeout is how long an idle connection is kept.
	idleTimeout = 90 * time.Second
	// wholeMax is the largest body sent with its headers in one write; a
	// larger one goes as net/http sends it.
	wholeMax = 64 << 10
	// connBuffer is the size of each connection's read buffer. A service
	// call's answer is a few hundred bytes, and a larger one is read past
	// the buffer.
	connBuffer = 1 << 10
)

// conn is one kept-alive connection to a service.
type conn struct {
	net.Conn
	br   *bufio.Reader
	idle time.Time // when it was last put back
}

// wires holds the buffers requests are written into. A buffer that grew
// past wireKept (a batch of outcomes, say) is left to the collector: the
// pool keeps what it holds across a collection, and most calls are a few
// hundred bytes.
var wires = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const wireKept = 4 << 10

// Do makes the call req as an http.Client would, but for following a
// redirect: the answer is the redirect (see ForServices).
func (t *Transport) Do(req *http.Request) (*http.Response, error) { return t.RoundTrip(req) }

// RoundTrip sends req and reads its answer's header; the answer's body is
// read from the connection as its reader asks, and the connection goes
// back to the pool once the body has been read to its end.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !carried(req) {
		return t.other.RoundTrip(req)
	}
	ctx := req.Context()
	wire := wires.Get().(*bytes.Buffer)
	wire.Reset()
	defer func() {
		if wire.Cap() <= wireKept {
			wires.Put(wire)
		}
	}()
	// Write closes the request's body, as a RoundTripper must.
	if err := req.Write(wire); err != nil {
		return nil, fmt.Errorf("write the request: %w", err)
	}
	addr := hostPort(req)
	for {
		c, reused, err := t.get(ctx, addr)
		if err != nil {
			return nil, contextual(ctx, err)
		}
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(longAgo) })
		n, err := c.Write(wire.Bytes())
		if err != nil {
			stop()
			_ = c.Close()
			// A connection the service closed as it was taken: nothing
			// reached the service, so a new one carries the call.
			if reused && n == 0 && ctx.Err() == nil {
				continue
			}
			return nil, contextual(ctx, err)
		}
		res, err := readAnswer(c.br, req)
		if err != nil {
			stop()
			_ = c.Close()
			return nil, contextual(ctx, err)
		}
		res.Body = &body{rc: res.Body, ctx: ctx, t: t, c: c, addr: addr, stop: stop, keep: !res.Close && !req.Close}
		return res, nil
	}
}

// carried reports whether req is one this transport carries itself.
func carried(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodConnect ||
		len(req.Trailer) > 0 || req.Header.Get("Upgrade") != "" || req.Header.Get("Expect") != "" {
		return false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return req.ContentLength > 0 && req.ContentLength <= wholeMax
}

// readAnswer reads the answer's header, past any interim (1xx) answer.
func readAnswer(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		res, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, fmt.Errorf("read the answer: %w", err)
		}
		if res.StatusCode < 100 || res.StatusCode > 199 || res.StatusCode == http.StatusSwitchingProtocols {
			return res, nil
		}
	}
}

// hostPort is the address req goes to.
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// longAgo is a deadline in the past: set on a connection, it ends the
// read or write waiting on it.
var longAgo = time.Unix(1, 0)

// contextual returns the context's error for an error the context's end
// caused (a connection's deadline set by it), so the caller sees it
// cancelled or past its deadline, as with net/http.
func contextual(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

// get takes an idle connection to addr that is still open, or dials one.
func (t *Transport) get(ctx context.Context, addr string) (*conn, bool, error) {
	for {
		t.mu.Lock()
		list := t.idle[addr]
		if len(list) == 0 {
			t.mu.Unlock()
			break
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		if time.Since(c.idle) < idleTimeout && open(c.Conn) {
			return c, true, nil
		}
		_ = c.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &conn{Conn: nc, br: bufio.NewReaderSize(nc, connBuffer)}, false, nil
}

// put keeps c for the next call to addr, closing the connections kept too
// long and any beyond maxIdle.
func (t *Transport) put(addr string, c *conn) {
	now := time.Now()
	c.idle = now
	var stale []*conn
	t.mu.Lock()
	list := t.idle[addr]
	expired := 0
	for expired < len(list) && now.Sub(list[expired].idle) >= idleTimeout {
		expired++
	}
	if expired > 0 {
		stale = append(stale, list[:expired]...)
		list = append(list[:0], list[expired:]...)
	}
	if len(list) < maxIdle {
		list = append(list, c)
	} else {
		stale = append(stale, c)
	}
	t.idle[addr] = list
	t.mu.Unlock()
	for _, s := range stale {
		_ = s.Close()
	}
}

// CloseIdleConnections closes the connections kept for later calls.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*conn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			_ = c.Close()
		}
	}
	t.other.CloseIdleConnections()
}

// body is an answer's body, read from its connection. Read to its end,
// the connection goes back to the pool; closed before, it is closed.
type body struct {
	rc   io.ReadCloser
	ctx  context.Context
	t    *Transport
	c    *conn
	addr string
	stop func() bool // stops the context's watch of the connection
	keep bool        // the connection may carry another call

	mu   sync.Mutex // held while reading
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errors.New("read of a closed answer body")
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		b.finish(false)
		err = contextual(b.ctx, err)
	}
	return n, err
}

// Close ends the body. An answer read to its last byte whose reader has
// not yet been told so keeps its connection: one more read, which cannot
// wait, says whether that is so.
func (b *body) Close() error {
	if !b.mu.TryLock() {
		// A read is waiting on the connection: end it.
		_ = b.c.SetDeadline(longAgo)
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	_ = b.c.SetReadDeadline(longAgo)
	var one [1]byte
	n, err := b.rc.Read(one[:])
	b.finish(n == 0 && err == io.EOF)
	return nil
}

func (b *body) finish(reuse bool) {
	b.done = true
	if b.stop() && reuse && b.keep {
		if b.c.SetDeadline(time.Time{}) == nil {
			b.t.put(b.addr, b.c)
			return
		}
	}
	_ = b.c.Close()
}
