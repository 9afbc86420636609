package tilt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// serving is one resource started the way Tilt starts a serve_cmd: a shell
// in a new session (its own process group), output to a log; stopped with
// SIGTERM to the group, then SIGKILL after a grace period.
type serving struct {
	r    *resource
	cmd  *exec.Cmd
	log  *logtest.Buffer
	dead chan struct{}
}

// tail returns the last 4000 bytes of a process's output.
func tail(log *logtest.Buffer) string {
	s := log.String()
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

func start(argv []string, dir string, env map[string]string) (*exec.Cmd, *logtest.Buffer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	log := &logtest.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, log, cmd.Start()
}

func (s *serving) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.dead:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM; killing its process group", s.r.Name)
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.dead
	}
	// Tilt kills whatever is left in the group once the main process ends.
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
}

// probeOnce is Tilt's HTTP GET probe: success on 200-399.
func probeOnce(ctx context.Context, p *tiltProbe) error {
	g := p.HTTPGet
	url := fmt.Sprintf("%s://%s%s", g.Scheme, net.JoinHostPort(g.Host, strconv.Itoa(g.Port)), g.Path)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.TimeoutSecs)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// processesIn lists the pids whose working directory is under dir.
func processesIn(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// TestTiltServeCmdsStartTheMesh runs every process resource of the Tiltfile
// the way Tilt would — cmd to completion, serve_cmd under a shell, each after
// its resource_deps are ready, ready when its probe passes — then calls a
// tool through the edge, stops everything and checks nothing is left.
func TestTiltServeCmdsStartTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "bin", "temporal")); err != nil {
		t.Fatalf("the pinned Temporal CLI is missing (make tools): %v", err)
	}
	dir := checkout(t)
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	offset := porttest.FreeOffset(t, append(porttest.Range(7100, 7300), 8233)...)
	run, err := execTiltfile(filepath.Join(dir, "Tiltfile"), map[string]string{
		"port-offset": strconv.Itoa(offset),
		"data":        "mesh data", // a path the shell must keep in one piece
	})
	if err != nil {
		t.Fatalf("Tiltfile: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ready := map[string]bool{"build": true, "generate": true} // bin/toolmesh is built
	var started []*serving
	defer func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop(t)
		}
		if left := processesIn(dir); len(left) > 0 {
			t.Errorf("processes left behind after every resource stopped:\n%s", strings.Join(left, "\n"))
		}
	}()
	logs := func() string {
		var b strings.Builder
		for _, s := range started {
			fmt.Fprintf(&b, "--- %s\n%s\n", s.r.Name, tail(s.log))
		}
		return b.String()
	}
	for _, r := range run.Resources {
		if r.Name == "build" || r.Name == "generate" {
			continue
		}
		for _, d := range r.ResourceDeps {
			if !ready[d] {
				t.Fatalf("%s starts before its dependency %s is ready", r.Name, d)
			}
		}
		if r.Cmd != nil {
			cmd, log, err := start(r.Cmd, r.Dir, r.Env)
			if err == nil {
				err = cmd.Wait()
			}
			if err != nil {
				t.Fatalf("%s: cmd %q: %v\n%s", r.Name, r.Cmd, err, tail(log))
			}
		}
		if r.ServeCmd == nil {
			ready[r.Name] = true
			continue
		}
		cmd, log, err := start(r.ServeCmd, r.Dir, r.ServeEnv)
		if err != nil {
			t.Fatalf("%s: serve_cmd %q: %v", r.Name, r.ServeCmd, err)
		}
		s := &serving{r: r, cmd: cmd, log: log, dead: make(chan struct{})}
		started = append(started, s)
		go func() { _ = cmd.Wait(); close(s.dead) }()
		for {
			err := probeOnce(ctx, r.Probe)
			if err == nil {
				break
			}
			select {
			case <-s.dead:
				t.Fatalf("%s exited before its probe passed (%v)\n%s", r.Name, err, logs())
			case <-ctx.Done():
				t.Fatalf("%s: probe never passed: %v\n%s", r.Name, err, logs())
			case <-time.After(200 * time.Millisecond):
			}
		}
		ready[r.Name] = true
	}

	// The mesh works: a tool call through the edge reaches a service that
	// checks its caller against the agents directory with the mesh key.
	edge := run.resource("edge")
	if edge == nil || len(edge.Links) == 0 {
		t.Fatal("no edge resource with an MCP link")
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "tilt-e2e", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: edge.Links[0].URL}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v\n%s", edge.Links[0].URL, err, logs())
	}
	defer session.Close()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "started by Tilt"}})
	if err != nil {
		t.Fatalf("tasks_create: %v", err)
	}
	var env struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "ok" || res.IsError {
		t.Fatalf("tasks_create through the edge: %s\n%s", b, logs())
	}
	if err := session.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("close session: %v", err)
	}
	// The data stays in the Tiltfile's directory, under --data.
	if _, err := os.Stat(filepath.Join(dir, "mesh data", "tasks.db")); err != nil {
		t.Errorf("tasks database not under the --data dir: %v", err)
	}
}
