package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// These tests run the built binary (binmesh_test.go): slow and oversized
// clients are cut off.

// slowBodies opens n connections to addr that send the headers of a POST
// to path declaring a 100-byte body, then 10 bytes of it, and returns how
// long the server took to close the slowest of them (failing the test for
// one still open after limit, or answered without status).
func slowBodies(t *testing.T, addr, path string, n int, limit time.Duration, status string) time.Duration {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("open slow connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n%s", path, addr, `{"jsonrpc"`)
	}
	var slowest atomic.Int64
	var wg sync.WaitGroup
	var stillOpen, otherStatus atomic.Int32
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(start.Add(limit))
			answer, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				stillOpen.Add(1)
				return
			}
			if !bytes.HasPrefix(answer, []byte("HTTP/1.1 "+status)) {
				otherStatus.Add(1)
			}
			took := int64(time.Since(start))
			for {
				cur := slowest.Load()
				if took <= cur || slowest.CompareAndSwap(cur, took) {
					break
				}
			}
		})
	}
	wg.Wait()
	if n := stillOpen.Load(); n > 0 {
		t.Fatalf("%d of %d slow connections still open after %s", n, len(conns), limit)
	}
	if n := otherStatus.Load(); n > 0 {
		t.Errorf("%d of %d slow connections were not answered %q", n, len(conns), status)
	}
	return time.Duration(slowest.Load())
}

// rss reads a process's resident memory in KiB.
func rss(t *testing.T, pid int) int { return procStatus(t, pid, "VmRSS") }

// TestSlowAndOversizedClientsAreCutOff opens 1,000 connections that send
// half a request body, against a real edge process and a real service
// process with a short body deadline: all are closed at the deadline, the
// processes' memory grows by a bounded amount, and another client is served
// meanwhile. A declared oversized body is refused at once with 413, and the
// connections one address may hold are capped.
func TestSlowAndOversizedClientsAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	const slow = 1000
	const deadline = 2 * time.Second
	bin := buildToolmesh(t)
	data := testMeshDir(t)
	tasksAddr, edgeAddr := porttest.Addr(t), porttest.Addr(t)
	limits := []string{"--body-timeout", deadline.String(), "--max-conns-per-client", "0"}
	tasksProc := startBin(t, bin, "http://"+tasksAddr+"/healthz", append([]string{"serve", "tasks", "--addr", tasksAddr, "--data", data}, limits...)...)
	edgeProc := startBin(t, bin, "http://"+edgeAddr+"/healthz", append([]string{"edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off",
		"--service", "tasks=http://" + tasksAddr}, limits...)...)
	url := "http://" + edgeAddr + "/mcp"

	// Another client, from another address, calls a tool through the edge
	// while the slow connections are open.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	callOther := func() error {
		resp, body := toolCall(t, other, url, "tasks_create", `{"description":"served"}`, nil)
		if env := resultEnvelope(t, body); resp.StatusCode != http.StatusOK || env.Status != "ok" {
			return fmt.Errorf("%d %+v", resp.StatusCode, env)
		}
		return nil
	}
	if err := callOther(); err != nil {
		t.Fatalf("before the slow clients: %v", err)
	}

	for _, target := range []struct {
		name, addr, path string
		pid              int
		status           string // the answer's status ("": any)
	}{
		{"edge", edgeAddr, "/mcp", edgeProc.cmd.Process.Pid, "408"},
		{"service", tasksAddr, "/" + tasksv1connect.TasksServiceName + "/Create", tasksProc.cmd.Process.Pid, ""},
	} {
		t.Run(target.name, func(t *testing.T) {
			before := rss(t, target.pid)
			stop := make(chan struct{})
			peak := samplePeak(t, target.pid, "VmRSS", stop)
			served := make(chan error, 1)
			go func() {
				// Once the slow connections are all open.
				time.Sleep(deadline / 2)
				served <- callOther()
			}()
			slowest := slowBodies(t, target.addr, target.path, slow, deadline+30*time.Second, target.status)
			close(stop)
			growth := <-peak - before
			t.Logf("%s: %d slow-body connections closed by %s (body deadline %s); RSS %d KiB before, grew by %d KiB at most (%.1f KiB per connection)",
				target.name, slow, slowest.Round(time.Millisecond), deadline, before, growth, float64(growth)/slow)
			if slowest < deadline {
				t.Errorf("a slow connection was closed after %s, before the %s deadline", slowest, deadline)
			}
			if growth > slow*64 {
				t.Errorf("RSS grew by %d KiB for %d connections, want at most 64 KiB each", growth, slow)
			}
			if err := <-served; err != nil {
				t.Errorf("another client during the slow connections: %v", err)
			}
		})
	}

	t.Run("declared oversized body", func(t *testing.T) {
		for name, addr := range map[string]string{"edge": edgeAddr, "service": tasksAddr} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n0123456789", addr, 5<<20)
			// Well before the body deadline.
			_ = c.SetReadDeadline(time.Now().Add(deadline / 2))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || !strings.Contains(line, "413") {
				t.Errorf("%s: a declared 5 MiB body got %q (%v), want 413 at once", name, line, err)
			}
		}
	})

	t.Run("connections per client", func(t *testing.T) {
		capped := porttest.Addr(t)
		startBin(t, bin, "http://"+capped+"/healthz", "edge", "--addr", capped, "--data", data, "--metrics-addr", "off",
			"--service", "tasks=http://"+tasksAddr, "--max-conns-per-client", "20")
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		var refused atomic.Int32
		for range 30 {
			c, err := net.Dial("tcp", capped)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		var wg sync.WaitGroup
		for _, c := range held {
			wg.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); err == io.EOF || isReset(err) {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		// The health check before may hold one connection of its own.
		if n := refused.Load(); n < 10 || n > 11 {
			t.Errorf("connections closed at once = %d of 30, want those over the cap of 20", n)
		}
		resp, body := toolCall(t, other, "http://"+capped+"/mcp", "tasks_list", `{}`, nil)
		if env := resultEnvelope(t, body); resp.StatusCode != http.StatusOK || env.Status != "ok" {
			t.Errorf("another address at the cap = %d %s, want served", resp.StatusCode, body)
		}
	})
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

// procStatus reads a field of a process's /proc/<pid>/status in KiB
// ("VmHWM", "RssAnon").
func procStatus(b testing.TB, pid int, field string) int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Skipf("no /proc here: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// samplePeak reads field of pid's status every 20 ms until stop is closed
// and returns the highest value seen, in KiB.
func samplePeak(b testing.TB, pid int, field string, stop <-chan struct{}) <-chan int {
	peak := make(chan int, 1)
	go func() {
		highest := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			highest = max(highest, procStatus(b, pid, field))
			select {
			case <-stop:
				peak <- highest
				return
			case <-tick.C:
			}
		}
	}()
	return peak
}
