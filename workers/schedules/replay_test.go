package schedules_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testingsvc"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/schedules"

	tlog "go.temporal.io/sdk/log"
)

var record = flag.Bool("record", false, "run the workflows on a Temporal dev server and rewrite testdata/*.history.json")

// histories are the recorded histories every change to the workflows must
// still replay: one per path a workflow takes.
var histories = []string{
	"approval-approved",
	"approval-refused-then-denied",
	"approval-expired",
	"approval-withdrawn",
	"run-succeeded",
	"run-retried-then-failed",
	"run-refused",
}

// TestReplay replays the recorded histories against the current workflow
// code: a change that would break workflows already running fails here.
// Rerecord with `go test ./workers/schedules -run TestRecordHistories -record`
// only for a deliberate, versioned change.
func TestReplay(t *testing.T) {
	for _, name := range histories {
		t.Run(name, func(t *testing.T) {
			r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: temporalclient.DataConverter()})
			if err != nil {
				t.Fatal(err)
			}
			schedules.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(logging.Discard()), historyPath(name)); err != nil {
				t.Errorf("replay %s: %v", name, err)
			}
		})
	}
}

func historyPath(name string) string { return filepath.Join("testdata", name+".history.json") }

// TestRecordHistories runs each path of the workflows on a real dev server,
// with the real activities over a fake schedules service and the test-only
// testing service, and writes their histories to testdata.
func TestRecordHistories(t *testing.T) {
	if !*record {
		t.Skip("run with -record to rewrite testdata/*.history.json")
	}
	ctx := context.Background()
	dev := temporaltest.Start(t)
	c, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: dev.HostPort, Namespace: dev.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	fake := &fakeSchedules{}
	backend := testingsvc.New()
	srv := servertest.Start(t, backend.Server())
	tools, err := toolcall.BindAll(toolcall.BindConfig{
		Contracts:  []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")},
		Services:   map[string]string{testingv1connect.TestingServiceName: srv.URL},
		HTTPClient: srv.Client(), Timeout: 5 * time.Second, Log: logging.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(c, schedules.TaskQueue(), worker.Options{})
	schedules.Register(w, &schedules.Activities{
		Schedules: fake, Identity: workerCaller, Notifier: &fakeNotifier{}, Tools: tools, Mesh: servertest.MeshSigner(), Log: logging.Discard(),
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	approval := func(name string, timeout time.Duration) client.WorkflowRun {
		in := approvalInput()
		in.Timeout = durationpb.New(timeout)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: approvalID() + "-" + name, TaskQueue: schedules.TaskQueue()},
			workflowcontract.WorkflowOf(in).Name, in)
		if err != nil {
			t.Fatal(err)
		}
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
	save := func(name string, run client.WorkflowRun) {
		t.Helper()
		_ = run.Get(ctx, nil)
		hist := &historypb.History{}
		it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			hist.Events = append(hist.Events, ev)
		}
		b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(historyPath(name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s: %d events", name, len(hist.Events))
	}

	run := approval("approved", time.Hour)
	if err := update(run, "approve", &schedulesv1.ApproveUpdate{Note: "fine", DecidedBy: "owner-1"}); err != nil {
		t.Fatal(err)
	}
	save("approval-approved", run)

	fake.decide = func(req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
		if req.GetKind() == schedulesv1.DecisionKind_DECISION_KIND_APPROVE {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("schedule changed since the owner was asked"))
		}
		return applied(req), nil
	}
	run = approval("refused", time.Hour)
	if err := update(run, "approve", &schedulesv1.ApproveUpdate{}); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("approve after a change: %v, want refused", err)
	}
	if err := update(run, "deny", &schedulesv1.DenyUpdate{Note: "changed", DecidedBy: "owner-1"}); err != nil {
		t.Fatal(err)
	}
	save("approval-refused-then-denied", run)
	fake.decide = nil

	save("approval-expired", approval("expired", 2*time.Second))

	run = approval("withdrawn", time.Hour)
	time.Sleep(500 * time.Millisecond)
	if err := c.CancelWorkflow(ctx, run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	save("approval-withdrawn", run)

	// A run started by a real Temporal Schedule, so it carries the time it
	// was due.
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
	save("run-succeeded", c.GetWorkflow(ctx, runID, ""))

	failing := runInput("hello", testingv1.Failure_FAILURE_UNAVAILABLE)
	r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "schedule-run/" + scheduleID + "-by-hand", TaskQueue: schedules.TaskQueue()},
		workflowcontract.WorkflowOf(failing).Name, failing)
	if err != nil {
		t.Fatal(err)
	}
	save("run-retried-then-failed", r)

	fake.refuseStart = connect.NewError(connect.CodeFailedPrecondition, errors.New("run refused: schedule "+scheduleID+" is paused"))
	refusedRun := runInput("hello", 0)
	r, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "schedule-run/" + scheduleID + "-refused", TaskQueue: schedules.TaskQueue()},
		workflowcontract.WorkflowOf(refusedRun).Name, refusedRun)
	if err != nil {
		t.Fatal(err)
	}
	save("run-refused", r)
}
