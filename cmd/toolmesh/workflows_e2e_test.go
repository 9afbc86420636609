package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// These tests run the whole mesh as `toolmesh up` starts it (the real
// binary: the Temporal dev server, every service and worker, the edge)
// and drive agents' workflows through the edge with the go-sdk client.

// runData is the data of workflows_run and workflows_get_run results.
type runData struct {
	Run struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Output any    `json:"output"`
		Error  struct {
			NodeID     string `json:"node_id"`
			DomainCode string `json:"domain_code"`
			Message    string `json:"message"`
		} `json:"error"`
		Nodes []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
			Output any    `json:"output"`
			AskID  string `json:"ask_id"`
		} `json:"nodes"`
		Deadline           time.Time `json:"deadline"`
		TemporalWorkflowID string    `json:"temporal_workflow_id"`
	} `json:"run"`
}

func (r runData) node(id string) (status string, output any, askID string) {
	for _, n := range r.Run.Nodes {
		if n.NodeID == id {
			return n.Status, n.Output, n.AskID
		}
	}
	return "", nil, ""
}

// exampleWorkflow is the documented example (docs/agent-workflows.md) as
// workflows_create arguments.
func exampleWorkflow(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../docs/examples/triage-workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(b, &args); err != nil {
		t.Fatal(err)
	}
	return args
}

// createWorkflow creates a workflow and returns its id.
func createWorkflow(t *testing.T, s *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	var d struct {
		Workflow struct {
			WorkflowID string `json:"workflow_id"`
		} `json:"workflow"`
	}
	okData(t, callTool(t, s, "workflows_create", args), &d)
	return d.Workflow.WorkflowID
}

// getRun reads a run.
func getRun(t *testing.T, s *mcp.ClientSession, id string) runData {
	t.Helper()
	var d runData
	okData(t, callTool(t, s, "workflows_get_run", map[string]any{"run_id": id}), &d)
	return d
}

