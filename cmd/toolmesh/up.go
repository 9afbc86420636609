package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/childproc"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/supervise"
	"github.com/toolmesh/toolmesh/internal/temporaldev"
)

// Defaults of the restart policy of `toolmesh up`.
const (
	defaultRestartLimit  = 5
	defaultRestartWindow = time.Minute
)

// upConfig is the configuration of `toolmesh up`.
type upConfig struct {
	mesh          func() (meshConfig, error)
	statusAddr    string
	restartLimit  int
	restartWindow time.Duration
}

func bindUp(s *config.Set, getenv func(string) string) *upConfig {
	c := &upConfig{mesh: bindMesh(s, getenv)}
	bindStatusAddr(s, &c.statusAddr, "address of the status page (/, /status.json, /metrics, /healthz); \"off\": none")
	s.Int(&c.restartLimit, defaultRestartLimit, config.Opt{Flag: "restart-limit", Env: "TOOLMESH_UP_RESTART_LIMIT",
		Usage: "stop the mesh when one process fails more than this many times within --restart-window"})
	s.Duration(&c.restartWindow, defaultRestartWindow, config.Opt{Flag: "restart-window", Env: "TOOLMESH_UP_RESTART_WINDOW",
		Usage: "the window of --restart-limit; a process that ran well for this long restarts after the shortest backoff again"})
	return c
}

// bindStatusAddr binds --status-addr of up and up status.
func bindStatusAddr(s *config.Set, p *string, usage string) {
	s.String(p, "", config.Opt{Flag: "status-addr", Env: "TOOLMESH_UP_STATUS_ADDR", Usage: usage,
		Default: fmt.Sprintf("127.0.0.1:%d plus --port-offset", upStatusPort)})
}

