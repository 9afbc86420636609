package benchmesh

import (
	"context"
	"encoding/json"
	"math"
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

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
	cfg := Config{RepoDir: repo, WorkDir: t.TempDir(), Callers: 2, Duration: time.Second, HeavyCallers: 4, OverheadCallers: []int{1, 2}, Rounds: 1, Out: out}
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
	if len(written.Phases) != 16 || len(written.Targets) != 14 || len(written.Overhead) != 2 {
		t.Fatalf("report has %d phases, %d targets and %d overhead rows, want 16, 14 and 2:\n%s", len(written.Phases), len(written.Targets), len(written.Overhead), b)
	}
	for _, o := range written.Overhead {
		if o.DirectRate <= 0 || o.EdgeRate <= 0 {
			t.Errorf("overhead at %d callers: %+v, want both rates measured", o.Callers, o)
		}
	}
	for _, p := range rep.Phases {
		if p.Result.Calls == 0 || p.Result.Errors != 0 {
			t.Errorf("%s with %d callers: %d calls, %d errors", p.Target, p.Result.Callers, p.Result.Calls, p.Result.Errors)
		}
		for _, name := range []string{service(p.Target), "load"} {
			if p.Target == TargetEdgeAdminWrite && name == service(p.Target) {
				// The agents service spends about a millisecond on each of
				// the phase's few elicited calls (a handful in the smoke's
				// second), less than the 10 ms tick /proc counts CPU time
				// in: it may rightly read 0. Its memory shows it measured.
				if p.process(name).RSSPeakMB <= 0 {
					t.Errorf("%s: %s not measured: %+v", p.Target, name, p.Processes)
				}
				continue
			}
			if p.process(name).CPUMicrosPerCall <= 0 {
				t.Errorf("%s: no CPU time read for %s: %+v", p.Target, name, p.Processes)
			}
		}
		if front := front(p.Target); front != "" && (p.process(front).CPUMicrosPerCall <= 0 || p.process(front).RSSPeakMB <= 0 || p.process(front).AnonPeakMB <= 0) {
			t.Errorf("%s: no CPU time or memory read for %s: %+v", p.Target, front, p.Processes)
		}
	}
	for _, p := range rep.Phases {
		if p.Target == TargetEdgeAdminWrite {
			// The workflow of an elicited call runs there.
			for _, name := range []string{"worker-calls", "temporal"} {
				if p.process(name).CPUMicrosPerCall <= 0 {
					t.Errorf("%s: no CPU time read for %s: %+v", p.Target, name, p.Processes)
				}
			}
		}
	}
	for _, want := range []string{"edge ÷ direct Connect", "edge ÷ bare hop", "edge from a client that can answer questions", "edge over a 2025-11-25 session", "memory_save through the edge ÷ Save direct",
		"agents_set_status through the edge", "calls/s", "p99 ms", "added p50 µs"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("the printed report lacks %q:\n%s", want, progress.String())
		}
	}
}

