package benchmesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is one bench run.
type Config struct {
	// RepoDir is the module's root, where the binaries are built from.
	RepoDir string
	// TemporalBin is the pinned Temporal CLI (default RepoDir/bin/temporal).
	TemporalBin string
	// WorkDir holds the binaries, the mesh's data and the logs (default: a
	// new temporary directory, removed after a successful run).
	WorkDir string
	// Callers is the number of concurrent callers of the throughput phases.
	Callers int
	// Duration is how long each phase's callers call.
	Duration time.Duration
	// Warmup is how long each phase's target is called before it is
	// measured (fills connection pools, caches and the heap).
	Warmup time.Duration
	// HeavyCallers is the number of callers of the second set of phases
	// (edge memory and tail latency under many callers); 0 skips them.
	HeavyCallers int
	// OverheadCallers are the numbers of callers of the overhead table:
	// the edge and direct Connect (JSON), each at every number here other
	// than Callers (whose phases the table reuses).
	OverheadCallers []int
	// Rounds repeats every phase, interleaved, so that a noisy machine
	// hurts every target alike; the targets use the median.
	Rounds int
	// ProfileDir, when set, starts the mesh with --pprof and saves CPU and
	// allocation profiles of the edge and the tasks service taken during
	// the first edge phase (figures from such a run include the
	// profiler's cost).
	ProfileDir string
	// Targets limits the run to these targets (default: all of them).
	Targets []string
	// Out is the JSON report's path ("" for none).
	Out string
}

// A phase drives one target with one number of callers.
type phaseSpec struct {
	name    string // Target* below
	kind    string
	callers int
}

// Targets of a phase.
const (
	TargetEdge        = "edge"
	TargetDirectJSON  = "direct-json"
	TargetDirectProto = "direct-proto"
	TargetStock       = "stock-sdk"
	// TargetEdgeCapable is TargetEdge's call from a client that can answer
	// questions, as most MCP clients in use declare.
	TargetEdgeCapable = "edge-capable"
	// TargetEdgeSession is TargetEdge's call within a session of the
	// 2025-11-25 protocol, which most MCP clients speak today.
	TargetEdgeSession = "edge-session"
	// TargetBareHop is the direct Connect (JSON) Get through a bare
	// reverse proxy (Hop): the floor of any separate hop.
	TargetBareHop = "bare-hop"
	// TargetEdgeWrite is tools/call memory_save through the edge, and
	// TargetDirectWrite the same Save straight to the memory service.
	TargetEdgeWrite   = "edge-write"
	TargetDirectWrite = "direct-write"
	// TargetEdgeAdminWrite is tools/call agents_set_status through the
	// edge from a client that is asked for the confirmation and gives it
	// (two requests, carried by a workflow), and TargetDirectAdminWrite
	// the same SetStatus straight to the agents service.
	TargetEdgeAdminWrite   = "edge-admin-write"
	TargetDirectAdminWrite = "direct-admin-write"
)

// Run builds the binaries, starts the mesh and the stock server, runs
// every phase and reports. It returns the report; progress and the
// table go to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if cfg.Callers < 1 || cfg.Duration <= 0 || cfg.Rounds < 1 || cfg.HeavyCallers < 0 || cfg.Warmup < 0 {
		return nil, errors.New("bench-mesh: callers, duration and rounds must be positive")
	}
	for _, c := range cfg.OverheadCallers {
		if c < 1 {
			return nil, fmt.Errorf("bench-mesh: overhead callers must be positive, not %d", c)
		}
	}
	if _, err := os.ReadFile("/proc/self/stat"); err != nil {
		return nil, fmt.Errorf("bench-mesh reads /proc (Linux only): %w", err)
	}
	if cfg.TemporalBin == "" {
		cfg.TemporalBin = filepath.Join(cfg.RepoDir, "bin", "temporal")
	}
	if _, err := os.Stat(cfg.TemporalBin); err != nil {
		return nil, fmt.Errorf("the pinned Temporal CLI is missing (make tools): %w", err)
	}
	keep := cfg.WorkDir != ""
	if !keep {
		dir, err := os.MkdirTemp("", "bench-mesh-")
		if err != nil {
			return nil, err
		}
		cfg.WorkDir = dir
	} else if err := os.MkdirAll(cfg.WorkDir, 0o750); err != nil {
		return nil, err
	}
	rep, err := run(ctx, cfg, out)
	if err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, cfg.WorkDir)
	}
	if !keep {
		os.RemoveAll(cfg.WorkDir)
	}
	return rep, nil
}

