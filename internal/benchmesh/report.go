package benchmesh

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is what one bench run measured (written as JSON).
type Report struct {
	Time         string `json:"time"`
	Commit       string `json:"commit,omitempty"`
	GoVersion    string `json:"go_version"`
	CPUs         int    `json:"cpus"`
	Callers      int    `json:"callers"`
	HeavyCallers int    `json:"heavy_callers"`
	// OverheadCallers are the numbers of callers of the overhead table.
	OverheadCallers []int   `json:"overhead_callers,omitempty"`
	Seconds         float64 `json:"seconds_per_phase"`
	Rounds          int     `json:"rounds"`
	// Profiled runs took profiles during the first edge phase: its figures
	// include the profiler's cost.
	Profiled bool     `json:"profiled,omitempty"`
	Phases   []Phase  `json:"phases"`
	Targets  []Target `json:"targets"`
	// Unmeasured names the targets this run did not judge: a phase they
	// compare was not run (--targets).
	Unmeasured []string `json:"unmeasured,omitempty"`
	// Overhead is what the edge adds to a direct Connect call, per number
	// of callers (medians over rounds).
	Overhead []Overhead `json:"overhead,omitempty"`
}

// Overhead is the latency the edge adds to the same read (tools/call
// tasks_get against TasksService.Get in Connect's JSON) at one number of
// callers: the published way to state a gateway's cost.
type Overhead struct {
	Callers int `json:"callers"`
	// AddedP50Micros and AddedP99Micros are the edge's median and 99th
	// percentile latency minus direct Connect's, in µs: the median over
	// rounds of each round's difference.
	AddedP50Micros float64 `json:"added_p50_us"`
	AddedP99Micros float64 `json:"added_p99_us"`
	// DirectRate and EdgeRate are the calls per second of each.
	DirectRate float64 `json:"direct_calls_per_s"`
	EdgeRate   float64 `json:"edge_calls_per_s"`
}

// Phase is one target driven by one number of callers.
type Phase struct {
	Target string     `json:"target"`
	Round  int        `json:"round"`
	Result LoadResult `json:"result"`
	// LoadBefore and LoadAfter are the machine's one-minute load average.
	LoadBefore float64 `json:"loadavg_before"`
	LoadAfter  float64 `json:"loadavg_after"`
	// Processes are the CPU time per call and the memory of every
	// measured process during the phase (each phase reads them all; only
	// those on the phase's path work for it).
	Processes []ProcessFigure `json:"processes"`
}

// ProcessFigure is one process during one phase.
type ProcessFigure struct {
	Name string `json:"name"`
	// CPUMicrosPerCall is the process's user + system CPU time during the
	// phase divided by the calls answered.
	CPUMicrosPerCall float64 `json:"cpu_us_per_call"`
	// RSSPeakMB is the highest resident set size sampled during the phase
	// (VmRSS, what ps shows as RSS), in MiB; HWMMB the highest since the
	// process started (VmHWM). The load generator has neither.
	RSSPeakMB float64 `json:"rss_peak_mb,omitempty"`
	HWMMB     float64 `json:"rss_hwm_mb,omitempty"`
	// AnonPeakMB and FilePeakMB are the highest RssAnon (private memory:
	// the heap, stacks) and RssFile (mapped pages of the binary, shared
	// with every process running it) sampled, each on its own.
	AnonPeakMB float64 `json:"rss_anon_peak_mb,omitempty"`
	FilePeakMB float64 `json:"rss_file_peak_mb,omitempty"`
	// PSSPeakMB is the highest proportional set size sampled: the
	// process's share of the machine's memory, each page shared with n
	// processes (the binary's, under toolmesh up) counted for 1/n.
	PSSPeakMB float64 `json:"pss_peak_mb,omitempty"`
}

// Target is one of the performance targets, as this run measured it.
type Target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
	// Rounds are the figure of each round, in order; Got is their median.
	Rounds []float64 `json:"rounds,omitempty"`
}

