//go:build faults

package faults

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
)

// faultWorkflow is an agent's workflow whose four action nodes each create
// a task named after the run and the node: one before a delay, two in
// parallel, one after the owner's approval. Counting the tasks per name
// counts each node's side effects.
func faultWorkflow(name string) map[string]any {
	act := func(id, next string) map[string]any {
		return map[string]any{"id": id, "action": map[string]any{"tool": "tasks_create",
			"arguments": map[string]any{"description": "${run.id} " + id}, "next": next}}
	}
	return map[string]any{"name": name, "definition": map[string]any{"nodes": []any{
		map[string]any{"id": "start", "start": map[string]any{"next": "a"}},
		act("a", "pause"),
		map[string]any{"id": "pause", "delay": map[string]any{"seconds": 2, "next": "fan"}},
		map[string]any{"id": "fan", "parallel": map[string]any{"branches": []any{"b", "c"}, "join": "both"}},
		act("b", "both"),
		act("c", "both"),
		map[string]any{"id": "both", "join": map[string]any{"next": "approve"}},
		map[string]any{"id": "approve", "approval": map[string]any{"question": "Finish run ${run.id}?", "next": "d"}},
		act("d", "done"),
		map[string]any{"id": "done", "end": map[string]any{}},
	}}}
}

// The workflows worker, the calls worker and the Temporal dev server
// killed with SIGKILL, a few seconds apart, while agents' workflow runs are
// started and run (tool calls, a delay, parallel branches, an approval):
// every run completes once its approval is answered, and each action node's
// side effect — a task — happened exactly once.
func TestWorkflowRunsSurviveWorkerAndTemporalKills(t *testing.T) {
	m := sharedMesh(t)
	tag := fmt.Sprintf("f%d", time.Now().UnixNano()%1e9)
	s := connectMCP(t, m.mcpURL, "", nil)
	var created workflowsv1.CreateResponse
	if err := protoData(callTool(s, "workflows_create", faultWorkflow("faults-"+tag), tag+"-create"), &created); err != nil {
		t.Fatal(err)
	}
	workflowID := created.GetWorkflow().GetWorkflowId()

	// Runs: one a second, each retried with its key until accepted.
	stop := make(chan struct{})
	var mu sync.Mutex
	var runs []string
	attempts := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		every(time.Second, stop, func(i int) {
			key := fmt.Sprintf("%s-run-%d", tag, i)
			var res workflowsv1.RunResponse
			if retry(func() bool {
				mu.Lock()
				attempts++
				mu.Unlock()
				return protoData(callTool(s, "workflows_run", map[string]any{"workflow_id": workflowID, "wait_seconds": 0}, key), &res) == nil
			}) {
				mu.Lock()
				runs = append(runs, res.GetRun().GetRunId())
				mu.Unlock()
			}
		})
	})

	time.Sleep(3 * time.Second)
	for _, w := range []string{"worker-workflows", "worker-calls"} {
		killed := m.kill(t, w, syscall.SIGKILL)
		ready := readyAgain(t, m, w, killed, 30*time.Second)
		report(t, w+": seconds until ready again", ready.Sub(killed.sent).Seconds(), "<= 10", ready.Sub(killed.sent) <= 10*time.Second)
		time.Sleep(3 * time.Second)
	}
	killed := m.killTemporalServer(t)
	ready := readyAgain(t, m, "temporal", killed, 60*time.Second)
	report(t, "temporal: seconds until ready again", ready.Sub(killed.sent).Seconds(), "<= 30", ready.Sub(killed.sent) <= 30*time.Second)
	m.waitReady(t, time.Minute)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// Approve every run once it waits for its approval (the suspended
	// runs lived through the kills), then wait for every run to end.
	flows := workflowsv1connect.NewWorkflowsServiceClient(h2c(), m.services["workflows"], bearer(m.token(t, "local")))
	get := func(id string) *workflowsv1.Run {
		res, err := flows.GetRun(context.Background(), &workflowsv1.GetRunRequest{RunId: id})
		if err != nil {
			return nil
		}
		return res.GetRun()
	}
	approved := 0
	for _, id := range runs {
		var ask string
		eventually(t, 2*time.Minute, "run "+id+" waits for its approval", func() bool {
			r := get(id)
			for _, n := range r.GetNodes() {
				if n.GetNodeId() == "approve" && n.GetAskId() != "" {
					ask = n.GetAskId()
				}
			}
			return ask != "" || (r != nil && r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_RUNNING)
		})
		if ask != "" && retry(func() bool {
			o := callTool(s, "owner_answer", map[string]any{"ask_id": ask, "answer": "approve"}, id+"-approve")
			return o.ok() || o.code() == "conflict"
		}) {
			approved++
		}
	}
	ended := map[string]*workflowsv1.Run{}
	eventually(t, 2*time.Minute, "every run ended", func() bool {
		for _, id := range runs {
			if ended[id] == nil {
				if r := get(id); r != nil && r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_RUNNING && r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_SUSPENDED {
					ended[id] = r
				}
			}
		}
		return len(ended) == len(runs)
	})

	// The side effects: one task per run and action node.
	tasks := tasksv1connect.NewTasksServiceClient(h2c(), m.services["tasks"], bearer(m.token(t, "local")))
	made := map[string]int{}
	for offset := int32(0); ; offset += 200 {
		res, err := tasks.List(context.Background(), &tasksv1.ListRequest{Offset: offset, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range res.GetTasks() {
			made[task.GetDescription()]++
		}
		if len(res.GetTasks()) < 200 {
			break
		}
	}
	completed, notCompleted, wrong := 0, 0, 0
	for _, id := range runs {
		r := ended[id]
		if r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED {
			notCompleted++
			t.Logf("run %s ended %s: %v", id, r.GetStatus(), r.GetError())
		} else {
			completed++
		}
		for _, node := range []string{"a", "b", "c", "d"} {
			if n := made[id+" "+node]; n != 1 && (r.GetStatus() == workflowsv1.RunStatus_RUN_STATUS_COMPLETED || n > 1) {
				wrong++
				t.Logf("run %s node %s: %d tasks", id, node, n)
			}
		}
	}
	figure(t, "runs started (attempts)", fmt.Sprintf("%d (%d)", len(runs), attempts), "> 0", len(runs) > 0)
	figure(t, "runs approved after the kills", approved, fmt.Sprint(len(runs)), approved == len(runs))
	figure(t, "runs not completed", notCompleted, "0", notCompleted == 0)
	figure(t, "action nodes whose side effect did not happen exactly once", wrong, "0", wrong == 0)
}
