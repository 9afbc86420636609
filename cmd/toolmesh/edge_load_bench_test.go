package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEdgeProcessUnderLoad runs the real binary as separate processes —
// `toolmesh serve tasks` and `toolmesh edge` — and drives tools/call
// tasks_get (2026-07-28, plain HTTP) with 200 concurrent callers, reporting
// calls/s, p50, p99 and the edge process's peak resident memory (VmHWM), the
// DESIGN §7 figure "edge RSS ≤ 60 MB at 200 concurrent calls", and the
// peak of its private (anonymous) part, sampled every 20 ms:
//
//	go test -run '^$' -bench EdgeProcessUnderLoad -benchtime 20000x ./cmd/toolmesh
func BenchmarkEdgeProcessUnderLoad(b *testing.B) {
	const callers = 200
	bin, data := buildWithKeys(b)
	tasksAddr, edgeAddr := freeAddr(b), freeAddr(b)
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TOOLMESH_LOG_LEVEL=warn")
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
		return cmd
	}
	start("serve", "tasks", "--addr", tasksAddr, "--data", data, "--mesh-public-key", filepath.Join(data, "mesh.pub"))
	waitReady(b, "http://"+tasksAddr+"/healthz")
	edgeCmd := start("edge", "--addr", edgeAddr, "--data", data, "--service", "tasks=http://"+tasksAddr)
	waitReady(b, "http://"+edgeAddr+"/healthz")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers, MaxConnsPerHost: callers}}
	b.Cleanup(client.CloseIdleConnections)
	url := "http://" + edgeAddr + "/mcp"
	out, err := postTool(client, url, "tasks_create", `{"description":"load"}`)
	if err != nil {
		b.Fatal(err)
	}
	id := regexp.MustCompile(`tsk_[0-9a-z]{26}`).FindString(out)
	if id == "" {
		b.Fatalf("tasks_create answered %s", out)
	}
	args := `{"task_id":"` + id + `"}`

	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		failed    atomic.Value
		wg        sync.WaitGroup
	)
	stopSampling := make(chan struct{})
	peakAnon := samplePeak(b, edgeCmd.Process.Pid, "RssAnon", stopSampling)
	b.ResetTimer()
	t0 := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, b.N/callers+1)
			for next.Add(1) <= int64(b.N) {
				s := time.Now()
				if _, err := postTool(client, url, "tasks_get", args); err != nil {
					failed.Store(err)
					return
				}
				local = append(local, time.Since(s))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	close(stopSampling)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 { return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) }
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(procStatus(b, edgeCmd.Process.Pid, "VmHWM"))/1024, "edge-peak-RSS-MB")
	// The private part of it: the rest are clean pages of the binary, mapped
	// from the file and shared with every toolmesh process on the machine.
	b.ReportMetric(float64(<-peakAnon)/1024, "edge-peak-anon-MB")
}

// postTool sends one stateless tools/call and returns the response body; a
// tool error or a non-200 answer is an error.
func postTool(client *http.Client, url, tool, args string) (string, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || bytes.Contains(out, []byte(`"isError":true`)) {
		return "", fmt.Errorf("%s answered %d: %.300s", tool, resp.StatusCode, out)
	}
	return string(out), nil
}

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

func waitReady(b *testing.B, url string) {
	if err := waitHealthy(context.Background(), url, nil, 30*time.Second); err != nil {
		b.Fatalf("%s did not become ready: %v", url, err)
	}
}