func run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	bins := filepath.Join(cfg.WorkDir, "bin")
	fmt.Fprintln(out, "building toolmesh, the load generator and the stock go-sdk server")
	build := exec.CommandContext(ctx, "go", "build", "-o", bins+string(filepath.Separator),
		"./cmd/toolmesh", "./cmd/benchmesh", "./cmd/benchmesh/stocksdk")
	build.Dir = cfg.RepoDir
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, b)
	}
	toolmesh := filepath.Join(bins, "toolmesh")
	// The processes measured map their binary as a deployed one does.
	for _, name := range []string{"toolmesh", "benchmesh", "stocksdk"} {
		if err := dropFromPageCache(filepath.Join(bins, name)); err != nil {
			return nil, err
		}
	}

	m, err := startMesh(ctx, toolmesh, cfg.TemporalBin, cfg.WorkDir, cfg.ProfileDir != "", out)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	taskID, err := m.createTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("create the task to read: %w", err)
	}
	tokenFile := filepath.Join(cfg.WorkDir, "token")
	tok, err := exec.CommandContext(ctx, toolmesh, "token", "--agent", "local", "--data", filepath.Join(cfg.WorkDir, "data"), "--ttl", "2h").Output()
	if err != nil {
		return nil, fmt.Errorf("toolmesh token: %w", err)
	}
	if err := os.WriteFile(tokenFile, tok, 0o600); err != nil {
		return nil, err
	}
	stock, stockURL, stockDebug, err := startStock(ctx, filepath.Join(bins, "stocksdk"), m.tasksURL, tokenFile, filepath.Join(cfg.WorkDir, "stocksdk.log"), cfg.ProfileDir != "")
	if err != nil {
		return nil, err
	}
	debugURLs := maps.Clone(m.debugURLs)
	debugURLs["stock-sdk"] = stockDebug
	defer stopProcess(stock)
	hop, hopURL, err := startHop(ctx, filepath.Join(bins, "benchmesh"), m.tasksURL, filepath.Join(cfg.WorkDir, "hop.log"))
	if err != nil {
		return nil, err
	}
	defer stopProcess(hop)
	procs := map[string]int{"edge": m.pids["edge"], "tasks": m.pids["tasks"], "memory": m.pids["memory"], "stock-sdk": stock.Process.Pid, "bare-hop": hop.Process.Pid}
	for _, name := range []string{"agents", "audit", "worker-calls", "temporal"} {
		if pid := m.pids[name]; pid != 0 {
			procs[name] = pid
		}
	}

	urls := map[string]string{TargetEdge: m.edgeURL, TargetEdgeCapable: m.edgeURL, TargetEdgeSession: m.edgeURL, TargetStock: stockURL, TargetDirectJSON: m.tasksURL, TargetDirectProto: m.tasksURL, TargetBareHop: hopURL,
		TargetEdgeWrite: m.edgeURL, TargetDirectWrite: m.memoryURL, TargetEdgeAdminWrite: m.edgeURL, TargetDirectAdminWrite: m.agentsURL}
	specs := []phaseSpec{
		{TargetDirectJSON, KindConnectJSON, cfg.Callers},
		{TargetDirectProto, KindConnectProto, cfg.Callers},
		{TargetBareHop, KindConnectJSON, cfg.Callers},
		{TargetEdge, KindMCP, cfg.Callers},
		{TargetEdgeCapable, KindMCPCapable, cfg.Callers},
		{TargetEdgeSession, KindMCPSession, cfg.Callers},
		{TargetStock, KindMCP, cfg.Callers},
		{TargetDirectWrite, KindConnectJSONWrite, cfg.Callers},
		{TargetEdgeWrite, KindMCPWrite, cfg.Callers},
		{TargetDirectAdminWrite, KindConnectJSONAdminWrite, cfg.Callers},
		{TargetEdgeAdminWrite, KindMCPAdminWrite, cfg.Callers},
	}
	for _, c := range cfg.OverheadCallers {
		if c != cfg.Callers && c != cfg.HeavyCallers {
			specs = append(specs, phaseSpec{TargetDirectJSON, KindConnectJSON, c}, phaseSpec{TargetEdge, KindMCP, c})
		}
	}
	if cfg.HeavyCallers > 0 {
		specs = append(specs,
			phaseSpec{TargetDirectJSON, KindConnectJSON, cfg.HeavyCallers},
			phaseSpec{TargetEdge, KindMCP, cfg.HeavyCallers},
			phaseSpec{TargetStock, KindMCP, cfg.HeavyCallers})
	}
	if len(cfg.Targets) > 0 {
		for _, t := range cfg.Targets {
			if _, ok := urls[t]; !ok {
				return nil, fmt.Errorf("unknown target %q (targets: %s)", t, strings.Join(slices.Sorted(maps.Keys(urls)), ", "))
			}
		}
		specs = slices.DeleteFunc(specs, func(s phaseSpec) bool { return !slices.Contains(cfg.Targets, s.name) })
	}
	rep := &Report{
		Time: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		Callers: cfg.Callers, HeavyCallers: cfg.HeavyCallers, OverheadCallers: cfg.OverheadCallers, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds,
		Profiled: cfg.ProfileDir != "",
	}
	if c, err := exec.CommandContext(ctx, "git", "-C", cfg.RepoDir, "rev-parse", "--short", "HEAD").Output(); err == nil {
		rep.Commit = strings.TrimSpace(string(c))
	}
	admin := m.adminAgents(strings.TrimSpace(string(tok)))
	if slices.ContainsFunc(specs, func(s phaseSpec) bool { return isAdmin(s.name) }) {
		if err := admin.register(ctx); err != nil {
			return nil, err
		}
	}
	profiled := map[string]bool{}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, s := range specs {
			l := loader{bin: filepath.Join(bins, "benchmesh"), url: urls[s.name], kind: s.kind, taskID: taskID, tokenFile: tokenFile, callers: s.callers}
			if cfg.Warmup > 0 {
				if isAdmin(s.name) {
					if err := admin.activate(ctx); err != nil {
						return nil, err
					}
				}
				if _, _, err := l.run(ctx, cfg.Warmup); err != nil {
					return nil, fmt.Errorf("%s warm-up: %w", s.name, err)
				}
			}
			if isAdmin(s.name) {
				if err := admin.activate(ctx); err != nil {
					return nil, err
				}
			}
			var profile func() error
			if cfg.ProfileDir != "" && !profiled[s.name] && s.callers == cfg.Callers {
				profiled[s.name] = true
				profile = startProfiles(ctx, debugURLs, cfg.ProfileDir, s.name, cfg.Duration, onPath(s.name)...)
			}
			p, err := measure(ctx, l, cfg.Duration, procs)
			if err != nil {
				return nil, fmt.Errorf("%s with %d callers: %w", s.name, s.callers, err)
			}
			if profile != nil {
				if err := profile(); err != nil {
					return nil, err
				}
				fmt.Fprintf(out, "profiles of %s in %s\n", s.name, cfg.ProfileDir)
			}
			p.Target, p.Round = s.name, round
			rep.Phases = append(rep.Phases, p)
			fmt.Fprintln(out, p.line())
		}
	}
	rep.evaluate()
	rep.print(out)
	if cfg.Out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(cfg.Out, append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "\nwrote %s\n", cfg.Out)
	}
	return rep, nil
}