// The overhead table is the edge's latency minus direct Connect's at each
// number of callers, medians over rounds; a number of callers with either
// side missing has no row.
func TestOverheadIsTheEdgeMinusDirect(t *testing.T) {
	phase := func(round int, target string, callers int, rate, p50, p99 float64) Phase {
		return Phase{Target: target, Round: round, Result: LoadResult{Callers: callers, CallsPerSecond: rate, P50Ms: p50, P99Ms: p99}}
	}
	rep := &Report{Callers: 8, OverheadCallers: []int{1, 8, 32}, Phases: []Phase{
		phase(1, TargetDirectJSON, 1, 2000, 0.40, 0.90), phase(1, TargetEdge, 1, 1500, 0.55, 1.20),
		// A round in which the edge hiccuped,
		phase(2, TargetDirectJSON, 1, 2200, 0.42, 0.80), phase(2, TargetEdge, 1, 1600, 1.00, 2.00),
		// and one in which the whole machine was slow.
		phase(3, TargetDirectJSON, 1, 1100, 0.90, 1.90), phase(3, TargetEdge, 1, 800, 1.05, 2.20),
		phase(1, TargetDirectJSON, 8, 6000, 1.00, 3.00), phase(1, TargetEdge, 8, 4000, 1.80, 5.00),
		phase(1, TargetDirectJSON, 32, 6500, 4.00, 9.00),
	}}
	rep.evaluate()
	// Rounds' differences at 1 caller: p50 150, 580, 150 µs; p99 300,
	// 1,200, 300 µs. (Each side's median would pair the hiccup's edge with
	// the first round's direct call: 580 and 1,100 µs.)
	want := []Overhead{
		{Callers: 1, AddedP50Micros: 150, AddedP99Micros: 300, DirectRate: 2000, EdgeRate: 1500},
		{Callers: 8, AddedP50Micros: 800, AddedP99Micros: 2000, DirectRate: 6000, EdgeRate: 4000},
	}
	if len(rep.Overhead) != len(want) {
		t.Fatalf("overhead = %+v, want %+v", rep.Overhead, want)
	}
	for i, o := range rep.Overhead {
		w := want[i]
		if o.Callers != w.Callers || math.Abs(o.AddedP50Micros-w.AddedP50Micros) > 0.01 || math.Abs(o.AddedP99Micros-w.AddedP99Micros) > 0.01 ||
			o.DirectRate != w.DirectRate || o.EdgeRate != w.EdgeRate {
			t.Errorf("overhead[%d] = %+v, want %+v", i, o, w)
		}
	}
}

// A run of some targets judges only the targets whose phases it ran: a
// target it did not measure is neither missed (a ratio of zero) nor met
// (a CPU figure of zero under its bound).
func TestTargetsAreJudgedOnlyWhenTheirPhasesRan(t *testing.T) {
	phase := func(target string, callers int, rate float64, procs ...ProcessFigure) Phase {
		return Phase{Target: target, Result: LoadResult{Callers: callers, CallsPerSecond: rate, P50Ms: 1, P99Ms: 2}, Processes: procs}
	}
	edgeCPU := ProcessFigure{Name: "edge", CPUMicrosPerCall: 200, RSSPeakMB: 90}
	names := func(ts []Target) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}

	rep := &Report{Callers: 8, HeavyCallers: 200, Phases: []Phase{phase(TargetDirectJSON, 8, 6000)}}
	rep.evaluate()
	if len(rep.Targets) != 0 || len(rep.Unmeasured) != 14 {
		t.Errorf("direct Connect alone: judged %q, unmeasured %d; want none judged and all 14 unmeasured", names(rep.Targets), len(rep.Unmeasured))
	}

	rep = &Report{Callers: 8, HeavyCallers: 200, Phases: []Phase{
		phase(TargetEdge, 8, 3000, edgeCPU), phase(TargetDirectJSON, 8, 6000), phase(TargetEdge, 200, 3500, edgeCPU),
	}}
	rep.evaluate()
	want := []string{
		"edge ÷ direct Connect (JSON), calls/s at 8 callers",
		"edge CPU µs per tools/call",
		"CPU µs per tools/call, edge + services (audit's outcome records included)",
		"tasks service CPU µs per Get through the edge",
		"edge peak RSS MB at 200 callers",
		"edge p99 ÷ p50 at 200 callers",
	}
	if diff := cmp.Diff(want, names(rep.Targets)); diff != "" {
		t.Errorf("judged targets (-want +got):\n%s", diff)
	}
	if len(rep.Unmeasured) != 8 {
		t.Errorf("unmeasured = %q, want the bare hop, the capable client's two, the session's two, the two writes and the stock server's", rep.Unmeasured)
	}
	if got := rep.Targets[0]; got.Got != 0.5 || got.Met {
		t.Errorf("edge ÷ direct = %+v, want 0.5, missed", got)
	}
}

