package benchmesh

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSmoke runs make bench-mesh for one second per phase, so that it
// cannot rot: every target answers, every process is measured, the report
// is written. It asserts no speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolmesh and starts the whole mesh")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bench-mesh.json")
	cfg := Config{RepoDir: repo, WorkDir: t.TempDir(), Callers: 2, Duration: time.Second, HeavyCallers: 4, Rounds: 1, Out: out}
	var progress strings.Builder
	rep, err := Run(t.Context(), cfg, &progress)
	if err != nil {
		t.Fatalf("%v\n%s\nup.log:\n%s", err, progress.String(), tail(filepath.Join(cfg.WorkDir, "up.log")))
	}
	var written Report
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &written); err != nil {
		t.Fatalf("the JSON report does not parse: %v", err)
	}
	if len(written.Phases) != 10 || len(written.Targets) != 8 {
		t.Fatalf("report has %d phases and %d targets, want 10 and 8:\n%s", len(written.Phases), len(written.Targets), b)
	}
	for _, p := range rep.Phases {
		if p.Result.Calls == 0 || p.Result.Errors != 0 {
			t.Errorf("%s with %d callers: %d calls, %d errors", p.Target, p.Result.Callers, p.Result.Calls, p.Result.Errors)
		}
		for _, name := range []string{service(p.Target), "load"} {
			if p.process(name).CPUMicrosPerCall <= 0 {
				t.Errorf("%s: no CPU time read for %s: %+v", p.Target, name, p.Processes)
			}
		}
		if front := front(p.Target); front != "" && (p.process(front).CPUMicrosPerCall <= 0 || p.process(front).RSSPeakMB <= 0 || p.process(front).AnonPeakMB <= 0) {
			t.Errorf("%s: no CPU time or memory read for %s: %+v", p.Target, front, p.Processes)
		}
	}
	for _, want := range []string{"edge ÷ direct Connect", "edge ÷ bare hop", "memory_save through the edge ÷ Save direct", "calls/s", "p99 ms"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("the printed report lacks %q:\n%s", want, progress.String())
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func TestLoadCountsAnswersAndFailures(t *testing.T) {
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Name") != "tasks_get" || r.Header.Get("Mcp-Protocol-Version") != ModernProtocol {
			http.Error(w, "bad headers", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if fail.Load() {
			_, _ = w.Write([]byte(`event: message` + "\n" + `data: {"jsonrpc":"2.0","id":1,"result":{"isError":true}}` + "\n\n"))
			return
		}
		_, _ = w.Write([]byte(`event: message` + "\n" + `data: {"jsonrpc":"2.0","id":1,"result":{"isError":false}}` + "\n\n"))
	}))
	defer srv.Close()
	cfg := LoadConfig{Kind: KindMCP, URL: srv.URL, TaskID: "tsk_x", Callers: 3, Duration: 100 * time.Millisecond}
	res, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls == 0 || res.Errors != 0 || res.CallsPerSecond <= 0 || res.P50Ms <= 0 || res.P99Ms < res.P50Ms {
		t.Errorf("answered calls: %+v", res)
	}
	fail.Store(true)
	res, err = Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 0 || res.Errors == 0 || !strings.Contains(res.FirstError, "isError") {
		t.Errorf("tool errors: %+v, want every call counted as an error", res)
	}
}

func TestCPUTimeAndMemoryOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuTime(pid)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// Spin until the kernel has charged this process 50ms more CPU by its
	// own count (getrusage), rather than for a span of wall time: on a
	// loaded machine 200ms of wall time may bring less than a clock tick
	// of CPU.
	spent := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for start := spent(); spent() < start+50*time.Millisecond; {
	}
	after, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %v after spinning, %v before", after, before)
	}
	m, err := memory(pid)
	if err != nil || m.rss <= 0 || m.hwm < m.rss || m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.rss {
		t.Errorf("memory: %+v KiB, %v; want rss ≤ hwm and anon + file ≤ rss, all above 0", m, err)
	}
}

func TestPlanPorts(t *testing.T) {
	plan := []planProcess{
		{Name: "temporal", Args: []string{"temporal-dev", "--port", "7233", "--ui-port", "8233", "--health-addr", "127.0.0.1:7230"}},
		{Name: "tasks", Args: []string{"serve", "tasks", "--addr", "127.0.0.1:7101"}},
	}
	plan[1].Links = append(plan[1].Links, struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	}{"metrics", "http://127.0.0.1:7190/metrics"})
	if got, want := planPorts(plan), []int{7101, 7190, 7230, 7233, 8233}; !slices.Equal(got, want) {
		t.Errorf("planPorts = %v, want %v", got, want)
	}
}
