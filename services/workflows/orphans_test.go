package workflows_test

import (
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/services/workflows"
)

// TestOrphanedRunsAreWithdrawn: a run that was stored but whose workflow
// never started is withdrawn by the sweep — cancelled, its nodes kept —
// once it is older than the grace; a younger one and one whose workflow
// runs are left alone.
func TestOrphanedRunsAreWithdrawn(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	e := start(t, workflows.Config{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	w, err := e.c.Create(agentA(), privileged(t))
	if err != nil {
		t.Fatal(err)
	}
	run := func(key string) *workflowsv1.Run {
		res, err := e.c.Run(servertest.WithIdempotencyKey(agentA(), key), &workflowsv1.RunRequest{WorkflowId: w.GetWorkflow().GetWorkflowId(), WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetRun()
	}
	orphan, running := run("orphan"), run("running")
	e.wf.forget(orphan.GetTemporalWorkflowId())
	if n, err := e.svc.Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("a sweep within the grace withdrew %d (%v), want none", n, err)
	}
	mu.Lock()
	now = now.Add(workflowrun.OrphanGrace + time.Second)
	mu.Unlock()
	if n, err := e.svc.Sweep(t.Context()); n != 1 || err != nil {
		t.Fatalf("the sweep withdrew %d (%v), want the orphan", n, err)
	}
	got, err := e.c.GetRun(agentA(), &workflowsv1.GetRunRequest{RunId: orphan.GetRunId()})
	if r := got.GetRun(); err != nil || r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_CANCELLED || r.GetError().GetDomainCode() != "unavailable" || len(r.GetNodes()) != len(orphan.GetNodes()) {
		t.Errorf("the orphan reads %v (%v), want cancelled as never started, its %d nodes kept", r, err, len(orphan.GetNodes()))
	}
	got, err = e.c.GetRun(agentA(), &workflowsv1.GetRunRequest{RunId: running.GetRunId()})
	if err != nil || got.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_RUNNING {
		t.Errorf("the run whose workflow runs reads %v (%v), want it running", got.GetRun(), err)
	}
	if n, _ := e.svc.Sweep(t.Context()); n != 0 {
		t.Errorf("a second sweep withdrew %d more", n)
	}
}
