package mcpdoor_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
)

// tsTasksReport is what testdata/tsclient/tasks.mjs saw.
type tsTasksReport struct {
	Negotiated  string            `json:"negotiated"`
	ServerTasks map[string]any    `json:"serverTasks"`
	TaskSupport map[string]string `json:"taskSupport"`
	Streamed    []string          `json:"streamed"`
	WaitResult  *tsToolResult     `json:"waitResult"`
	Got         *struct {
		TaskID    string `json:"taskId"`
		Status    string `json:"status"`
		TTL       *int64 `json:"ttl"`
		CreatedAt string `json:"createdAt"`
	} `json:"got"`
	Result        *tsToolResult `json:"result"`
	Listed        []string      `json:"listed"`
	Asked         []struct{ Message, Related string }
	PurgeStreamed []string      `json:"purgeStreamed"`
	PurgeResult   *tsToolResult `json:"purgeResult"`
	Cancelled     *struct {
		TaskID string `json:"taskId"`
	} `json:"cancelled"`
	CancelledLater string   `json:"cancelledLater"`
	Errors         []string `json:"errors"`
}

type tsToolResult struct {
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	Meta              map[string]struct {
		TaskID string `json:"taskId"`
	} `json:"_meta"`
}

// The official TypeScript SDK (1.32.2) client drives the 2025-11-25 core
// tasks against an edge with the calls worker: a call as a task, followed
// with tasks/get and tasks/result; tasks/list shows it; an ADMIN call's task
// asks its confirmation over the session when tasks/result waits on it, and
// the purge runs once; tasks/cancel cancels a running task.
func TestTypeScriptClientDrivesCoreTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	dir := nodetest.Install(t, filepath.Join("testdata", "tsclient"))
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	purgedOnce := m.SeedPurge(t)
	f := m.Edge(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "tasks.mjs", f.URL)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node tasks.mjs: %v\n%s", err, stderr.String())
	}
	var r tsTasksReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report %q: %v\n%s", out, err, stderr.String())
	}
	t.Logf("the TypeScript SDK saw: %s", out)
	if len(r.Errors) > 0 {
		t.Errorf("errors: %q", r.Errors)
	}
	if r.Negotiated != "2025-11-25" {
		t.Errorf("negotiated %q", r.Negotiated)
	}
	if _, ok := r.ServerTasks["list"]; !ok || r.ServerTasks["cancel"] == nil || r.ServerTasks["requests"] == nil {
		t.Errorf("capabilities.tasks = %v, want list, cancel and requests.tools.call", r.ServerTasks)
	}
	if r.TaskSupport["testing_wait"] != "optional" {
		t.Errorf("execution.taskSupport = %v, want testing_wait optional", r.TaskSupport)
	}

	if len(r.Streamed) < 3 || r.Streamed[0] != "taskCreated:working" || r.Streamed[len(r.Streamed)-1] != "result" ||
		r.WaitResult == nil || r.WaitResult.IsError || !strings.Contains(string(r.WaitResult.StructuredContent), `"waited_millis":`) {
		t.Errorf("the task-augmented call streamed %v and %+v, want created, followed, and the wait's result", r.Streamed, r.WaitResult)
	}
	if r.Got == nil || !strings.HasPrefix(r.Got.TaskID, "call/testing_wait/") || r.Got.Status != "completed" || r.Got.CreatedAt == "" {
		t.Errorf("tasks/get = %+v, want the completed task", r.Got)
	}
	if r.Result == nil || r.Result.IsError || r.Got == nil || r.Result.Meta["io.modelcontextprotocol/related-task"].TaskID != r.Got.TaskID {
		t.Errorf("tasks/result = %+v, want the result naming its task", r.Result)
	}
	if r.Got == nil || !slices.Contains(r.Listed, r.Got.TaskID) {
		t.Errorf("tasks/list = %v, want the caller's task in it", r.Listed)
	}

	if len(r.Asked) != 1 || !strings.HasPrefix(r.Asked[0].Related, "call/testing_purge/") {
		t.Errorf("asked %+v, want the purge's confirmation once, related to its task", r.Asked)
	}
	if len(r.PurgeStreamed) < 2 || r.PurgeStreamed[0] != "taskCreated:input_required" || r.PurgeResult == nil || r.PurgeResult.IsError ||
		!strings.Contains(string(r.PurgeResult.StructuredContent), `"removed":3`) {
		t.Errorf("the purge streamed %v and %+v, want an input_required task ending with the notes removed", r.PurgeStreamed, r.PurgeResult)
	}
	purgedOnce()

	if r.Cancelled == nil || !strings.HasPrefix(r.Cancelled.TaskID, "call/testing_wait/") || r.CancelledLater != "cancelled" {
		t.Errorf("tasks/cancel = %+v, then %q; want the task cancelled", r.Cancelled, r.CancelledLater)
	}
}
