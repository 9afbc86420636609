package meshclient_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolmesh/toolmesh/internal/meshclient"
)

// writeCounter counts the writes made on the connections it dials.
type writeCounter struct{ writes atomic.Int64 }

func (c *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countedConn{conn, c}, nil
}

type countedConn struct {
	net.Conn
	c *writeCounter
}

func (cc countedConn) Write(p []byte) (int, error) {
	cc.c.writes.Add(1)
	return cc.Conn.Write(p)
}

// TestAServiceCallIsOneWrite: a call over the mesh's transport with a
// body net/http cannot tell is in memory (as Connect's is) sends its
// headers and its body in one write (net/http alone writes them in two),
// and the service reads the whole body; a body larger than the limit
// still arrives whole.
func TestAServiceCallIsOneWrite(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	call := func(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, body string) int64 {
		t.Helper()
		counter := &writeCounter{}
		transport := meshclient.Transport()
		transport.DialContext = counter.dial
		t.Cleanup(transport.CloseIdleConnections)
		req, err := http.NewRequest(http.MethodPost, srv.URL, &closeRecorder{Reader: strings.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		res, err := (&http.Client{Transport: wrap(transport)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if got, _ := io.ReadAll(res.Body); string(got) != body {
			t.Fatalf("the service read %d bytes, want the %d sent", len(got), len(body))
		}
		return counter.writes.Load()
	}
	plain := func(rt http.RoundTripper) http.RoundTripper { return rt }
	if n := call(t, plain, "hello"); n != 2 {
		t.Errorf("net/http alone wrote a call in %d writes; this test expects 2 (its premise changed)", n)
	}
	if n := call(t, meshclient.OneWrite, "hello"); n != 1 {
		t.Errorf("a call over the mesh's transport took %d writes, want 1", n)
	}
	if n := call(t, meshclient.OneWrite, strings.Repeat("x", 100<<10)); n < 2 {
		t.Errorf("a body past the limit went in %d writes; want it sent as net/http sends it", n)
	}
}

// TestOneWriteLeavesTheRequestAlone: OneWrite closes the body it was given,
// leaves its caller's request as it was, and gives the request it sends a
// body that can be read again (GetBody), as a retried request needs.
func TestOneWriteLeavesTheRequestAlone(t *testing.T) {
	t.Parallel()
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, err := http.NewRequest(http.MethodPost, "http://service.invalid/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Body, req.ContentLength = body, int64(len("payload"))
	var sent *http.Request
	rt := meshclient.OneWrite(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if !body.closed {
		t.Error("the caller's body was not closed")
	}
	if req.Body != body || sent == req {
		t.Error("the caller's request was changed instead of copied")
	}
	for range 2 {
		rc, err := sent.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(rc); string(b) != "payload" {
			t.Errorf("GetBody gave %q, want the payload", b)
		}
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error {
	c.closed = true
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
