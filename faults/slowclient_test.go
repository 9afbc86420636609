//go:build faults

package faults

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The cases of this file exercise the edge's guards against slow, oversized
// and greedy clients, and its answer to calls in flight when it stops.
// Without those guards each fails: slow bodies stay open for minutes, an
// oversized declared body waits for bytes that never come, one address may
// hold any number of connections, and SIGTERM drops waiting calls.

// 1,000 connections that send their headers and 10 of 100 body bytes, then
// stall: the edge closes every one within its body read deadline (the
// shared mesh's edgeBodyTimeout), its memory stays bounded, and other
// clients' calls do not fail meanwhile. The connections come from four
// loopback addresses, 250 each, so that the cap on connections per client
// address is not what closes them.
func TestSlowBodiesAreCutOff(t *testing.T) {
	const conns, addrs = 1000, 4
	// Each connection waits this long for the edge to close it, measured
	// from its own opening: four times the edge's body deadline. A
	// connection the edge does not close meets this deadline instead.
	const patience = 4 * edgeBodyTimeout
	m := sharedMesh(t)
	host := strings.TrimPrefix(strings.TrimSuffix(m.mcpURL, "/mcp"), "http://")
	edgePID := m.process(t, "edge").PID
	rssBefore := rssMB(edgePID)

	var others outcomes
	stop := make(chan struct{})
	sessions := openSessions(t, m.mcpURL, 1)
	load := loadFor(1, 50*time.Millisecond, stop, func(w, n int) {
		others.add(callTool(sessions[w], "tasks_list", map[string]any{"limit": 1}, ""))
	})
	var closed atomic.Int64
	var longest atomic.Int64 // nanoseconds a connection lived, the longest
	var wg sync.WaitGroup
	var peak atomic.Int64
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i%addrs))}}
		c, err := d.Dial("tcp", host)
		if err != nil {
			t.Fatalf("open a slow connection: %v", err)
		}
		opened := time.Now()
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"", host)
		wg.Go(func() {
			defer c.Close()
			_ = c.SetReadDeadline(opened.Add(patience))
			buf := make([]byte, 512)
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue
				}
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					// The edge closed it (our own deadline is not that).
					closed.Add(1)
					lived := int64(time.Since(opened))
					for cur := longest.Load(); lived > cur && !longest.CompareAndSwap(cur, lived); cur = longest.Load() {
					}
				}
				return
			}
		})
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
				peak.Store(max(peak.Load(), int64(rssMB(edgePID))))
			}
		}
	}()
	wg.Wait()
	close(done)
	close(stop)
	load.Wait()
	failed := failures(t, others.list())
	lived := time.Duration(longest.Load())
	figure(t, "slow connections closed by the edge", fmt.Sprintf("%d of %d", closed.Load(), conns),
		fmt.Sprintf("all, each within %s of opening", patience), closed.Load() == conns)
	report(t, "longest a slow connection stayed open", fmt.Sprintf("%.1f s", lived.Seconds()), fmt.Sprintf("<= %s (the body deadline) + 1s", edgeBodyTimeout), lived <= edgeBodyTimeout+time.Second)
	growth := int(peak.Load()) - rssBefore
	figure(t, "edge RSS growth during the attack", fmt.Sprintf("%d MB", growth), "<= 64 MB", growth <= 64)
	figure(t, "other clients' calls meanwhile (failed)", fmt.Sprintf("%d (%d)", len(others.list()), failed), "0 failed", failed == 0 && len(others.list()) > 0)
}

// A request that declares a body over the edge's cap is refused at once with
// 413, without waiting for bytes that may never come.
func TestOversizedDeclaredBodyIsRefusedAtOnce(t *testing.T) {
	m := sharedMesh(t)
	host := strings.TrimPrefix(strings.TrimSuffix(m.mcpURL, "/mcp"), "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: %d\r\n\r\n{\"jsonrpc\"", host, 5<<20)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	status := "no answer in 10s"
	if err == nil {
		resp.Body.Close()
		status = resp.Status
	}
	took := time.Since(start)
	// An edge that waited for the body would answer at its body deadline
	// at the earliest.
	figure(t, "declared 5 MiB body, 10 bytes sent", fmt.Sprintf("%s after %s", status, ms(took)), fmt.Sprintf("413 before the %s body deadline", edgeBodyTimeout),
		err == nil && resp.StatusCode == http.StatusRequestEntityTooLarge && took < edgeBodyTimeout)
	report(t, "time to the 413", ms(took), "<= 1s", took <= time.Second)
}

// One client address opening 2,000 connections is held to the edge's
// per-address cap; a client at another address is served meanwhile.
func TestConnectionsPerClientAddressAreCapped(t *testing.T) {
	const conns = 2000
	m := sharedMesh(t)
	host := strings.TrimPrefix(strings.TrimSuffix(m.mcpURL, "/mcp"), "http://")
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c, err := dialer.Dial("tcp", host)
		if err != nil {
			break
		}
		open = append(open, c)
	}
	// Each connection asks the edge's health; a served one answers 200.
	var served atomic.Int64
	var wg sync.WaitGroup
	for _, c := range open {
		wg.Go(func() {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					served.Add(1)
				}
			}
		})
	}
	other := callTool(connectMCP(t, m.mcpURL, "", nil), "tasks_list", map[string]any{"limit": 1}, "")
	wg.Wait()
	figure(t, "connections from one address served", fmt.Sprintf("%d of %d", served.Load(), len(open)), "capped (< all)", served.Load() < int64(len(open)))
	figure(t, "a client at another address meanwhile", other.code(), "ok", other.ok())
}

// SIGTERM to the edge while owner asks wait for their answers: each call it
// accepted gets a tool result (unavailable, "retry with the same idempotency
// key") before it closes the connection, never a dropped socket.
func TestEdgeSIGTERMAnswersCallsInFlight(t *testing.T) {
	const waitSeconds = 30
	m := sharedMesh(t)
	sessions := openSessions(t, m.mcpURL, 4)
	var calls outcomes
	var wg sync.WaitGroup
	run := time.Now().UnixNano()
	for i, cs := range sessions {
		wg.Go(func() {
			key := fmt.Sprintf("sigterm-ask-%d-%d", run, i)
			calls.add(callTool(cs, "owner_ask", map[string]any{"question": "wait for me " + key, "wait_seconds": waitSeconds}, key))
		})
	}
	time.Sleep(2 * time.Second) // the asks are waiting at the edge
	edge := m.process(t, "edge").PID
	stopped := m.kill(t, "edge", syscall.SIGTERM)
	wg.Wait()
	noResult := 0
	var slowest time.Duration
	for _, o := range calls.list() {
		if o.err != nil {
			noResult++
			t.Logf("ask in flight at SIGTERM: %v", o.err)
		}
		slowest = max(slowest, o.end.Sub(stopped.sent))
	}
	figure(t, "calls in flight at SIGTERM without a tool result", noResult, "0", noResult == 0)
	// An edge that let the asks wait out their budget would answer after
	// waitSeconds; one that dropped them would leave no result.
	figure(t, "calls answered before their wait would have ended", fmt.Sprintf("last after %.2f s", slowest.Seconds()), fmt.Sprintf("< %ds", waitSeconds), slowest < waitSeconds*time.Second)
	report(t, "seconds from SIGTERM to the last answer", slowest.Seconds(), "<= 10 (the shutdown grace is 5s)", slowest <= 10*time.Second)
	m.waitRestarted(t, "edge", edge, time.Minute)
}

// rssMB returns the resident memory of pid in MB (0 when unknown).
func rssMB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb / 1024
		}
	}
	return 0
}