func (p *Phase) sortProcesses() {
	order := []string{"edge", "stock-sdk", "bare-hop", "tasks", "memory", "agents", "audit", "worker-calls", "temporal", "load"}
	slices.SortFunc(p.Processes, func(a, b ProcessFigure) int {
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
}

// front is the process a target's calls reach first: the edge, the stock
// server or the bare hop ("" when they go straight to the service).
func front(target string) string {
	return map[string]string{TargetEdge: "edge", TargetEdgeCapable: "edge", TargetEdgeSession: "edge", TargetEdgeWrite: "edge", TargetEdgeAdminWrite: "edge", TargetStock: "stock-sdk", TargetBareHop: "bare-hop"}[target]
}

// service is the domain service that answers a target's calls.
func service(target string) string {
	switch target {
	case TargetEdgeWrite, TargetDirectWrite:
		return "memory"
	case TargetEdgeAdminWrite, TargetDirectAdminWrite:
		return "agents"
	}
	return "tasks"
}

// onPath names the processes that work for a phase's calls. The edge's
// calls also reach the audit service, which records how each ended (the
// outcome log, sent in batches).
func onPath(target string) []string {
	switch target {
	case TargetEdge, TargetEdgeCapable, TargetEdgeSession:
		return []string{"edge", "tasks", "agents", "audit", "load"}
	case TargetStock:
		return []string{"stock-sdk", "tasks", "agents", "load"}
	case TargetBareHop:
		return []string{"bare-hop", "tasks", "agents", "load"}
	case TargetEdgeWrite:
		return []string{"edge", "memory", "agents", "audit", "load"}
	case TargetDirectWrite:
		return []string{"memory", "agents", "load"}
	case TargetEdgeAdminWrite:
		// The workflow that carries the call between its two requests runs
		// in the calls worker, its history in the Temporal server.
		return []string{"edge", "agents", "audit", "worker-calls", "temporal", "load"}
	case TargetDirectAdminWrite:
		return []string{"agents", "load"}
	}
	return []string{"tasks", "agents", "load"}
}

// memory is the process's peak RSS and its private and file parts.
func (f ProcessFigure) memory() string {
	return fmt.Sprintf("%.1f MB (anon %.1f, file %.1f; PSS %.1f)", f.RSSPeakMB, f.AnonPeakMB, f.FilePeakMB, f.PSSPeakMB)
}

func (p Phase) process(name string) ProcessFigure {
	for _, f := range p.Processes {
		if f.Name == name {
			return f
		}
	}
	return ProcessFigure{}
}

// line is the phase in one line of text.
func (p Phase) line() string {
	r := p.Result
	var procs []string
	for _, name := range onPath(p.Target) {
		f := p.process(name)
		s := fmt.Sprintf("%s %.0f µs", name, f.CPUMicrosPerCall)
		if f.RSSPeakMB > 0 {
			s += " " + f.memory()
		}
		procs = append(procs, s)
	}
	return fmt.Sprintf("%-12s %3d callers  %7.0f calls/s  p50 %6.2f ms  p99 %6.2f ms  load %4.1f  CPU/call: %s",
		p.Target, r.Callers, r.CallsPerSecond, r.P50Ms, r.P99Ms, p.LoadBefore, strings.Join(procs, ", "))
}

// rounds are f of the phases of target with callers, one a round, in
// order of rounds.
func (rep *Report) rounds(target string, callers int, f func(Phase) float64) []float64 {
	var ps []Phase
	for _, p := range rep.Phases {
		if p.Target == target && p.Result.Callers == callers {
			ps = append(ps, p)
		}
	}
	slices.SortStableFunc(ps, func(a, b Phase) int { return a.Round - b.Round })
	vs := make([]float64, len(ps))
	for i, p := range ps {
		vs[i] = f(p)
	}
	return vs
}

// ratios are, round by round, f of target a's phase with callers divided
// by f of target b's phase of the same round. The two ran a minute apart
// at most: a machine that slows down between rounds moves both, not
// their ratio, where the median of each over all rounds may pair a fast
// round's figure with a slow one's.
func (rep *Report) ratios(a, b string, callers int, f func(Phase) float64) []float64 {
	return rep.paired(a, b, callers, f, func(x, y float64) (float64, bool) { return x / y, y != 0 })
}

// differences are, round by round, f of target a's phase with callers
// minus f of target b's phase of the same round (as ratios pairs them).
func (rep *Report) differences(a, b string, callers int, f func(Phase) float64) []float64 {
	return rep.paired(a, b, callers, f, func(x, y float64) (float64, bool) { return x - y, true })
}

// paired combines f of the phases of targets a and b with callers, round
// by round, for the rounds that ran both; combine says whether a round
// counts.
func (rep *Report) paired(a, b string, callers int, f func(Phase) float64, combine func(x, y float64) (float64, bool)) []float64 {
	of := func(target string) map[int]float64 {
		m := map[int]float64{}
		for _, p := range rep.Phases {
			if p.Target == target && p.Result.Callers == callers {
				m[p.Round] = f(p)
			}
		}
		return m
	}
	as, bs := of(a), of(b)
	var vs []float64
	for _, r := range slices.Sorted(maps.Keys(as)) {
		if y, ok := bs[r]; ok {
			if v, ok := combine(as[r], y); ok {
				vs = append(vs, v)
			}
		}
	}
	return vs
}

// median of the phases of target with callers, by f.
func (rep *Report) median(target string, callers int, f func(Phase) float64) float64 {
	return median(rep.rounds(target, callers, f))
}

// median of vs (0 for none).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Sorted(slices.Values(vs))
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// ran reports whether a phase of target with callers was run.
func (rep *Report) ran(target string, callers int) bool {
	for _, p := range rep.Phases {
		if p.Target == target && p.Result.Callers == callers {
			return true
		}
	}
	return false
}

// evaluate fills in the targets from the phases: medians over rounds, of
// each round's ratio where a target compares two phases.
func (rep *Report) evaluate() {
	rate := func(p Phase) float64 { return p.Result.CallsPerSecond }
	cpu := func(names ...string) func(Phase) float64 {
		return func(p Phase) float64 {
			sum := 0.0
			for _, n := range names {
				sum += p.process(n).CPUMicrosPerCall
			}
			return sum
		}
	}
	c := rep.Callers
	// A target is judged only when every phase it compares was run: a
	// run of some targets (--targets) leaves the others unmeasured, not
	// missed, and not met by a figure of zero.
	rep.Targets, rep.Unmeasured = nil, nil
	judge := func(t Target, callers int, needs ...string) {
		for _, n := range needs {
			if !rep.ran(n, callers) {
				rep.Unmeasured = append(rep.Unmeasured, t.Name)
				return
			}
		}
		rep.Targets = append(rep.Targets, t)
	}
	judge(atLeast(fmt.Sprintf("edge ÷ direct Connect (JSON), calls/s at %d callers", c), 0.7, rep.ratios(TargetEdge, TargetDirectJSON, c, rate)),
		c, TargetEdge, TargetDirectJSON)
	judge(atLeast(fmt.Sprintf("edge ÷ bare hop (Rhop), calls/s at %d callers", c), 0.9, rep.ratios(TargetEdge, TargetBareHop, c, rate)),
		c, TargetEdge, TargetBareHop)
	judge(atLeast(fmt.Sprintf("edge from a client that can answer questions ÷ bare hop, calls/s at %d callers", c), 0.9, rep.ratios(TargetEdgeCapable, TargetBareHop, c, rate)),
		c, TargetEdgeCapable, TargetBareHop)
	judge(atMost("edge CPU µs per tools/call from a client that can answer questions", 150, rep.rounds(TargetEdgeCapable, c, cpu("edge"))), c, TargetEdgeCapable)
	judge(atLeast(fmt.Sprintf("edge over a 2025-11-25 session ÷ bare hop, calls/s at %d callers", c), 0.9, rep.ratios(TargetEdgeSession, TargetBareHop, c, rate)),
		c, TargetEdgeSession, TargetBareHop)
	judge(atMost("edge CPU µs per tools/call over a 2025-11-25 session", 150, rep.rounds(TargetEdgeSession, c, cpu("edge"))), c, TargetEdgeSession)
	judge(atLeast(fmt.Sprintf("memory_save through the edge ÷ Save direct, calls/s at %d callers", c), 0.85,
		rep.ratios(TargetEdgeWrite, TargetDirectWrite, c, rate)), c, TargetEdgeWrite, TargetDirectWrite)
	judge(atLeast(fmt.Sprintf("agents_set_status through the edge, its confirmation asked and given, ÷ SetStatus direct, calls/s at %d callers", c), 0.85,
		rep.ratios(TargetEdgeAdminWrite, TargetDirectAdminWrite, c, rate)), c, TargetEdgeAdminWrite, TargetDirectAdminWrite)
	judge(atLeast(fmt.Sprintf("edge ÷ stock go-sdk server, calls/s at %d callers", c), 1.0, rep.ratios(TargetEdge, TargetStock, c, rate)),
		c, TargetEdge, TargetStock)
	judge(atMost("edge CPU µs per tools/call", 150, rep.rounds(TargetEdge, c, cpu("edge"))), c, TargetEdge)
	judge(atMost("CPU µs per tools/call, edge + services (audit's outcome records included)", 400, rep.rounds(TargetEdge, c, cpu("edge", "tasks", "agents", "audit"))),
		c, TargetEdge)
	judge(atMost("tasks service CPU µs per Get through the edge", 150, rep.rounds(TargetEdge, c, cpu("tasks"))), c, TargetEdge)
	rep.Overhead = nil
	for _, n := range rep.OverheadCallers {
		p50 := func(p Phase) float64 { return p.Result.P50Ms }
		p99 := func(p Phase) float64 { return p.Result.P99Ms }
		if rep.median(TargetEdge, n, rate) == 0 || rep.median(TargetDirectJSON, n, rate) == 0 {
			continue
		}
		rep.Overhead = append(rep.Overhead, Overhead{
			Callers:        n,
			AddedP50Micros: 1000 * median(rep.differences(TargetEdge, TargetDirectJSON, n, p50)),
			AddedP99Micros: 1000 * median(rep.differences(TargetEdge, TargetDirectJSON, n, p99)),
			DirectRate:     rep.median(TargetDirectJSON, n, rate),
			EdgeRate:       rep.median(TargetEdge, n, rate),
		})
	}
	if h := rep.HeavyCallers; h > 0 {
		judge(atMost(fmt.Sprintf("edge peak RSS MB at %d callers", h), 60, rep.rounds(TargetEdge, h, func(p Phase) float64 { return p.process("edge").RSSPeakMB })),
			h, TargetEdge)
		judge(atMost(fmt.Sprintf("edge p99 ÷ p50 at %d callers", h), 3, rep.rounds(TargetEdge, h, func(p Phase) float64 {
			if p.Result.P50Ms == 0 {
				return 0
			}
			return p.Result.P99Ms / p.Result.P50Ms
		})), h, TargetEdge)
	}
}

// atLeast is a target met when the median of rounds is want or more.
func atLeast(name string, want float64, rounds []float64) Target {
	got := median(rounds)
	return Target{Name: name, Want: fmt.Sprintf("≥ %g", want), Got: got, Met: got >= want, Rounds: rounds}
}

// atMost is a target met when the median of rounds is want or less.
func atMost(name string, want float64, rounds []float64) Target {
	got := median(rounds)
	return Target{Name: name, Want: fmt.Sprintf("≤ %g", want), Got: got, Met: got <= want, Rounds: rounds}
}

// print writes the phases and the targets as tables.
func (rep *Report) print(out io.Writer) {
	fmt.Fprintf(out, "\n%s, %d CPUs, %s, %d round(s) of %g s per phase", rep.Commit, rep.CPUs, rep.GoVersion, rep.Rounds, rep.Seconds)
	if rep.Profiled {
		fmt.Fprint(out, " (profiled: figures include the profiler)")
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tcallers\tcalls/s\tp50 ms\tp99 ms\tload avg\tfront µs\tservice µs\tagents µs\taudit µs\tload gen µs\tfront RSS MB (anon, file; PSS)\t")
	for _, p := range rep.Phases {
		cpu, rss := "-", "-"
		if name := front(p.Target); name != "" {
			f := p.process(name)
			cpu, rss = fmt.Sprintf("%.0f", f.CPUMicrosPerCall), f.memory()
		}
		r := p.Result
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.1f\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", p.Target, r.Callers, r.CallsPerSecond, r.P50Ms, r.P99Ms,
			p.LoadBefore, cpu, p.process(service(p.Target)).CPUMicrosPerCall, p.process("agents").CPUMicrosPerCall, p.process("audit").CPUMicrosPerCall, p.process("load").CPUMicrosPerCall, rss)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "target\twant\tgot\t\tby round\t")
	for _, t := range rep.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED"
		}
		var rounds []string
		if len(t.Rounds) > 1 {
			for _, v := range t.Rounds {
				rounds = append(rounds, fmt.Sprintf("%.2f", v))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\t\n", t.Name, t.Want, t.Got, verdict, strings.Join(rounds, " "))
	}
	tw.Flush()
	if len(rep.Unmeasured) > 0 {
		fmt.Fprintf(out, "\nnot measured (a phase they compare was not run): %s\n", strings.Join(rep.Unmeasured, "; "))
	}
	if len(rep.Overhead) == 0 {
		return
	}
	fmt.Fprintln(out, "\nthe edge's overhead over direct Connect (tools/call tasks_get vs TasksService.Get, JSON):")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "callers\tadded p50 µs\tadded p99 µs\tdirect calls/s\tedge calls/s\t")
	for _, o := range rep.Overhead {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t\n", o.Callers, o.AddedP50Micros, o.AddedP99Micros, o.DirectRate, o.EdgeRate)
	}
	tw.Flush()
}
