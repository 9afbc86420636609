package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/childproc"
	"github.com/toolmesh/toolmesh/internal/temporaldev"
)

// process is one child of `toolmesh up`.
type process struct {
	name   string
	args   []string
	health string // URL answering 200 when ready
	cmd    *exec.Cmd
}

func runUp(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory for local state (SQLite files, logs)")
	edgeAddr := fs.String("edge-addr", "127.0.0.1:7100", "edge listen address")
	devAgent := fs.String("dev-agent", envOr(getenv, "TOOLMESH_DEV_AGENT", "local"), "agent id of the edge's calls; registered in the agents directory at start")
	temporalBin := fs.String("temporal-bin", getenv("TOOLMESH_TEMPORAL_BIN"), "path of the pinned Temporal CLI (default: temporal next to this binary, else ./bin/temporal)")
	temporalPort := fs.Int("temporal-port", 7233, "Temporal dev server frontend (gRPC) port on 127.0.0.1")
	temporalUIPort := fs.Int("temporal-ui-port", 8233, "Temporal Web UI port on 127.0.0.1 (0: no UI)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	if err := os.MkdirAll(*dataDir, 0o750); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	keyPath, pubPath, created, err := ensureMeshKeys(*dataDir)
	if err != nil {
		return err
	}
	if created {
		log.Info("up.mesh_key_created", "private", keyPath, "public", pubPath)
	}
	bin, err := temporalBinary(*temporalBin, self)
	if err != nil {
		return err
	}

	// Temporal starts first and stops last: services, workers and the edge
	// use it while they run. Its state lives in <data>/temporal.db, so a
	// restart keeps every workflow.
	temporal, err := temporaldev.Start(ctx, temporaldev.Config{
		Binary:  bin,
		Port:    *temporalPort,
		UIPort:  *temporalUIPort,
		DataDir: *dataDir,
		Log:     log.With("component", "temporal"),
	})
	if err != nil {
		return fmt.Errorf("start temporal: %w", err)
	}
	stopTemporal := func() {
		if err := temporal.Stop(); err != nil {
			log.Error("up.temporal_stop_failed", "error", err)
		}
	}

	var procs []*process
	names := make([]string, 0, len(domains))
	for n := range domains {
		names = append(names, n)
	}
	sort.Strings(names)
	// Every service refuses callers that are not registered, active agents;
	// the agents service registers the edge's development agent at start
	// (when missing), so the mesh works out of the box.
	agentsURL := fmt.Sprintf("http://127.0.0.1:%d", domains["agents"].port)
	seed := *devAgent
	if extra := getenv(agentsSeedEnv); extra != "" {
		seed += "," + extra
	}
	env := append(os.Environ(), agentsSeedEnv+"="+seed)
	edgeArgs := []string{"edge", "--addr", *edgeAddr, "--dev-agent", *devAgent, "--mesh-key", keyPath}
	for _, n := range names {
		addr := fmt.Sprintf("127.0.0.1:%d", domains[n].port)
		serveArgs := []string{"serve", n, "--addr", addr, "--data", *dataDir, "--mesh-public-key", pubPath}
		if domains[n].temporal {
			serveArgs = append(serveArgs, "--temporal", temporal.HostPort())
		}
		if !domains[n].directory {
			serveArgs = append(serveArgs, "--agents-url", agentsURL)
		}
		procs = append(procs, &process{name: n, args: serveArgs, health: "http://" + addr + "/healthz"})
		edgeArgs = append(edgeArgs, "--service", n+"=http://"+addr)
	}
	// Workers start after the services their activities call and before
	// the edge that starts their workflows.
	queues := make([]string, 0, len(workerQueues))
	for q := range workerQueues {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		health := fmt.Sprintf("127.0.0.1:%d", workerQueues[q].port)
		workerArgs := []string{"worker", q, "--temporal", temporal.HostPort(), "--health-addr", health, "--mesh-key", keyPath}
		for _, n := range names {
			workerArgs = append(workerArgs, "--service", fmt.Sprintf("%s=http://127.0.0.1:%d", n, domains[n].port))
		}
		procs = append(procs, &process{name: "worker-" + q, args: workerArgs, health: "http://" + health + "/healthz"})
	}
	procs = append(procs, &process{name: "edge", args: edgeArgs, health: "http://" + *edgeAddr + "/healthz"})

	// Children get their own process group so Ctrl-C reaches them through
	// us, in order, rather than all at once from the terminal.
	var wg sync.WaitGroup
	exited := make(chan string, len(procs))
	stopAll := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			if p := procs[i]; p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	for _, p := range procs {
		p.cmd = exec.Command(self, p.args...)
		p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
		p.cmd.Env = env
		p.cmd.SysProcAttr = childproc.Attr()
		if err := p.cmd.Start(); err != nil {
			stopAll()
			wg.Wait()
			stopTemporal()
			return fmt.Errorf("start %s: %w", p.name, err)
		}
		wg.Add(1)
		dead := make(chan struct{})
		go func(p *process) {
			defer wg.Done()
			_ = p.cmd.Wait()
			close(dead)
			exited <- p.name
		}(p)
		if err := waitHealthy(ctx, p.health, dead, 30*time.Second); err != nil {
			stopAll()
			wg.Wait()
			stopTemporal()
			return fmt.Errorf("%s did not become ready: %w", p.name, err)
		}
	}

	fmt.Fprintf(stdout, "\ntoolmesh is up (data in %s)\n\n", *dataDir)
	fmt.Fprintf(stdout, "  MCP endpoint   http://%s/mcp  (calls act as agent %q)\n", *edgeAddr, *devAgent)
	if ui := temporal.UIURL(); ui != "" {
		fmt.Fprintf(stdout, "  Temporal UI    %s\n", ui)
	}
	fmt.Fprintf(stdout, "  Temporal       %s  (gRPC frontend, namespace %s, state in %s)\n", temporal.HostPort(), temporal.Namespace(), temporal.DBPath())
	for _, n := range names {
		fmt.Fprintf(stdout, "  %-14s http://127.0.0.1:%d  (Connect, gRPC, gRPC-Web, REST /v1/...)\n", n, domains[n].port)
	}
	tokenCmd := fmt.Sprintf("%s token --agent %s", self, *devAgent)
	if *dataDir != ".toolmesh" {
		tokenCmd += " --data " + *dataDir
	}
	fmt.Fprintf(stdout, "\n  Call a service directly with a mesh token:\n    grpcurl -plaintext -H \"authorization: Bearer $(%s)\" \\\n      -d '{\"description\":\"try the mesh\"}' 127.0.0.1:%d toolmesh.tasks.v1.TasksService/Create\n", tokenCmd, domains["tasks"].port)
	fmt.Fprintf(stdout, "\nPress Ctrl-C to stop.\n\n")

	var failed error
	select {
	case <-ctx.Done():
	case name := <-exited:
		failed = fmt.Errorf("%s exited unexpectedly", name)
	case <-temporal.Done():
		failed = fmt.Errorf("temporal exited unexpectedly (see %s)", temporal.LogPath())
	}
	log.Info("up.stopping")
	stopAll()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
		<-done
	}
	stopTemporal()
	fmt.Fprintln(stdout, "toolmesh stopped")
	return failed
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