// awaitRun polls a run until done says so (at most a minute).
func awaitRun(t *testing.T, s *mcp.ClientSession, id, what string, done func(runData) bool) runData {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		d := getRun(t, s, id)
		if done(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %s did not happen within a minute: %+v", id, what, d.Run)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bearerTransport sends a bearer token with every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSessionAs connects to an edge with OAuth on, with a token.
func mcpSessionAs(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "workflows-e2e", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestWorkflowsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh's log:\n%s", tail(m.Stderr()))
		}
	})
	owner := mcpSessionTo(t, m.Link(t, linkMCP)) // development mode: the local owner, holding every grant

	// A second edge with OAuth on, in front of the same services: its
	// callers hold only what their tokens grant.
	iss := newOAuthIssuer(t)
	edgeAddr := porttest.Addr(t)
	args := []string{"edge", "--addr", edgeAddr, "--data", m.Data, "--metrics-addr", "off", "--issuer", iss.url, "--jwks-file", iss.jwks}
	for _, d := range []string{"workflows", "owner", "tasks", "github", "agents"} {
		args = append(args, "--service", d+"="+m.Link(t, d))
	}
	startBin(t, bin, "http://"+edgeAddr+"/healthz", args...)
	oauthURL := "http://" + edgeAddr + "/mcp"
	// local is the development agent; intruder another registered agent.
	okData(t, callTool(t, owner, "agents_register", map[string]any{"agent_id": "intruder", "display_name": "Intruder",
		"confirm": true, "reason": "a second agent for the workflows test"}), &map[string]any{})
	local := mcpSessionAs(t, oauthURL, iss.token(t, oauthURL, "local", "toolmesh:read toolmesh:write", nil))
	intruder := mcpSessionAs(t, oauthURL, iss.token(t, oauthURL, "intruder", "toolmesh:read toolmesh:write", nil))

	t.Run("every node kind, approved by the owner; outputs flow into later nodes", func(t *testing.T) {
		id := createWorkflow(t, owner, exampleWorkflow(t))
		var started runData
		okData(t, callTool(t, owner, "workflows_run", map[string]any{"workflow_id": id, "input": map[string]any{"topic": "flaky deploys"}, "wait_seconds": 0}), &started)
		runID := started.Run.RunID
		if started.Run.TemporalWorkflowID != "workflow-run/local/"+runID {
			t.Errorf("the run's Temporal workflow is %q", started.Run.TemporalWorkflowID)
		}
		waiting := awaitRun(t, owner, runID, "suspended for the approval", func(d runData) bool { return d.Run.Status == "RUN_STATUS_SUSPENDED" })
		st, _, askID := waiting.node("approve")
		if st != "NODE_STATUS_WAITING_APPROVAL" || askID == "" {
			t.Fatalf("the approval node is %s with ask %q, want waiting with its ask", st, askID)
		}
		_, taskOut, _ := waiting.node("task")
		taskID := taskOut.(map[string]any)["task"].(map[string]any)["id"].(string)
		// The owner reads the question, filled in from earlier nodes, and
		// approves.
		var ask askData
		var full struct {
			Ask struct {
				Question string   `json:"question"`
				Options  []string `json:"options"`
			} `json:"ask"`
		}
		okData(t, callTool(t, owner, "owner_get_ask", map[string]any{"ask_id": askID}), &full)
		if want := `Start task ` + taskID + ` on "flaky deploys"?`; full.Ask.Question != want || !slices.Equal(full.Ask.Options, []string{"approve", "reject"}) {
			t.Errorf("the ask = %+v, want %q with approve or reject", full.Ask, want)
		}
		okData(t, callTool(t, owner, "owner_answer", map[string]any{"ask_id": askID, "answer": "approve"}), &ask)

		done := awaitRun(t, owner, runID, "completed", func(d runData) bool {
			return d.Run.Status != "RUN_STATUS_SUSPENDED" && d.Run.Status != "RUN_STATUS_RUNNING"
		})
		if done.Run.Status != "RUN_STATUS_COMPLETED" {
			t.Fatalf("run = %+v, want completed", done.Run)
		}
		want := map[string]any{"task": taskID, "approved": true, "status": "TASK_STATUS_RUNNING"}
		if got, _ := json.Marshal(done.Run.Output); string(got) != mustJSON(want) {
			t.Errorf("run output = %s, want %s", got, mustJSON(want))
		}
		for id, want := range map[string]string{"start": "COMPLETED", "note": "COMPLETED", "check": "COMPLETED", "fan": "COMPLETED", "task": "COMPLETED",
			"recall": "COMPLETED", "both": "COMPLETED", "approve": "COMPLETED", "pause": "COMPLETED", "begin": "COMPLETED", "done": "COMPLETED", "skipped": "SKIPPED"} {
			if st, _, _ := done.node(id); st != "NODE_STATUS_"+want {
				t.Errorf("node %s is %s, want %s", id, st, want)
			}
		}
		// The side effects are in the services: the task the run opened is
		// running, and the note it saved is what memory_get read back.
		var task struct {
			Task struct {
				Description string `json:"description"`
				Status      string `json:"status"`
			} `json:"task"`
		}
		okData(t, callTool(t, owner, "tasks_get", map[string]any{"task_id": taskID}), &task)
		if task.Task.Description != "Look into flaky deploys" || task.Task.Status != "TASK_STATUS_RUNNING" {
			t.Errorf("the run's task = %+v", task.Task)
		}
		_, recalled, _ := done.node("recall")
		if c := recalled.(map[string]any)["memory"].(map[string]any)["content"]; c != "flaky deploys" {
			t.Errorf("memory_get read %v, want the note the run saved", c)
		}
		// workflows_list_runs lists it.
		var runs struct {
			Runs []struct {
				RunID  string `json:"run_id"`
				Status string `json:"status"`
			} `json:"runs"`
		}
		okData(t, callTool(t, owner, "workflows_list_runs", map[string]any{"workflow_id": id}), &runs)
		if len(runs.Runs) != 1 || runs.Runs[0].RunID != runID || runs.Runs[0].Status != "RUN_STATUS_COMPLETED" {
			t.Errorf("runs = %+v", runs.Runs)
		}
	})

	t.Run("a node calling a tool the starter has no grant for fails with permission_denied naming it", func(t *testing.T) {
		id := createWorkflow(t, local, map[string]any{"name": "star", "definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "note"}},
			map[string]any{"id": "note", "action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "before the star"}, "next": "star"}},
			map[string]any{"id": "star", "action": map[string]any{"tool": "github_star_repo", "arguments": map[string]any{"owner": "temporalio", "repo": "sdk-go"}, "next": "done"}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}})
		var d runData
		okData(t, callTool(t, local, "workflows_run", map[string]any{"workflow_id": id}), &d)
		if d.Run.Status == "RUN_STATUS_RUNNING" {
			d = awaitRun(t, local, d.Run.RunID, "ended", func(d runData) bool { return d.Run.Status != "RUN_STATUS_RUNNING" })
		}
		if d.Run.Status != "RUN_STATUS_FAILED" || d.Run.Error.NodeID != "star" || d.Run.Error.DomainCode != "permission_denied" ||
			!strings.Contains(d.Run.Error.Message, `node "star"`) || !strings.Contains(d.Run.Error.Message, "github_star_repo") {
			t.Fatalf("run = %s %+v, want failed with permission_denied naming node star", d.Run.Status, d.Run.Error)
		}
		if st, _, _ := d.node("note"); st != "NODE_STATUS_COMPLETED" {
			t.Errorf("the node before it is %s, want completed (the starter may call tasks_create)", st)
		}
	})

	t.Run("a Tasks client's run is an MCP task: tasks/get follows it to its output, tasks/cancel cancels it", func(t *testing.T) {
		url := m.Link(t, linkMCP)
		id := createWorkflow(t, owner, map[string]any{"name": "as-task", "definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "pause"}},
			map[string]any{"id": "pause", "delay": map[string]any{"seconds": 1, "next": "done"}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}})
		created := rawTaskCall(t, url, "tools/call", map[string]any{"name": "workflows_run", "arguments": map[string]any{"workflow_id": id}})
		taskID, _ := created["taskId"].(string)
		if created["resultType"] != "task" || !strings.HasPrefix(taskID, "workflow-run/local/run_") || created["status"] != "working" {
			t.Fatalf("workflows_run from a Tasks client = %v, want a working task named by the run's workflow", created)
		}
		var got map[string]any
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if got = rawTaskCall(t, url, "tasks/get", map[string]any{"taskId": taskID}); got["status"] != "working" || time.Now().After(deadline) {
				break
			}
		}
		result, _ := got["result"].(map[string]any)
		run, _ := get(result, "structuredContent", "data", "run").(map[string]any)
		if got["status"] != "completed" || run["status"] != "RUN_STATUS_COMPLETED" || run["temporal_workflow_id"] != taskID {
			t.Fatalf("tasks/get = %v, want completed with the run", got)
		}

		long := createWorkflow(t, owner, map[string]any{"name": "as-task-long", "definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "wait"}},
			map[string]any{"id": "wait", "delay": map[string]any{"seconds": 600, "next": "done"}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}})
		second, _ := rawTaskCall(t, url, "tools/call", map[string]any{"name": "workflows_run", "arguments": map[string]any{"workflow_id": long}})["taskId"].(string)
		if ack := rawTaskCall(t, url, "tasks/cancel", map[string]any{"taskId": second}); ack["resultType"] != "complete" || ack["status"] != nil {
			t.Errorf("tasks/cancel = %v, want an empty acknowledgement", ack)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if got = rawTaskCall(t, url, "tasks/get", map[string]any{"taskId": second}); got["status"] != "working" || time.Now().After(deadline) {
				break
			}
		}
		if got["status"] != "cancelled" {
			t.Errorf("tasks/get after tasks/cancel = %v, want cancelled", got)
		}
		var d runData
		okData(t, callTool(t, owner, "workflows_get_run", map[string]any{"run_id": strings.TrimPrefix(second, "workflow-run/local/")}), &d)
		if d.Run.Status != "RUN_STATUS_CANCELLED" {
			t.Errorf("the run is %s, want cancelled", d.Run.Status)
		}
	})

	t.Run("extensions reach the running workflows, survive a worker restart and refuse other agents", func(t *testing.T) {
		// An ask that expires in 20 s, extended by 2 minutes.
		var ask askData
		okData(t, callTool(t, owner, "owner_ask", map[string]any{"question": "Extend me?", "timeout_seconds": 20, "wait_seconds": 0}), &ask)
		var before struct {
			Ask struct {
				ExpireTime time.Time `json:"expire_time"`
			} `json:"ask"`
		}
		okData(t, callTool(t, owner, "owner_get_ask", map[string]any{"ask_id": ask.Ask.AskID}), &before)
		var after struct {
			Ask struct {
				ExpireTime time.Time `json:"expire_time"`
				Status     string    `json:"status"`
			} `json:"ask"`
		}
		okData(t, callTool(t, owner, "owner_extend_ask", map[string]any{"ask_id": ask.Ask.AskID, "extend_seconds": 120, "reason": "the owner is in a meeting"}), &after)
		if !after.Ask.ExpireTime.Equal(before.Ask.ExpireTime.Add(2 * time.Minute)) {
			t.Errorf("expire time after the extension = %s, want %s", after.Ask.ExpireTime, before.Ask.ExpireTime.Add(2*time.Minute))
		}
		if env := callTool(t, intruder, "owner_extend_ask", map[string]any{"ask_id": ask.Ask.AskID, "extend_seconds": 60, "reason": "mine"}); env.DomainCode != "permission_denied" ||
			!strings.Contains(env.Message, "only the agent that asked") {
			t.Errorf("another agent's extension = %+v, want permission_denied", env)
		}

		// A run whose delay outlasts its 20 s timeout, extended by 2 minutes.
		id := createWorkflow(t, owner, map[string]any{"name": "slow", "definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "wait"}},
			map[string]any{"id": "wait", "delay": map[string]any{"seconds": 600, "next": "done"}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}})
		var run runData
		okData(t, callTool(t, owner, "workflows_run", map[string]any{"workflow_id": id, "timeout_seconds": 20, "wait_seconds": 0}), &run)
		var extended runData
		okData(t, callTool(t, owner, "workflows_extend_run", map[string]any{"run_id": run.Run.RunID, "extend_seconds": 120, "reason": "the delay is long"}), &extended)
		if !extended.Run.Deadline.Equal(run.Run.Deadline.Add(2 * time.Minute)) {
			t.Errorf("deadline after the extension = %s, want %s", extended.Run.Deadline, run.Run.Deadline.Add(2*time.Minute))
		}
		if env := callTool(t, intruder, "workflows_extend_run", map[string]any{"run_id": run.Run.RunID, "extend_seconds": 60, "reason": "mine"}); env.DomainCode != "permission_denied" ||
			!strings.Contains(env.Message, "only the agent that started a run") {
			t.Errorf("another agent's extension = %+v, want permission_denied", env)
		}

		// Both workers restart (kill -9; up starts them again): the
		// extensions are in the workflows' histories.
		for _, w := range []string{"worker-owner", "worker-workflows"} {
			killAndAwaitRestart(t, bin, m, w)
		}
		// Past the first expiry and deadline, both still wait.
		for time.Now().Before(before.Ask.ExpireTime.Add(5*time.Second)) || time.Now().Before(run.Run.Deadline.Add(5*time.Second)) {
			time.Sleep(200 * time.Millisecond)
		}
		okData(t, callTool(t, owner, "owner_get_ask", map[string]any{"ask_id": ask.Ask.AskID}), &after)
		if after.Ask.Status != "ASK_STATUS_PENDING" {
			t.Errorf("past its first expiry the extended ask is %s, want still pending", after.Ask.Status)
		}
		if d := getRun(t, owner, run.Run.RunID); d.Run.Status != "RUN_STATUS_RUNNING" {
			t.Errorf("past its first deadline the extended run is %s (%+v), want still running", d.Run.Status, d.Run.Error)
		}

		// Both extensions are in the audit trail, as the agent's subject.
		var records struct {
			Records []struct {
				Actor  string `json:"actor"`
				Tool   string `json:"tool"`
				Reason string `json:"reason"`
			} `json:"records"`
		}
		okData(t, callTool(t, owner, "audit_list", map[string]any{}), &records)
		audited := map[string]string{}
		for _, r := range records.Records {
			audited[r.Tool] = r.Actor + ": " + r.Reason
		}
		if audited["owner_extend_ask"] != "local: the owner is in a meeting" || audited["workflows_extend_run"] != "local: the delay is long" {
			t.Errorf("audit records %v, want both extensions by local with their reasons", audited)
		}
		okData(t, callTool(t, owner, "workflows_cancel_run", map[string]any{"run_id": run.Run.RunID}), &run)
		okData(t, callTool(t, owner, "owner_cancel_ask", map[string]any{"ask_id": ask.Ask.AskID}), &ask)
	})
}

// killAndAwaitRestart kills one of up's processes with SIGKILL and waits
// until up runs it again, ready.
func killAndAwaitRestart(t *testing.T, bin string, m *upMesh, name string) {
	t.Helper()
	status := func() map[string]int {
		ready := map[string]int{}
		for _, p := range upStatusOf(t, bin, m).Processes {
			if p.State == "ready" {
				ready[p.Name] = p.PID
			}
		}
		return ready
	}
	pid := status()[name]
	if pid == 0 {
		t.Fatalf("%s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if p := status()[name]; p != 0 && p != pid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("up did not restart %s within a minute", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
