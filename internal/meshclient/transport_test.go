package meshclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// counter counts the connections it dials and the writes made on them.
type counter struct{ dials, writes atomic.Int64 }

func (c *counter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.dials.Add(1)
	return countedConn{conn, c}, nil
}

type countedConn struct {
	net.Conn
	c *counter
}

func (cc countedConn) Write(p []byte) (int, error) {
	cc.c.writes.Add(1)
	return cc.Conn.Write(p)
}

// SyscallConn lets the transport look at the socket, as it does on a
// connection it dialed itself.
func (cc countedConn) SyscallConn() (syscall.RawConn, error) {
	return cc.Conn.(*net.TCPConn).SyscallConn()
}

// echo answers each request with its body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = w.Write(b)
})

// post sends body through rt and returns the answer's body.
func post(t *testing.T, rt http.RoundTripper, url, body string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, &closeRecorder{Reader: strings.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	res, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("POST of %d bytes: %v", len(body), err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return string(got)
}

// TestAServiceCallIsOneWriteOverAKeptConnection: a call with a body
// net/http cannot tell is in memory (as Connect's is) sends its headers
// and its body in one write (net/http alone writes them in two), calls
// after it reuse its connection, and a body larger than the limit still
// arrives whole.
func TestAServiceCallIsOneWriteOverAKeptConnection(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)

	plain := &counter{}
	stock := &http.Transport{DialContext: plain.dial}
	t.Cleanup(stock.CloseIdleConnections)
	post(t, stock, srv.URL, "hello")
	if n := plain.writes.Load(); n != 2 {
		t.Errorf("net/http alone wrote a call in %d writes; this test expects 2 (its premise changed)", n)
	}

	c := &counter{}
	rt := meshclient.NewTransport(c.dial)
	t.Cleanup(rt.CloseIdleConnections)
	for i := range 5 {
		if got, want := post(t, rt, srv.URL, fmt.Sprint("hello ", i)), fmt.Sprint("hello ", i); got != want {
			t.Fatalf("call %d answered %q, want %q", i, got, want)
		}
	}
	if n := c.writes.Load(); n != 5 {
		t.Errorf("5 calls over the mesh's transport took %d writes, want 5", n)
	}
	if n := c.dials.Load(); n != 1 {
		t.Errorf("5 calls one after another dialed %d connections, want 1", n)
	}
	big := strings.Repeat("x", 100<<10)
	before := c.writes.Load()
	if got := post(t, rt, srv.URL, big); got != big {
		t.Errorf("a body past the limit came back as %d bytes, want %d", len(got), len(big))
	}
	if n := c.writes.Load() - before; n < 2 {
		t.Errorf("a body past the limit went in %d writes; want it sent as net/http sends it", n)
	}
}

// TestAConnectionTheServiceClosedIsNotUsed: after the service closes its
// connections (a restart, its idle timeout), the next call goes out on a
// new connection instead of failing on the closed one.
func TestAConnectionTheServiceClosedIsNotUsed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)
	c := &counter{}
	rt := meshclient.NewTransport(c.dial)
	t.Cleanup(rt.CloseIdleConnections)
	post(t, rt, srv.URL, "first")
	srv.CloseClientConnections()
	for i := range 3 {
		if got := post(t, rt, srv.URL, "again"); got != "again" {
			t.Fatalf("call %d after the service closed its connections answered %q", i, got)
		}
	}
	if n := c.dials.Load(); n != 2 {
		t.Errorf("dialed %d connections, want 2: the first, and one after it was closed", n)
	}
}

// TestAnAnswerClosedEarlyLeavesNothingBehind: an answer whose reader stops
// half way (a stream it no longer wants) does not leave its rest for the
// next call on the connection; an answer sent in chunks and read to its
// end keeps its connection.
func TestAnAnswerClosedEarlyLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			for i := range 3 {
				fmt.Fprintf(w, "part %d\n", i)
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
			return
		}
		echo(w, r)
	}))
	t.Cleanup(srv.Close)
	c := &counter{}
	rt := meshclient.NewTransport(c.dial)
	t.Cleanup(rt.CloseIdleConnections)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/stream", nil)
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("part 0\n"))
	if _, err := io.ReadFull(res.Body, line); err != nil || string(line) != "part 0\n" {
		t.Fatalf("first part %q, %v", line, err)
	}
	res.Body.Close()
	if got := post(t, rt, srv.URL, "next"); got != "next" {
		t.Errorf("the call after a stream closed early answered %q, want %q", got, "next")
	}
	chunked := strings.Repeat("y", 50<<10) // past the server's buffer: sent in chunks
	dials := c.dials.Load()
	for range 3 {
		if got := post(t, rt, srv.URL, chunked); got != chunked {
			t.Fatalf("a chunked answer came back as %d bytes", len(got))
		}
	}
	if n := c.dials.Load() - dials; n > 1 {
		t.Errorf("3 chunked answers read to their end took %d new connections, want at most 1", n)
	}
}

// TestACallEndsWithItsContext: a call waiting for its answer ends when its
// context is cancelled or past its deadline, with the context's error,
// and the service sees its request end.
func TestACallEndsWithItsContext(t *testing.T) {
	t.Parallel()
	arrived, ended := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // a Go server watches for the client's end once the body is read
		close(arrived)
		<-r.Context().Done()
		close(ended)
	}))
	t.Cleanup(srv.Close)
	rt := meshclient.NewTransport(nil)
	t.Cleanup(rt.CloseIdleConnections)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("wait"))
	errc := make(chan error, 1)
	go func() {
		_, err := rt.RoundTrip(req)
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call = %v, want context.Canceled", err)
	}
	<-ended

	client := meshclient.New(meshclient.Config{Signer: servertest.MeshSigner(), Timeout: 100 * time.Millisecond},
		testingv1connect.NewTestingServiceClient, servertest.Start(t, testingsvc.New().Server()).URL)
	ctx = mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "user-1", Agent: "agent-1"}})
	if _, err := client.Wait(ctx, &testingv1.WaitRequest{Millis: 10000}); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("a 10s wait through a client with a 100ms timeout = %v, want deadline exceeded", err)
	}
	if res, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); err != nil || res.GetSubject() != "user-1" {
		t.Errorf("Echo after a call past its deadline = %+v, %v", res, err)
	}
}

// TestCallsInParallelGetTheirOwnAnswers: calls in flight at once each get
// their own answer, over a connection each.
func TestCallsInParallelGetTheirOwnAnswers(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)
	rt := meshclient.NewTransport(nil)
	t.Cleanup(rt.CloseIdleConnections)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				want := fmt.Sprintf("caller %d call %d %s", g, i, strings.Repeat("z", g*100))
				if got := post(t, rt, srv.URL, want); got != want {
					t.Errorf("caller %d call %d answered %.40q…", g, i, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error {
	c.closed = true
	return nil
}
