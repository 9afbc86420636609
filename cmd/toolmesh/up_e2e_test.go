package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolmesh/toolmesh/internal/porttest"
)

// upMesh is a real `toolmesh up` (what `make run` does) a test started,
// with its own port offset and data directory.
type upMesh struct {
	dir      string
	bin      string // the toolmesh binary it runs
	offset   int
	endpoint string   // the MCP endpoint up printed
	printed  []string // up's output until it was up
	cmd      *exec.Cmd
	lines    chan string
	exited   chan error
	stderr   *strings.Builder
	stopped  bool
}

// startUp builds the binary, runs `toolmesh up` and waits until it says the
// mesh is up. The mesh is stopped (Ctrl-C) when the test ends, unless the
// test stopped it.
func startUp(t *testing.T) *upMesh {
	t.Helper()
	temporal, err := filepath.Abs(filepath.Join("..", "..", "bin", "temporal"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(temporal); err != nil {
		t.Fatalf("the pinned Temporal CLI is missing (make tools): %v", err)
	}
	m := &upMesh{dir: t.TempDir(), lines: make(chan string, 100), exited: make(chan error, 1), stderr: &strings.Builder{}}
	bin := filepath.Join(m.dir, "toolmesh")
	m.bin = bin
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build toolmesh: %v\n%s", err, out)
	}
	m.offset = porttest.FreeOffset(t, append(porttest.Range(edgePort, 7300), temporalUIPort)...)
	m.cmd = exec.Command(bin, "up", "--port-offset", strconv.Itoa(m.offset), "--data", filepath.Join(m.dir, "data"), "--temporal-bin", temporal)
	m.cmd.Dir = m.dir
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			m.lines <- s.Text()
		}
		close(m.lines)
		m.exited <- m.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !m.stopped {
			_ = m.cmd.Process.Signal(os.Interrupt)
			<-m.exited
		}
	})

	// Wait for "toolmesh is up" and read the MCP endpoint it prints.
	mcpRE := regexp.MustCompile(`MCP endpoint\s+(http://\S+/mcp)`)
	timeout := time.After(3 * time.Minute)
	for m.endpoint == "" || !strings.Contains(strings.Join(m.printed, "\n"), "Press Ctrl-C") {
		select {
		case l, ok := <-m.lines:
			if !ok {
				t.Fatalf("up exited before the mesh was up:\n%s\n%s", strings.Join(m.printed, "\n"), tail(m.stderr.String()))
			}
			m.printed = append(m.printed, l)
			if sm := mcpRE.FindStringSubmatch(l); sm != nil {
				m.endpoint = sm[1]
			}
		case <-timeout:
			t.Fatalf("up did not come up:\n%s\n%s", strings.Join(m.printed, "\n"), tail(m.stderr.String()))
		}
	}
	return m
}

// stop sends Ctrl-C and returns what up printed until it exited, and how
// it exited.
func (m *upMesh) stop() ([]string, error) {
	_ = m.cmd.Process.Signal(os.Interrupt)
	var rest []string
	for l := range m.lines {
		rest = append(rest, l)
	}
	m.stopped = true
	return rest, <-m.exited
}

// TestUpRunsThePlan runs the real binary's `toolmesh up` (what `make run`
// does): every process of the plan comes up, a tool call goes through the
// edge to a service, a service killed with SIGKILL is restarted alone (and
// `toolmesh up status` and /metrics say so), and Ctrl-C stops everything
// with nothing left behind.
func TestUpRunsThePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	m := startUp(t)
	if want := fmt.Sprintf("http://127.0.0.1:%d/mcp", edgePort+m.offset); m.endpoint != want {
		t.Errorf("MCP endpoint %s, want %s", m.endpoint, want)
	}
	// Every service of the plan is listed where it listens, and answers.
	printed := strings.Join(m.printed, "\n")
	for name, d := range domains {
		addr := fmt.Sprintf("127.0.0.1:%d", d.port+m.offset)
		if !strings.Contains(printed, name) || !strings.Contains(printed, addr) {
			t.Errorf("up does not print %s at %s", name, addr)
		}
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "up-e2e", Version: "1"}, nil)
	session, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: m.endpoint}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", m.endpoint, err)
	}
	res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "started by up"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(b), `"status":"ok"`) {
		t.Errorf("tasks_create through the edge: %s", b)
	}

	// kill -9 of one service: up restarts it alone, counts it, says so,
	// and the same MCP session works again.
	upStatus := func() upStatus {
		t.Helper()
		out, err := exec.Command(m.bin, "up", "status", "--json", "--port-offset", strconv.Itoa(m.offset)).Output()
		if err != nil {
			t.Fatalf("toolmesh up status: %v", err)
		}
		var st upStatus
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	pids := map[string]int{}
	for _, p := range upStatus().Processes {
		if p.State != "ready" || p.PID == 0 {
			t.Errorf("up status after start: %+v", p)
		}
		pids[p.Name] = p.PID
	}
	if err := syscall.Kill(pids["tasks"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarted := false
	for deadline := time.Now().Add(30 * time.Second); !restarted && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, p := range upStatus().Processes {
			if p.Name == "tasks" && p.State == "ready" && p.PID != pids["tasks"] && p.Restarts == 1 && p.LastFailure == "signal: killed" {
				restarted = true
			}
		}
	}
	if !restarted {
		t.Fatalf("tasks was not restarted after kill -9: %+v\n%s", upStatus(), tail(m.stderr.String()))
	}
	for _, p := range upStatus().Processes {
		if p.Name != "tasks" && (p.PID != pids[p.Name] || p.Restarts != 0) {
			t.Errorf("%s was touched when tasks died: pid %d (was %d), restarts %d", p.Name, p.PID, pids[p.Name], p.Restarts)
		}
	}
	table, err := exec.Command(m.bin, "up", "status", "--port-offset", strconv.Itoa(m.offset)).Output()
	if err != nil || !regexp.MustCompile(`(?m)^tasks\s+ready\s+\d+\s+\S+\s+1\s+signal: killed`).Match(table) {
		t.Errorf("toolmesh up status: %v\n%s", err, table)
	}
	metrics, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", upStatusPort+m.offset))
	if err != nil || !strings.Contains(metrics, `toolmesh_up_restarts_total{process="tasks"} 1`) {
		t.Errorf("up /metrics does not count the restart (%v):\n%s", err, metrics)
	}
	res, err = session.CallTool(t.Context(), &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "after the restart"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res.StructuredContent); res.IsError {
		t.Errorf("tasks_create after tasks restarted: %s", b)
	}
	session.Close()

	// Ctrl-C: everything stops, in order, and up says so.
	rest, err := m.stop()
	if err != nil {
		t.Errorf("up after Ctrl-C: %v\n%s", err, tail(m.stderr.String()))
	}
	if !strings.Contains(strings.Join(rest, "\n"), "toolmesh stopped") {
		t.Errorf("up did not say it stopped: %q", rest)
	}
	for name, d := range domains {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", d.port+m.offset), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still listens after up stopped", name)
		}
	}
	if left := processesUnder(m.dir); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

// processesUnder lists the processes whose command line mentions dir.
func processesUnder(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); strings.HasPrefix(cwd, dir) || strings.Contains(string(cmdline), dir) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// httpGet returns the body of a GET that answers 200.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}
