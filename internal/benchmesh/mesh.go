package benchmesh

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/childproc"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
)

// mesh is a running `toolmesh up` and what the bench needs to know of it.
type mesh struct {
	up      *exec.Cmd
	exited  chan error
	plan    []planProcess
	pids    map[string]int // process name (edge, tasks, ...) -> pid
	edgeURL string         // the MCP endpoint
	// debugURLs are where each process serves /debug/pprof (its metrics
	// address), by process name.
	debugURLs map[string]string
	tasksURL  string
	memoryURL string
	agentsURL string
	log       string // the children's log file
}

// planProcess is the part of `toolmesh processes --json` the bench reads.
type planProcess struct {
	Name  string   `json:"name"`
	Args  []string `json:"args"`
	Probe *struct {
		Host string `json:"host"`
		Port int    `json:"port"`
	} `json:"probe"`
	Links []struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"links"`
}

// readPlan returns the processes `toolmesh up` starts with these args.
func readPlan(ctx context.Context, bin string, args ...string) ([]planProcess, error) {
	out, err := exec.CommandContext(ctx, bin, append([]string{"processes", "--json"}, args...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("toolmesh processes: %w", err)
	}
	var plan struct {
		Processes []planProcess `json:"processes"`
	}
	if err := json.Unmarshal(out, &plan); err != nil {
		return nil, fmt.Errorf("toolmesh processes: %w", err)
	}
	return plan.Processes, nil
}

// planPorts returns every port the plan's processes listen on: their
// probes, their links and the addresses and ports in their arguments.
func planPorts(plan []planProcess) []int {
	var ports []int
	add := func(p int) {
		if p > 0 && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	for _, p := range plan {
		if p.Probe != nil {
			add(p.Probe.Port)
		}
		for _, l := range p.Links {
			if u, err := url.Parse(l.URL); err == nil {
				port, _ := strconv.Atoi(u.Port())
				add(port)
			}
		}
		for i, a := range p.Args {
			if _, port, err := net.SplitHostPort(a); err == nil {
				n, _ := strconv.Atoi(port)
				add(n)
			} else if i > 0 && strings.HasSuffix(p.Args[i-1], "-port") {
				n, _ := strconv.Atoi(a)
				add(n)
			}
		}
	}
	slices.Sort(ports)
	return ports
}

// startMesh runs `toolmesh up` at a free port offset with its data in
// dir and waits until it says the mesh is up.
func startMesh(ctx context.Context, bin, temporalBin, dir string, pprof bool, progress io.Writer) (*mesh, error) {
	defaults, err := readPlan(ctx, bin)
	if err != nil {
		return nil, err
	}
	offset, err := porttest.Offset(planPorts(defaults)...)
	if err != nil {
		return nil, err
	}
	args := []string{"--port-offset", strconv.Itoa(offset), "--data", filepath.Join(dir, "data")}
	if pprof {
		args = append(args, "--pprof")
	}
	plan, err := readPlan(ctx, bin, args...)
	if err != nil {
		return nil, err
	}
	m := &mesh{plan: plan, pids: map[string]int{}, debugURLs: map[string]string{}, log: filepath.Join(dir, "up.log"), exited: make(chan error, 1)}
	for _, p := range plan {
		if p.Probe == nil {
			continue
		}
		base := fmt.Sprintf("http://%s", net.JoinHostPort(p.Probe.Host, strconv.Itoa(p.Probe.Port)))
		if slices.Contains(p.Args, "--pprof") {
			// It serves /debug/pprof beside its health check, or on its
			// metrics address (below).
			m.debugURLs[p.Name] = base
		}
		switch p.Name {
		case "tasks":
			m.tasksURL = base
		case "memory":
			m.memoryURL = base
		case "agents":
			m.agentsURL = base
		}
		for _, l := range p.Links {
			switch {
			case strings.HasSuffix(l.URL, "/mcp"):
				m.edgeURL = l.URL
			case strings.HasSuffix(l.URL, "/metrics"):
				m.debugURLs[p.Name] = strings.TrimSuffix(l.URL, "/metrics")
			}
		}
	}
	if m.edgeURL == "" || m.tasksURL == "" || m.memoryURL == "" || m.agentsURL == "" {
		return nil, errors.New("the plan of toolmesh up has no edge, no tasks, no memory or no agents service")
	}
	logFile, err := os.Create(m.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	fmt.Fprintf(progress, "starting toolmesh up --port-offset %d (log: %s)\n", offset, m.log)
	m.up = exec.Command(bin, append([]string{"up", "--temporal-bin", temporalBin}, args...)...)
	m.up.Stderr = logFile
	m.up.SysProcAttr = childproc.Attr()
	stdout, err := m.up.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := m.up.Start(); err != nil {
		return nil, fmt.Errorf("start toolmesh up: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stdout)
		for up := false; s.Scan(); {
			if !up && strings.Contains(s.Text(), "Press Ctrl-C") {
				up = true
				close(ready)
			}
		}
		m.exited <- m.up.Wait()
	}()
	select {
	case <-ready:
	case err := <-m.exited:
		m.exited <- err
		return nil, fmt.Errorf("toolmesh up exited before the mesh was up (%v); see %s", err, m.log)
	case <-time.After(3 * time.Minute):
		m.stop()
		return nil, fmt.Errorf("toolmesh up did not come up in 3 minutes; see %s", m.log)
	case <-ctx.Done():
		m.stop()
		return nil, ctx.Err()
	}
	kids, err := children(m.up.Process.Pid)
	if err != nil {
		m.stop()
		return nil, err
	}
	for pid, argv := range kids {
		if len(argv) < 2 {
			continue
		}
		switch {
		case argv[1] == "edge":
			m.pids["edge"] = pid
		case argv[1] == "serve" && len(argv) > 2:
			m.pids[argv[2]] = pid
		case argv[1] == "worker" && len(argv) > 2 && argv[2] == "calls":
			// It carries the calls whose questions take more than one
			// request, each a workflow.
			m.pids["worker-calls"] = pid
		case argv[1] == "temporal-dev":
			// The Temporal dev server it runs holds those workflows.
			server, err := children(pid)
			if err != nil {
				m.stop()
				return nil, err
			}
			for spid := range server {
				m.pids["temporal"] = spid
			}
		}
	}
	if m.pids["edge"] == 0 || m.pids["tasks"] == 0 {
		m.stop()
		return nil, fmt.Errorf("cannot find the edge and tasks processes among %v", kids)
	}
	return m, nil
}

// stop stops the mesh the way Ctrl-C does and waits for it.
func (m *mesh) stop() {
	_ = m.up.Process.Signal(syscall.SIGINT)
	select {
	case err := <-m.exited:
		m.exited <- err
	case <-time.After(time.Minute):
		_ = m.up.Process.Kill()
	}
}

var taskIDRE = regexp.MustCompile(`tsk_[0-9a-z]{26}`)

// createTask creates the task every call reads, through the edge.
func (m *mesh) createTask(ctx context.Context) (string, error) {
	out, err := PostToolCall(ctx, http.DefaultClient, m.edgeURL, "tasks_create", ToolCallBody("tasks_create", `{"description":"read by make bench-mesh"}`))
	if err != nil {
		return "", err
	}
	id := taskIDRE.FindString(string(out))
	if id == "" {
		return "", fmt.Errorf("tasks_create answered without a task id: %.300s", out)
	}
	return id, nil
}

// adminAgents is the agents service as the admin write phases need it:
// their agents registered once, and all of them active again before each
// phase, so that every call of the phase changes one.
type adminAgents struct {
	client agentsv1connect.AgentsServiceClient
}

func (m *mesh) adminAgents(token string) adminAgents {
	return adminAgents{client: agentsv1connect.NewAgentsServiceClient(http.DefaultClient, m.agentsURL, connect.WithInterceptors(bearer(token)))}
}

// register registers the agents the admin write phases change.
func (a adminAgents) register(ctx context.Context) error {
	for i := range AdminAgents {
		if _, err := a.client.Register(ctx, &agentsv1.RegisterRequest{AgentId: AdminAgentID(i), Description: "changed by make bench-mesh"}); err != nil {
			return fmt.Errorf("register %s: %w", AdminAgentID(i), err)
		}
	}
	return nil
}

// activate makes every one of those agents active.
func (a adminAgents) activate(ctx context.Context) error {
	for i := range AdminAgents {
		if _, err := a.client.SetStatus(ctx, &agentsv1.SetStatusRequest{AgentId: AdminAgentID(i), Status: agentsv1.AgentStatus_AGENT_STATUS_ACTIVE, Reason: AdminReason}); err != nil {
			return fmt.Errorf("activate %s: %w", AdminAgentID(i), err)
		}
	}
	return nil
}

// startStock starts the stock go-sdk server and waits until it listens;
// it returns its MCP endpoint and, with debug, the base URL of its
// /debug/pprof.
func startStock(ctx context.Context, bin, tasksURL, tokenFile, logPath string, debug bool) (*exec.Cmd, string, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", "", err
	}
	args := []string{"--addr", addr, "--tasks-url", tasksURL, "--token-file", tokenFile}
	debugURL := ""
	if debug {
		debugAddr, err := freeAddr()
		if err != nil {
			return nil, "", "", err
		}
		args = append(args, "--debug-addr", debugAddr)
		debugURL = "http://" + debugAddr
	}
	cmd, err := startListening(ctx, "the stock server", addr, logPath, bin, args...)
	if err != nil {
		return nil, "", "", err
	}
	return cmd, "http://" + addr + "/mcp", debugURL, nil
}

// startHop starts the bare hop (benchmesh hop) in front of the service at
// to and waits until it listens; it returns its base URL.
func startHop(ctx context.Context, bin, to, logPath string) (*exec.Cmd, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	cmd, err := startListening(ctx, "the bare hop", addr, logPath, bin, "hop", "--addr", addr, "--to", to)
	if err != nil {
		return nil, "", err
	}
	return cmd, "http://" + addr, nil
}

// startListening starts bin with args, its output in logPath, and waits
// until it listens on addr.
func startListening(ctx context.Context, what, addr, logPath, bin string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childproc.Attr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return cmd, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s did not listen on %s; see %s", what, addr, logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopProcess interrupts cmd and waits for it.
func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// freeAddr returns a 127.0.0.1 address reserved for this process.
func freeAddr() (string, error) {
	port, err := porttest.Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