// A ratio target is the median of each round's ratio: on a machine that
// slows down from round to round, the median calls/s of each side would
// pair one round's edge with another's bare hop.
func TestRatiosPairThePhasesOfOneRound(t *testing.T) {
	phase := func(round int, target string, rate float64) Phase {
		return Phase{Target: target, Round: round, Result: LoadResult{Callers: 8, CallsPerSecond: rate, P50Ms: 1, P99Ms: 2}}
	}
	// Listed out of order: rounds pair by number, not by position.
	rep := &Report{Callers: 8, Phases: []Phase{
		phase(2, TargetBareHop, 2000), phase(2, TargetEdge, 1900),
		phase(1, TargetBareHop, 4000), phase(1, TargetEdge, 3600),
		phase(3, TargetBareHop, 3000), phase(3, TargetEdge, 2100),
		phase(3, TargetEdgeWrite, 900), // no direct write in round 3
		phase(1, TargetDirectWrite, 1000), phase(1, TargetEdgeWrite, 800),
	}}
	rep.evaluate()
	byName := map[string]Target{}
	for _, t := range rep.Targets {
		byName[t.Name] = t
	}
	rhop := byName["edge ÷ bare hop (Rhop), calls/s at 8 callers"]
	// Rounds 0.90, 0.95, 0.70: median 0.90 (the medians of each side,
	// 2,100 ÷ 3,000, would say 0.70).
	if diff := cmp.Diff([]float64{0.9, 0.95, 0.7}, rhop.Rounds, cmpopts.EquateApprox(0, 1e-9)); diff != "" || math.Abs(rhop.Got-0.9) > 1e-9 || !rhop.Met {
		t.Errorf("Rhop = %+v, want 0.90 met, by round 0.90 0.95 0.70 (-want +got rounds):\n%s", rhop, diff)
	}
	write := byName["memory_save through the edge ÷ Save direct, calls/s at 8 callers"]
	if diff := cmp.Diff([]float64{0.8}, write.Rounds); diff != "" || write.Got != 0.8 || write.Met {
		t.Errorf("write ratio = %+v, want 0.80 missed from round 1 alone, the only round with both phases", write)
	}
	cpu := byName["edge CPU µs per tools/call"]
	if len(cpu.Rounds) != 3 {
		t.Errorf("edge CPU by round = %v, want one figure a round", cpu.Rounds)
	}
	var out strings.Builder
	rep.print(&out)
	if !strings.Contains(out.String(), "0.90 0.95 0.70") {
		t.Errorf("the report does not show Rhop by round:\n%s", out.String())
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
	m, err := memory(pid, true)
	if err != nil || m.rss <= 0 || m.hwm < m.rss || m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.rss {
		t.Errorf("memory: %+v KiB, %v; want rss ≤ hwm and anon + file ≤ rss, all above 0", m, err)
	}
	// This process shares libc's pages with the rest of the machine at the
	// least, so its share is above 0 and below what it maps.
	if _, err := os.Stat("/proc/self/smaps_rollup"); err == nil && (m.pss <= 0 || m.pss > m.rss) {
		t.Errorf("memory: PSS %d KiB with RSS %d KiB; want 0 < PSS ≤ RSS", m.pss, m.rss)
	}
}

// TestSamplerReadsPSSFromItsFirstSample: PSS is read only every pssEvery
// samples, so that a phase shorter than that still reports its peak PSS,
// the first sample reads it; the samples in between read status alone.
func TestSamplerReadsPSSFromItsFirstSample(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps_rollup"); err != nil {
		t.Skipf("no smaps_rollup: %v", err)
	}
	pid := os.Getpid()
	if m, err := memory(pid, false); err != nil || m.rss <= 0 || m.pss != 0 {
		t.Errorf("memory without PSS: %+v KiB, %v; want RSS and no PSS", m, err)
	}
	peaks := sampleRSS([]int{pid}, time.Hour, 1000).Stop()
	if p := peaks[pid]; p.pss <= 0 || p.rss <= 0 {
		t.Errorf("one sample of a sampler reading PSS every 1000: peaks %+v KiB; want PSS and RSS", p)
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
