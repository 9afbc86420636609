package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/server"
)

// startLimited serves the test service within limits and returns its
// host:port.
func startLimited(t *testing.T, limits server.Limits) string {
	t.Helper()
	return serveTesting(t, logging.Discard(), server.Options{Mesh: testVerifier(t), Limits: limits})
}

const echoPath = "/toolmesh.testing.v1.TestingService/Echo"

// slowRequest opens a connection (from local, when set) and sends the
// headers of a Connect call declaring a body of declared bytes, and sent of
// them.
func slowRequest(t *testing.T, local, addr string, declared, sent int) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", echoPath, addr, declared, strings.Repeat("x", sent))
	return c
}

// statusLine reads what the server answers on c before it closes it
// (within limit): its status line, or "" when it closed without one.
func statusLine(t *testing.T, c net.Conn, limit time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the connection is still open after %s", limit)
		}
		return ""
	}
	_, _ = io.Copy(io.Discard, c) // until the server closes it
	return strings.TrimSpace(line)
}

// TestSlowBodiesAreCutOffAtTheirDeadline: connections that sent their
// headers and part of a body are answered and closed once the body
// deadline passes, while another client is served.
func TestSlowBodiesAreCutOffAtTheirDeadline(t *testing.T) {
	const slow = 50
	addr := startLimited(t, server.Limits{BodyTimeout: 300 * time.Millisecond, MaxConnsPerClient: -1})
	conns := make([]net.Conn, slow)
	for i := range conns {
		conns[i] = slowRequest(t, "", addr, 100, 10)
	}
	if code := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("another client got /healthz %d while slow bodies were open, want 200", code)
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { statusLine(t, c, 20*time.Second) })
	}
	wg.Wait()

	// Over HTTP/2 the deadline cuts the stream, not the connection.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"mess`)) }()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+echoPath, pr)
	req.ContentLength = 100
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := h2cClient().Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("a slow HTTP/2 body got no answer: %v", err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK && res.Header.Get("Grpc-Status") == "" {
		t.Errorf("a slow HTTP/2 body got %d, want an error", res.StatusCode)
	}
}

// TestADeclaredOversizedBodyIsRefusedAtOnce: a Content-Length over the cap
// gets 413 before any of the body arrives (the body deadline is far away).
func TestADeclaredOversizedBodyIsRefusedAtOnce(t *testing.T) {
	addr := startLimited(t, server.Limits{BodyTimeout: time.Hour, MaxBodyBytes: 1 << 20})
	c := slowRequest(t, "", addr, 5<<20, 10)
	if line := statusLine(t, c, 20*time.Second); !strings.Contains(line, "413") {
		t.Errorf("a declared 5 MiB body got %q, want 413", line)
	}
	// A body without a declared length is cut at the cap.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+echoPath, io.MultiReader(strings.NewReader(`{"message":"`), strings.NewReader(strings.Repeat("x", 2<<20)), strings.NewReader(`"}`)))
	req.Header.Set("Content-Type", "application/json")
	res, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusOK || !strings.Contains(string(body), "resource_exhausted") {
		t.Errorf("an undeclared 2 MiB body got %d %s, want resource_exhausted", res.StatusCode, body)
	}
}

// TestConnectionsPerClientAreCapped: past the cap, one address's further
// connections are closed at once; other addresses are served, and a closed
// connection frees its place.
func TestConnectionsPerClientAreCapped(t *testing.T) {
	addr := startLimited(t, server.Limits{MaxConnsPerClient: 3})
	held := make([]net.Conn, 3)
	for i := range held {
		held[i] = dial(t, "127.0.0.1", addr)
	}
	// Each held connection is served: a request on it is answered.
	for _, c := range held {
		if line := roundTrip(t, c, addr); !strings.Contains(line, "200") {
			t.Fatalf("a connection within the cap got %q, want 200", line)
		}
	}
	over := dial(t, "127.0.0.1", addr)
	if line := statusLine(t, over, 20*time.Second); line != "" {
		t.Errorf("a connection over the cap got %q, want it closed", line)
	}
	other := dial(t, "127.0.0.2", addr)
	if line := roundTrip(t, other, addr); !strings.Contains(line, "200") {
		t.Errorf("another address got %q, want 200", line)
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dial(t, "127.0.0.1", addr)
		if line := roundTrip(t, c, addr); strings.Contains(line, "200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not free its place")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dial(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends GET /healthz on c and returns the status line ("" when
// the connection was closed).
func roundTrip(t *testing.T, c net.Conn, addr string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		return ""
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return ""
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.Status
}

// TestACutBodyClosesItsConnection: once a body misses its deadline, what
// the client sends after it on the same connection is not read as the
// next request (the rest of the body would be parsed as one, and answered
// "400 Bad Request" to whatever the client sends next): the answer to the
// cut request closes the connection.
func TestACutBodyClosesItsConnection(t *testing.T) {
	addr := startLimited(t, server.Limits{BodyTimeout: 200 * time.Millisecond, MaxConnsPerClient: -1})
	c := slowRequest(t, "", addr, 20, 10)
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("the cut request got no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		t.Fatalf("the cut request got %d, want an error", res.StatusCode)
	}
	if !res.Close {
		t.Errorf("the answer to a cut request keeps its connection open (no Connection: close)")
	}
	// The client finishes the body late and sends its next request.
	fmt.Fprintf(c, "%s", strings.Repeat("y", 10))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	next, err := http.ReadResponse(r, nil)
	if err == nil {
		next.Body.Close()
		t.Fatalf("the connection of a cut request served another answer: %s", next.Status)
	}
}
