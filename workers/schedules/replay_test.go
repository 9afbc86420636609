package schedules_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/workers/schedules"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

// dial connects to the shared dev server the way a worker does.
func dial(t *testing.T) client.Client { return workflowtest.Dial(t, temporalServer.Server(t)) }

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break approvals or runs in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, schedules.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { schedules.Register(r, &schedules.Activities{}) })
}

// TestRecordHistories adds the history of each path of the workflows, open
// and closed, to testdata/histories: the real activities over a fake
// schedules service and the test-only testing service, on a dev server. It
// never overwrites a history:
//
//	go test ./workers/schedules -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	ctx := context.Background()
	c := dial(t)
	fake := &fakeSchedules{}
	acts := newActivities(t, fake, &fakeNotifier{}, testingsvc.New())
	workflowtest.StartWorker(t, c, schedules.TaskQueue(), func(r worker.Registry) { schedules.Register(r, acts) })

	idle := func(t *testing.T, run client.WorkflowRun) {
		t.Helper()
		if err := workflowtest.WaitIdle(ctx, c, run.GetID(), run.GetRunID()); err != nil {
			t.Fatal(err)
		}
	}
	// approval starts an approval and returns it once it waits.
	approval := func(t *testing.T, name string, timeout time.Duration) client.WorkflowRun {
		in := approvalInput()
		in.Timeout = durationpb.New(timeout)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: approvalID() + "-" + name, TaskQueue: schedules.TaskQueue()},
			workflowcontract.WorkflowOf(in).Name, in)
		if err != nil {
			t.Fatal(err)
		}
		idle(t, run)
		return run
	}
	update := func(run client.WorkflowRun, name string, arg any) error {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: name, Args: []any{arg},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		return err
	}
	capture := func(t *testing.T, scenario string, run client.WorkflowRun) {
		t.Helper()
		idle(t, run)
		workflowtest.Record(t, c, *record, scenario, run.GetID(), run.GetRunID())
	}
	refuseApprovals := func(t *testing.T) {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		fake.decide = func(req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
			if req.GetKind() == schedulesv1.DecisionKind_DECISION_KIND_APPROVE {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("schedule changed since the owner was asked"))
			}
			return applied(req), nil
		}
		t.Cleanup(func() {
			fake.mu.Lock()
			defer fake.mu.Unlock()
			fake.decide = nil
		})
	}

	t.Run("approval-waiting", func(t *testing.T) {
		capture(t, "approval-waiting", approval(t, "waiting", time.Hour))
	})
	t.Run("approval-waiting-after-refused-approve", func(t *testing.T) {
		refuseApprovals(t)
		run := approval(t, "waiting-refused", time.Hour)
		if err := update(run, "approve", &schedulesv1.ApproveUpdate{}); err == nil || !strings.Contains(err.Error(), "changed") {
			t.Fatalf("approve after a change: %v, want refused", err)
		}
		capture(t, "approval-waiting-after-refused-approve", run)
	})
	t.Run("approval-approved", func(t *testing.T) {
		run := approval(t, "approved", time.Hour)
		if err := update(run, "approve", &schedulesv1.ApproveUpdate{Note: "fine", DecidedBy: "owner-1"}); err != nil {
			t.Fatal(err)
		}
		capture(t, "approval-approved", run)
	})
	t.Run("approval-refused-then-denied", func(t *testing.T) {
		refuseApprovals(t)
		run := approval(t, "refused", time.Hour)
		if err := update(run, "approve", &schedulesv1.ApproveUpdate{}); err == nil || !strings.Contains(err.Error(), "changed") {
			t.Fatalf("approve after a change: %v, want refused", err)
		}
		if err := update(run, "deny", &schedulesv1.DenyUpdate{Note: "changed", DecidedBy: "owner-1"}); err != nil {
			t.Fatal(err)
		}
		capture(t, "approval-refused-then-denied", run)
	})
	t.Run("approval-expired", func(t *testing.T) {
		run := approval(t, "expired", 2*time.Second)
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		capture(t, "approval-expired", run)
	})
	t.Run("approval-withdrawn", func(t *testing.T) {
		run := approval(t, "withdrawn", time.Hour)
		if err := c.CancelWorkflow(ctx, run.GetID(), run.GetRunID()); err != nil {
			t.Fatal(err)
		}
		capture(t, "approval-withdrawn", run)
	})
	t.Run("run-succeeded", func(t *testing.T) {
		// A run started by a real Temporal Schedule, so it carries the time
		// it was due.
		in := runInput("hello", 0)
		sh, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID:     "schedule/" + scheduleID,
			Spec:   client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: time.Hour}}},
			Action: &client.ScheduleWorkflowAction{ID: "schedule-run/" + scheduleID, Workflow: workflowcontract.WorkflowOf(in).Name, Args: []any{in}, TaskQueue: schedules.TaskQueue()},
			Paused: true, TriggerImmediately: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Delete(ctx) }()
		var runID string
		for deadline := time.Now().Add(30 * time.Second); runID == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			d, err := sh.Describe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if acts := d.Info.RecentActions; len(acts) > 0 {
				runID = acts[0].StartWorkflowResult.WorkflowID
			}
		}
		if runID == "" {
			t.Fatal("the schedule started no run")
		}
		run := c.GetWorkflow(ctx, runID, "")
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		capture(t, "run-succeeded", run)
	})
	startRun := func(t *testing.T, id string, in *schedulesv1.RunInput) client.WorkflowRun {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: schedules.TaskQueue()}, workflowcontract.WorkflowOf(in).Name, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return run
	}
	t.Run("run-retried-then-failed", func(t *testing.T) {
		run := startRun(t, "schedule-run/"+scheduleID+"-by-hand", runInput("hello", testingv1.Failure_FAILURE_UNAVAILABLE))
		capture(t, "run-retried-then-failed", run)
	})
	t.Run("run-refused", func(t *testing.T) {
		fake.mu.Lock()
		fake.refuseStart = connect.NewError(connect.CodeFailedPrecondition, errors.New("run refused: schedule "+scheduleID+" is paused"))
		fake.mu.Unlock()
		capture(t, "run-refused", startRun(t, "schedule-run/"+scheduleID+"-refused", runInput("hello", 0)))
	})
}