// isAdmin reports whether target's calls change the admin agents.
func isAdmin(target string) bool {
	return target == TargetEdgeAdminWrite || target == TargetDirectAdminWrite
}

// loader runs the load generator, `benchmesh load`, as its own process.
type loader struct {
	bin, url, kind, taskID, tokenFile string
	callers                           int
}

// run runs the load generator for d and returns what it measured and the
// CPU time it used itself.
func (l loader) run(ctx context.Context, d time.Duration) (LoadResult, time.Duration, error) {
	cmd := exec.CommandContext(ctx, l.bin, "load", "--kind", l.kind, "--url", l.url, "--task-id", l.taskID,
		"--token-file", l.tokenFile, "--callers", strconv.Itoa(l.callers), "--duration", d.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return LoadResult{}, 0, fmt.Errorf("load generator: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var res LoadResult
	if err := json.Unmarshal(b, &res); err != nil {
		return LoadResult{}, 0, fmt.Errorf("load generator output: %w", err)
	}
	if res.Errors > 0 {
		return res, 0, fmt.Errorf("%d of %d calls failed, the first: %s", res.Errors, res.Errors+res.Calls, res.FirstError)
	}
	if res.Calls == 0 {
		return res, 0, errors.New("no call answered")
	}
	return res, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// measure runs one phase: the load generator for d, with the CPU time of
// procs read before and after and their resident memory sampled.
func measure(ctx context.Context, l loader, d time.Duration, procs map[string]int) (Phase, error) {
	before := map[string]time.Duration{}
	for name, pid := range procs {
		t, err := cpuTime(pid)
		if err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		before[name] = t
	}
	pids := make([]int, 0, len(procs))
	for _, pid := range procs {
		pids = append(pids, pid)
	}
	p := Phase{LoadBefore: loadAverage()}
	rss := sampleRSS(pids, 50*time.Millisecond, 20) // PSS once a second
	res, loadCPU, err := l.run(ctx, d)
	peaks := rss.Stop()
	if err != nil {
		return Phase{}, err
	}
	p.LoadAfter = loadAverage()
	p.Result = res
	calls := float64(res.Calls)
	p.Processes = append(p.Processes, ProcessFigure{Name: "load", CPUMicrosPerCall: micros(loadCPU) / calls})
	for name, pid := range procs {
		t, err := cpuTime(pid)
		if err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		m, err := memory(pid, true)
		if err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		peak := peaks[pid]
		p.Processes = append(p.Processes, ProcessFigure{Name: name, CPUMicrosPerCall: micros(t-before[name]) / calls,
			RSSPeakMB: mb(peak.rss), HWMMB: mb(m.hwm), AnonPeakMB: mb(peak.anon), FilePeakMB: mb(peak.file), PSSPeakMB: mb(peak.pss)})
	}
	p.sortProcesses()
	return p, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mb(kib int) float64 { return float64(kib) / 1024 }

// startProfiles starts CPU and allocation profiles, for d, of the named
// processes that serve them (debugURLs); the returned function waits for
// them and writes them to dir as <target>.<name>.cpu.pb.gz and
// <target>.<name>.allocs.pb.gz.
func startProfiles(ctx context.Context, debugURLs map[string]string, dir, target string, d time.Duration, names ...string) func() error {
	secs := max(1, int(d.Seconds()))
	errs := make(chan error, 2*len(names))
	n := 0
	for _, name := range names {
		base, ok := debugURLs[name]
		if !ok {
			continue
		}
		for kind, path := range map[string]string{"cpu": "/debug/pprof/profile", "allocs": "/debug/pprof/allocs"} {
			n++
			go func() {
				errs <- fetch(ctx, fmt.Sprintf("%s%s?seconds=%d", base, path, secs), filepath.Join(dir, target+"."+name+"."+kind+".pb.gz"))
			}()
		}
	}
	return func() error {
		var all []error
		for range n {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("profile %s: %s: %s", url, resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
