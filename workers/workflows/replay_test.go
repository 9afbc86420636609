package workflows_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
	workflows "github.com/toolmesh/toolmesh/workers/workflows"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

var runType = workflowcontract.WorkflowOf(&workflowsv1.RunWorkflowInput{}).Name

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break runs in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, workflows.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { workflows.Register(r, &workflows.Activities{}) })
}

// fakeTools answer calls.invoke as the example's services would.
func fakeTools(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
	var a map[string]any
	if err := json.Unmarshal([]byte(in.GetArguments()), &a); err != nil {
		return nil, err
	}
	var data string
	switch in.GetTool() {
	case "memory_save":
		data = fmt.Sprintf(`{"memory":{"key":%q,"content":%q},"created":true}`, a["key"], a["content"])
	case "memory_get":
		data = fmt.Sprintf(`{"memory":{"key":%q,"content":"flaky deploys"}}`, a["key"])
	case "tasks_create":
		data = fmt.Sprintf(`{"task":{"id":"tsk_1","description":%q,"status":"TASK_STATUS_PENDING"}}`, a["description"])
	case "tasks_update_status":
		data = fmt.Sprintf(`{"task":{"id":%q,"status":%q}}`, a["task_id"], a["status"])
	default:
		return &callsv1.InvokeOutput{Envelope: `{"status":"error","domain_code":"not_supported","message":"no such fake tool"}`}, nil
	}
	return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":` + data + `}`}, nil
}

// fakeOwner answers approvals: approve, after answerAfter (forever when 0).
type fakeOwner struct{ answerAfter time.Duration }

func (f fakeOwner) ask(_ context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
	return &workflowsv1.ApprovalOutcome{AskId: "ask_" + in.GetNodeId(), Status: "pending"}, nil
}

func (f fakeOwner) await(ctx context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
	if f.answerAfter == 0 {
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	time.Sleep(f.answerAfter)
	return &workflowsv1.ApprovalOutcome{AskId: in.GetAskId(), Status: "answered", Answer: workflows.AnswerApprove, AnsweredBy: "alice"}, nil
}

// TestRecordHistories adds the history of each path of the run workflow,
// open and closed, to testdata/histories: the real workflow with faked
// tools, owner and service, on a dev server. It never overwrites a history:
//
//	go test ./workers/workflows -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	ctx := context.Background()
	c := workflowtest.Dial(t, temporalServer.Server(t))
	workflowtest.StartWorker(t, c, calls.Contract().TaskQueue, func(r worker.Registry) {
		r.RegisterActivityWithOptions(fakeTools, activity.RegisterOptions{Name: calls.ActivityInvoke})
	})
	def := example(t).GetDefinition()
	capture := func(scenario string, owner fakeOwner, in *workflowsv1.RunWorkflowInput, drive func(id string), idle func(id string) bool) {
		t.Run(scenario, func(t *testing.T) {
			queue := workflows.TaskQueue() + "-" + scenario
			workflowtest.StartWorker(t, c, queue, func(r worker.Registry) {
				workflows.RegisterWorkflows(r)
				r.RegisterActivityWithOptions(owner.ask, activity.RegisterOptions{Name: workflows.ActivityAsk})
				r.RegisterActivityWithOptions(owner.await, activity.RegisterOptions{Name: workflows.ActivityAwaitAnswer})
				r.RegisterActivityWithOptions(func(context.Context, *workflowsv1.ApprovalInput) error { return nil }, activity.RegisterOptions{Name: workflows.ActivityWithdrawAsk})
				r.RegisterActivityWithOptions(func(context.Context, *workflowsv1.RecordRunRequest) error { return nil }, activity.RegisterOptions{Name: workflows.ActivityRecordRun})
				r.RegisterActivityWithOptions(func(context.Context, *workflowsv1.ExtendUpdate) error { return nil }, activity.RegisterOptions{Name: workflows.ActivityRecordExtension})
			})
			in.RunId = "run_" + scenario
			id := "workflow-run/agent-a/" + in.GetRunId()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue, StaticSummary: "replay: " + scenario}, runType, in)
			if err != nil {
				t.Fatal(err)
			}
			drive(id)
			deadline := time.Now().Add(time.Minute)
			for !idle(id) {
				if time.Now().After(deadline) {
					t.Fatalf("%s did not come to rest", id)
				}
				time.Sleep(50 * time.Millisecond)
			}
			workflowtest.Record(t, c, *record, scenario, id, run.GetRunID())
		})
	}
	ended := func(id string) bool {
		d, err := c.DescribeWorkflow(ctx, id, "")
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetCloseTime() != nil
	}
	suspended := func(id string) bool {
		v, err := c.QueryWorkflow(ctx, id, "", "state")
		var o workflowsv1.RunOutcome
		return err == nil && v.Get(&o) == nil && o.GetStatus() == workflowsv1.RunStatus_RUN_STATUS_SUSPENDED
	}
	newInput := func(deadline time.Duration) *workflowsv1.RunWorkflowInput {
		in := input(t, def, map[string]any{"topic": "flaky deploys"})
		in.Deadline = timestamppb.New(time.Now().Add(deadline))
		in.MaxDeadline = timestamppb.New(time.Now().Add(24 * time.Hour))
		return in
	}
	nothing := func(string) {}

	capture("completed", fakeOwner{answerAfter: 100 * time.Millisecond}, newInput(time.Hour), nothing, ended)
	capture("suspended", fakeOwner{}, newInput(time.Hour), nothing, suspended)
	refused := newInput(time.Hour)
	refused.RefusedTools = map[string]string{"tasks_create": "it needs scope toolmesh:write"}
	capture("permission-denied", fakeOwner{}, refused, nothing, ended)
	capture("cancelled-while-suspended", fakeOwner{}, newInput(time.Hour), func(id string) {
		for !suspended(id) {
			time.Sleep(50 * time.Millisecond)
		}
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}, ended)
	capture("extended-then-past-deadline", fakeOwner{}, newInput(3*time.Second), func(id string) {
		for !suspended(id) {
			time.Sleep(50 * time.Millisecond)
		}
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: "extend", WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{&workflowsv1.ExtendUpdate{Deadline: timestamppb.New(time.Now().Add(5 * time.Second)), Reason: "replay", RequestedBy: "alice",
				CallId: "workflows-extend/replay", Request: &workflowsv1.ExtendRunRequest{RunId: "run_extended-then-past-deadline", ExtendSeconds: 60, Reason: "replay"}}}})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}, ended)
}
