package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/childproc"
	"github.com/toolmesh/toolmesh/internal/temporaldev"
)

// child is a running process of `toolmesh up`.
type child struct {
	meshProcess
	cmd  *exec.Cmd
	dead chan struct{} // closed once it has exited and been reaped
}

// runUp starts the plan of meshPlan in order — each process once its deps
// are ready — prints where everything is, and stops it all, in reverse, when
// ctx ends or a process dies.
func runUp(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	meshCfg := addMeshFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("up takes no arguments, got %q", fs.Args())
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

	var started []*child
	exited := make(chan string, len(plan))
	for _, p := range plan {
		c := &child{meshProcess: p, dead: make(chan struct{})}
		c.cmd = exec.Command(self, p.Args...)
		c.cmd.Stdout, c.cmd.Stderr = os.Stderr, os.Stderr
		c.cmd.Env = os.Environ()
		for _, k := range slices.Sorted(maps.Keys(p.Env)) {
			c.cmd.Env = append(c.cmd.Env, k+"="+p.Env[k])
		}
		// Children get their own process group so Ctrl-C reaches them
		// through us, in order, rather than all at once from the terminal.
		c.cmd.SysProcAttr = childproc.Attr()
		if p.Once {
			if err := c.cmd.Run(); err != nil {
				stopChildren(started, log)
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			continue
		}
		if err := c.cmd.Start(); err != nil {
			stopChildren(started, log)
			return fmt.Errorf("start %s: %w", p.Name, err)
		}
		started = append(started, c)
		go func() {
			_ = c.cmd.Wait()
			close(c.dead)
			exited <- c.Name
		}()
		if err := waitHealthy(ctx, p.Probe.URL(), c.dead, p.readyTimeout); err != nil {
			stopChildren(started, log)
			return fmt.Errorf("%s did not become ready: %w", p.Name, err)
		}
	}
	printUp(stdout, cfg, plan, self)

	var failed error
	select {
	case <-ctx.Done():
	case name := <-exited:
		failed = fmt.Errorf("%s exited unexpectedly", name)
	}
	log.Info("up.stopping")
	stopChildren(started, log)
	fmt.Fprintln(stdout, "toolmesh stopped")
	return failed
}

// stopChildren stops the running children in reverse start order, one
// label at a time (the edge, then the workers, the services, Temporal last),
// so that nothing loses what it uses while it shuts down.
func stopChildren(started []*child, log *slog.Logger) {
	const grace = 20 * time.Second
	for end := len(started); end > 0; {
		begin := end - 1
		for begin > 0 && started[begin-1].Label == started[end-1].Label {
			begin--
		}
		tier := started[begin:end]
		for _, c := range tier {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
		deadline := time.After(grace)
		for _, c := range tier {
			select {
			case <-c.dead:
			case <-deadline:
				log.Warn("up.stop_timeout", "process", c.Name, "after", grace.String())
				_ = c.cmd.Process.Kill()
				<-c.dead
			}
		}
		end = begin
	}
}

// printUp tells where everything is.
func printUp(stdout io.Writer, cfg meshConfig, plan []meshProcess, self string) {
	fmt.Fprintf(stdout, "\ntoolmesh is up (data in %s)\n\n", cfg.DataDir)
	var tasksAddr string
	// The edge's link (the MCP endpoint) first: it is what a user wants.
	for _, p := range slices.Backward(plan) {
		for _, l := range p.Links {
			note := ""
			if p.Name == procEdge && l.Name == linkMCP {
				note = fmt.Sprintf("  (calls act as agent %q)", cfg.DevAgent)
			}
			if p.Name == procEdge && l.Name == linkA2A {
				note = "  (every agent at /a2a/agents/<id>/; card: .well-known/agent-card.json)"
			}
			fmt.Fprintf(stdout, "  %-14s %s%s\n", l.Name, l.URL, note)
		}
	}
	fmt.Fprintf(stdout, "  %-14s 127.0.0.1:%d  (gRPC frontend, namespace %s, state in %s)\n", "Temporal", cfg.TemporalPort,
		temporaldev.DefaultNamespace, filepath.Join(cfg.DataDir, temporaldev.DBFileName))
	fmt.Fprintf(stdout, "  %-14s calls that lack inputs ask the user; their workflows: ToolmeshKind=\"call\" (abandoned: ToolmeshStatus=\"abandoned\")\n", "Elicitation")
	for _, p := range plan {
		if p.Label != labelServices {
			continue
		}
		addr := net.JoinHostPort(p.Probe.Host, strconv.Itoa(p.Probe.Port))
		if p.Name == "tasks" {
			tasksAddr = addr
		}
		fmt.Fprintf(stdout, "  %-14s http://%s  (Connect, gRPC, gRPC-Web, REST /v1/..., /metrics)\n", p.Name, addr)
	}
	if tasksAddr != "" {
		tokenCmd := fmt.Sprintf("%s token --agent %s", self, cfg.DevAgent)
		if cfg.DataDir != ".toolmesh" {
			tokenCmd += " --data " + cfg.DataDir
		}
		fmt.Fprintf(stdout, "\n  Call a service directly with a mesh token:\n    grpcurl -plaintext -H \"authorization: Bearer $(%s)\" \\\n      -d '{\"description\":\"try the mesh\"}' %s toolmesh.tasks.v1.TasksService/Create\n", tokenCmd, tasksAddr)
	}
	fmt.Fprintf(stdout, "\nPress Ctrl-C to stop.\n\n")
}

// waitHealthy polls url until it answers 200, the process dies, the timeout
// passes or ctx ends.
func waitHealthy(ctx context.Context, url string, dead <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-dead:
			return errors.New("the process exited (see its log above)")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("health check did not answer 200")
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
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
