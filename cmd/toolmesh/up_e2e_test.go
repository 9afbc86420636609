package main

import (
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
)

// TestUpRunsThePlan runs the real binary's `toolmesh up` (what `make run`
// does): every process of the plan comes up, a tool call goes through the
// edge to a service, a service killed with SIGKILL is restarted alone (and
// `toolmesh up status` and /metrics say so), and Ctrl-C stops everything
// with nothing left behind.
func TestUpRunsThePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	endpoint := m.Link(t, linkMCP)
	if want := fmt.Sprintf("http://127.0.0.1:%d/mcp", edgePort+m.Offset); endpoint != want {
		t.Errorf("MCP endpoint %s, want %s", endpoint, want)
	}
	// Every service of the plan is listed where it listens, and answers.
	printed := strings.Join(m.Printed, "\n")
	for name, d := range domains {
		addr := fmt.Sprintf("127.0.0.1:%d", d.port+m.Offset)
		if !strings.Contains(printed, name) || !strings.Contains(printed, addr) {
			t.Errorf("up does not print %s at %s", name, addr)
		}
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "up-e2e", Version: "1"}, nil)
	session, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
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
	pids := map[string]int{}
	for _, p := range upStatusOf(t, bin, m).Processes {
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
		for _, p := range upStatusOf(t, bin, m).Processes {
			if p.Name == "tasks" && p.State == "ready" && p.PID != pids["tasks"] && p.Restarts == 1 && p.LastFailure == "signal: killed" {
				restarted = true
			}
		}
	}
	if !restarted {
		t.Fatalf("tasks was not restarted after kill -9: %+v\n%s", upStatusOf(t, bin, m), tail(m.Stderr()))
	}
	for _, p := range upStatusOf(t, bin, m).Processes {
		if p.Name != "tasks" && (p.PID != pids[p.Name] || p.Restarts != 0) {
			t.Errorf("%s was touched when tasks died: pid %d (was %d), restarts %d", p.Name, p.PID, pids[p.Name], p.Restarts)
		}
	}
	table, err := exec.Command(bin, "up", "status", "--port-offset", strconv.Itoa(m.Offset)).Output()
	if err != nil || !regexp.MustCompile(`(?m)^tasks\s+ready\s+\d+\s+\S+\s+1\s+signal: killed`).Match(table) {
		t.Errorf("toolmesh up status: %v\n%s", err, table)
	}
	metrics, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", upStatusPort+m.Offset))
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
	checkOutcomesCount(t, session)
	session.Close()

	// Ctrl-C: everything stops, in order, and up says so.
	rest, err := m.Stop()
	if err != nil {
		t.Errorf("up after Ctrl-C: %v\n%s", err, tail(m.Stderr()))
	}
	if !strings.Contains(strings.Join(rest, "\n"), "toolmesh stopped") {
		t.Errorf("up did not say it stopped: %q", rest)
	}
	for name, d := range domains {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", d.port+m.Offset), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still listens after up stopped", name)
		}
	}
	if left := processesUnder(m.Dir); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

// checkOutcomesCount: an agent (the local owner's, in development mode)
// makes 100 ordinary calls and 5 refused ones and completes a work task;
// its reputation shows them once the edge has sent their outcomes to the
// audit service.
func checkOutcomesCount(t *testing.T, session *mcp.ClientSession) {
	t.Helper()
	created := callTool(t, session, "tasks_create", map[string]any{"description": "counted when completed"})
	var task struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(created.Data, &task); err != nil || created.Status != "ok" {
		t.Fatalf("tasks_create: %+v, %v", created, err)
	}
	for _, status := range []string{"TASK_STATUS_RUNNING", "TASK_STATUS_COMPLETED"} {
		if env := callTool(t, session, "tasks_update_status", map[string]any{"task_id": task.Task.ID, "status": status}); env.Status != "ok" {
			t.Fatalf("tasks_update_status to %s: %+v", status, env)
		}
	}
	for i := range 100 {
		if env := callTool(t, session, "tasks_list", map[string]any{"limit": 1 + i%5}); env.Status != "ok" {
			t.Fatalf("ordinary call %d: %+v", i, env)
		}
	}
	for i := range 5 {
		if env := callTool(t, session, "tasks_get", map[string]any{"task_id": fmt.Sprintf("not-a-task-%d", i)}); env.DomainCode != "invalid_argument" {
			t.Fatalf("refused call %d: %+v", i, env)
		}
	}
	var score struct {
		Score struct {
			Score      int    `json:"score"`
			Formula    string `json:"formula"`
			Components struct {
				Calls          int64 `json:"calls,string"`
				OkCalls        int64 `json:"ok_calls,string"`
				RefusedCalls   int64 `json:"refused_calls,string"`
				TasksCompleted int64 `json:"tasks_completed,string"`
			} `json:"components"`
		} `json:"score"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		env := callTool(t, session, "reputation_check", map[string]any{})
		if env.Status != "ok" {
			t.Fatalf("reputation_check: %+v", env)
		}
		if err := json.Unmarshal(env.Data, &score); err != nil {
			t.Fatal(err)
		}
		c := score.Score.Components
		// The calls before these (tasks_create twice, the checks) count too.
		if c.RefusedCalls == 5 && c.OkCalls >= 105 && c.Calls >= 110 && c.TasksCompleted == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reputation after 100 ordinary and 5 refused calls: %+v", score.Score)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if score.Score.Formula != "toolmesh-reputation/v3" || score.Score.Score < 50 {
		t.Errorf("reputation after 100 ordinary and 5 refused calls: %+v, want formula v3 and a score of at least 50", score.Score)
	}
	t.Logf("reputation after 100 ordinary and 5 refused calls: %+v", score.Score)
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
