package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one client can hold of a listener: a request's headers
// and its body must arrive in time, a body may not be larger than the cap,
// and one client address may not hold every connection. Zero fields get
// the defaults below.
type Limits struct {
	// HeaderTimeout bounds reading a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, counted from the end of
	// its headers. A client that has not sent the whole body by then gets
	// 408 and its connection is closed. Only the upload is bounded: a
	// response may stream for as long as its handler runs.
	BodyTimeout time.Duration
	// MaxBodyBytes caps a request body. A declared Content-Length over it is
	// refused at once with 413, before any of the body is read; a body
	// without one is cut at the cap. Negative: the handler enforces its own
	// cap (the MCP edge does, to answer in JSON-RPC).
	MaxBodyBytes int64
	// MaxConnsPerClient caps the connections one client IP address may
	// hold open at once; a connection over it is closed as soon as it is
	// accepted. Negative: no cap.
	MaxConnsPerClient int
}

// Defaults of Limits.
const (
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultMaxBodyBytes      = 4 << 20
	DefaultMaxConnsPerClient = 512
)

func (l Limits) withDefaults() Limits {
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = DefaultHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	return l
}

// Validate reports a limit that cannot work.
func (l Limits) Validate() error {
	if l.HeaderTimeout < 0 || l.BodyTimeout < 0 {
		return errors.New("the header and body timeouts must not be negative")
	}
	return nil
}

// guardBodies applies the body cap and the body deadline to every request
// h serves.
func (l Limits) guardBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		if l.MaxBodyBytes > 0 && r.ContentLength > l.MaxBodyBytes {
			refuseTooLarge(w, l.MaxBodyBytes)
			return
		}
		// The handler gets a copy whose body is wrapped: the server's own
		// request keeps its body, which it inspects after the handler to
		// decide whether the connection can be reused (not after a body
		// read that failed).
		body := r.Body
		if l.MaxBodyBytes > 0 {
			body = http.MaxBytesReader(w, body, l.MaxBodyBytes)
		}
		r = r.WithContext(r.Context())
		r.Body = withBodyDeadline(w, body, l.BodyTimeout)
		h.ServeHTTP(w, r)
	})
}

// withBodyDeadline makes reads of body fail (with an error that is
// os.ErrDeadlineExceeded) once d has passed, unless the whole body has
// arrived by then; at the end of the body the deadline is lifted, so that a
// long-running handler is not cut off.
func withBodyDeadline(w http.ResponseWriter, body io.ReadCloser, d time.Duration) io.ReadCloser {
	if d <= 0 {
		return body
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return body
	}
	return &deadlineBody{ReadCloser: body, rc: rc}
}

type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// refuseTooLarge answers 413 with a Connect error body, which Connect
// clients read as resource_exhausted.
func refuseTooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	fmt.Fprintf(w, `{"code":"resource_exhausted","message":"the request body exceeds %d bytes"}`+"\n", limit)
}

// connLimiter caps the connections per client address, through the
// server's ConnState hook: every accepted connection is counted until it
// closes, and one over the cap is closed at once.
type connLimiter struct {
	max int
	log *slog.Logger

	mu      sync.Mutex
	clients map[string]*clientConns
}

type clientConns struct {
	n      int
	warned bool // the address was logged at its cap since it last had none
}

func newConnLimiter(max int, log *slog.Logger) *connLimiter {
	return &connLimiter{max: max, log: log, clients: map[string]*clientConns{}}
}

func (c *connLimiter) track(conn net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		ip := clientIP(conn)
		c.mu.Lock()
		cc := c.clients[ip]
		if cc == nil {
			cc = &clientConns{}
			c.clients[ip] = cc
		}
		cc.n++
		over, first := cc.n > c.max, false
		if over && !cc.warned {
			cc.warned, first = true, true
		}
		c.mu.Unlock()
		if !over {
			return
		}
		_ = conn.Close()
		if first {
			c.log.Warn("server.client_conn_limit", "client", ip, "limit", c.max,
				"message", "a client address holds the most connections it may; further connections from it are closed until some end")
		} else {
			c.log.Debug("server.client_conn_refused", "client", ip, "limit", c.max)
		}
	case http.StateClosed, http.StateHijacked:
		ip := clientIP(conn)
		c.mu.Lock()
		if cc := c.clients[ip]; cc != nil {
			if cc.n--; cc.n <= 0 {
				delete(c.clients, ip)
			}
		}
		c.mu.Unlock()
	}
}

// clientIP is the address a connection comes from, without its port.
func clientIP(conn net.Conn) string {
	addr := conn.RemoteAddr()
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