// runUp starts the plan of meshPlan in order — each process once its deps
// are ready — prints where everything is, and keeps every process running
// (internal/supervise): a process that exits is restarted on its own, after
// a backoff, and up stops everything only on Ctrl-C or when one process
// keeps failing. `toolmesh up status` prints the processes' state.
func runUp(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, log *slog.Logger) error {
	if len(args) > 0 && args[0] == "status" {
		return runUpStatus(ctx, args[1:], getenv, stdout, stderr)
	}
	s := cli.NewConfig("up", getenv, stderr)
	c := bindUp(s, getenv)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("up takes no arguments (but the command status), got %q", s.FlagSet().Args())
	}
	statusAddr, limit, window, meshCfg := &c.statusAddr, &c.restartLimit, &c.restartWindow, c.mesh
	if *limit < 1 || *window <= 0 {
		return errors.New("--restart-limit must be at least 1 and --restart-window positive")
	}
	cfg, err := meshCfg()
	if err != nil {
		return err
	}
	plan, err := meshPlan(cfg)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	// Say now, not from inside a child, that the Temporal CLI is missing.
	if _, err := temporalBinary(cfg.TemporalBin, self); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if *statusAddr == "" {
		*statusAddr = fmt.Sprintf("127.0.0.1:%d", upStatusPort+cfg.PortOffset)
	}
	// Listen first: a busy status port fails before anything starts.
	var statusLis net.Listener
	if *statusAddr != "off" {
		if statusLis, err = server.Listen(*statusAddr); err != nil {
			return err
		}
		defer statusLis.Close()
	}

	var procs []supervise.Process
	for _, p := range plan {
		if p.Once {
			if err := childCommand(self, p).Run(); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			continue
		}
		procs = append(procs, supervise.Process{
			Name:         p.Name,
			Group:        p.Label,
			Command:      func() *exec.Cmd { return childCommand(self, p) },
			Ready:        func(ctx context.Context) error { return httpOK(ctx, p.Probe.URL()) },
			ReadyTimeout: p.readyTimeout,
			Needs:        p.needs,
		})
	}
	sup, err := supervise.New(procs, supervise.Policy{Limit: *limit, Window: *window}, log.With("component", "up"))
	if err != nil {
		return err
	}
	if statusLis != nil {
		stop, err := serveUpStatus(ctx, statusLis, sup, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	err = sup.Run(ctx, func() { printUp(stdout, cfg, plan, self, statusLis) })
	if gaveUp, ok := errors.AsType[*supervise.GaveUpError](err); ok {
		err = fmt.Errorf("%w; stopped the mesh (see the process's log above; --restart-limit and --restart-window allow more)", gaveUp)
	}
	fmt.Fprintln(stdout, "toolmesh stopped")
	return err
}

// childCommand is one run of p: this binary with p's arguments and
// environment, its output on our stderr, in its own process group so that
// Ctrl-C reaches it through us, in order, rather than all at once from the
// terminal.
func childCommand(self string, p meshProcess) *exec.Cmd {
	cmd := exec.Command(self, p.Args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = os.Environ()
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		cmd.Env = append(cmd.Env, k+"="+p.Env[k])
	}
	cmd.SysProcAttr = childproc.Attr()
	return cmd
}

// printUp tells where everything is.
func printUp(stdout io.Writer, cfg meshConfig, plan []meshProcess, self string, status net.Listener) {
	fmt.Fprintf(stdout, "\ntoolmesh is up (data in %s)\n\n", cfg.DataDir)
	var tasksAddr string
	// The console's and the edge's links first: they are what a user wants.
	for _, p := range slices.Backward(plan) {
		for _, l := range p.Links {
			note := ""
			if p.Name == procEdge && l.Name == linkMCP {
				note = fmt.Sprintf("  (calls act as agent %q)", cfg.DevAgent)
			}
			if p.Name == procConsole && l.Name == linkConsole {
				note = "  (the owner's inbox: answer the agents' asks; no sign-in on loopback)"
			}
			if p.Name == procEdge && l.Name == linkA2A {
				note = "  (every agent at /a2a/agents/<id>/; card: .well-known/agent-card.json)"
			}
			fmt.Fprintf(stdout, "  %-14s %s%s\n", l.Name, l.URL, note)
		}
	}
	fmt.Fprintf(stdout, "  %-14s 127.0.0.1:%d  (gRPC frontend, namespace %s, state in %s)\n", "Temporal", cfg.TemporalPort,
		temporaldev.DefaultNamespace, cli.DataFile(cfg.DataDir, temporaldev.DBFileName))
	fmt.Fprintf(stdout, "  %-14s calls that lack inputs ask the user; their workflows: ToolmeshKind=\"call\" (abandoned: ToolmeshStatus=\"abandoned\")\n", "Elicitation")
	// The services in the order of their names (plan is in start order).
	var services []meshProcess
	for _, p := range plan {
		if p.Label == labelServices {
			services = append(services, p)
		}
	}
	slices.SortFunc(services, func(a, b meshProcess) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range services {
		addr := net.JoinHostPort(p.Probe.Host, strconv.Itoa(p.Probe.Port))
		if p.Name == "tasks" {
			tasksAddr = addr
		}
		protocols := "Connect, gRPC, gRPC-Web, REST /v1/..., /metrics"
		if domains[p.Name].noREST {
			protocols = "Connect, gRPC, gRPC-Web, /metrics"
		}
		fmt.Fprintf(stdout, "  %-14s http://%s  (%s)\n", p.Name, addr, protocols)
	}
	if tasksAddr != "" {
		tokenCmd := fmt.Sprintf("%s token --agent %s", self, cfg.DevAgent)
		if cfg.DataDir != ".toolmesh" {
			tokenCmd += " --data " + cfg.DataDir
		}
		fmt.Fprintf(stdout, "\n  Call a service directly with a mesh token:\n    grpcurl -plaintext -H \"authorization: Bearer $(%s)\" \\\n      -d '{\"description\":\"try the mesh\"}' %s toolmesh.tasks.v1.TasksService/Create\n", tokenCmd, tasksAddr)
	}
	if status != nil {
		cmd := "toolmesh up status"
		if cfg.PortOffset != 0 {
			cmd += fmt.Sprintf(" --port-offset %d", cfg.PortOffset)
		}
		fmt.Fprintf(stdout, "\n  Processes and restarts: %s, or http://%s/\n", cmd, status.Addr())
	}
	fmt.Fprintf(stdout, "\nPress Ctrl-C to stop.\n\n")
}

// waitHealthy polls url until it answers 200, the process dies, the timeout
// passes or ctx ends.
func waitHealthy(ctx context.Context, url string, dead <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := httpOK(ctx, url)
		if err == nil {
			return nil
		}
		select {
		case <-dead:
			return errors.New("the process exited (see its log above)")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// httpOK checks once, within a second, that url answers GET with 200.
func httpOK(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return checkHealth(ctx, url)
}

// temporalBinary finds the pinned Temporal CLI: the given path, else
// `temporal` next to this binary (make run builds both into ./bin), else
// bin/temporal under the working directory (go run ./cmd/toolmesh up from the
// repository root).
func temporalBinary(given, self string) (string, error) {
	if given != "" {
		return given, nil
	}
	candidates := []string{filepath.Join(filepath.Dir(self), "temporal"), filepath.Join("bin", "temporal")}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("temporal CLI not found at %s or %s: run make tools, or pass --temporal-bin", candidates[0], candidates[1])
}
