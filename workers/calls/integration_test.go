package calls_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

// devCall is an ElicitedCall on the dev server, its activities faked.
type devCall struct {
	t       *testing.T
	c       client.Client
	queue   string
	invokes atomic.Int32
	// hold, when not nil, holds the side effect until it is closed.
	hold chan struct{}
}

func newDevCall(t *testing.T) *devCall {
	c := dial(t)
	d := &devCall{t: t, c: c, queue: "calls-" + randomHex(4)}
	workflowtest.StartWorker(t, c, d.queue, func(r worker.Registry) {
		calls.RegisterWorkflows(r)
		d.registerActivities(r)
	})
	return d
}

// dial connects to the shared dev server the way a worker does.
func dial(t *testing.T) client.Client { return workflowtest.Dial(t, temporalServer.Server(t)) }

// registerActivities adds fakes of the activities: the side effect counts
// its runs, the preview shows three run times.
func (d *devCall) registerActivities(r worker.ActivityRegistry) {
	r.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		d.invokes.Add(1)
		if d.hold != nil {
			<-d.hold
		}
		return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{"removed":2}}`}, nil
	}, activity.RegisterOptions{Name: calls.ActivityInvoke})
	r.RegisterActivityWithOptions(func(context.Context, *callsv1.ExtendTaskUpdate) error { return nil },
		activity.RegisterOptions{Name: calls.ActivityRecordExtension})
	r.RegisterActivityWithOptions(func(context.Context, *callsv1.EndVisitInput) error { return nil },
		activity.RegisterOptions{Name: calls.ActivityEndVisit})
	r.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{"next_runs":["2030-01-01T11:00:00Z","2030-01-01T13:00:00Z","2030-01-01T15:00:00Z"]}}`}, nil
	}, activity.RegisterOptions{Name: calls.ActivityPreview})
}

// start starts the workflow with round 0 (update-with-start, as the edge
// does) and returns its run id and first result.
func (d *devCall) start(id string, in *callsv1.ElicitedCallInput) (string, *callsv1.RoundResult) {
	d.t.Helper()
	run, res, err := startCall(context.Background(), d.c, d.queue, id, in)
	if err != nil {
		d.t.Fatal(err)
	}
	return run.GetRunID(), res
}

// round delivers a round; it returns the update's error (a refusal).
func (d *devCall) round(id, runID string, round int32, answers map[string]*callsv1.Answer) (*callsv1.RoundResult, error) {
	return sendRound(context.Background(), d.c, id, runID, round, answers)
}

// startCall starts an elicited call on queue with round 0, as the edge does
// (update-with-start), and returns the run and the first round's result.
func startCall(ctx context.Context, c client.Client, queue, id string, in *callsv1.ElicitedCallInput) (client.WorkflowRun, *callsv1.RoundResult, error) {
	op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, calls.Contract().Name, in)
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: id + "/1", UpdateName: calls.RoundUpdate().Name,
			Args:         []any{&callsv1.RoundRequest{Round: 0, ArgumentsDigest: in.GetArgumentsDigest()}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return nil, nil, err
	}
	var res callsv1.RoundResult
	if err := h.Get(ctx, &res); err != nil {
		return nil, nil, err
	}
	run, err := op.Get(ctx)
	if err != nil {
		return nil, nil, err
	}
	return run, &res, nil
}

// sendRound delivers the answers of a round.
func sendRound(ctx context.Context, c client.Client, id, runID string, round int32, answers map[string]*callsv1.Answer) (*callsv1.RoundResult, error) {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, RunID: runID, UpdateID: fmt.Sprintf("%s/%d/%s", id, round+1, randomHex(4)),
		UpdateName:   calls.RoundUpdate().Name,
		Args:         []any{&callsv1.RoundRequest{Round: round, ArgumentsDigest: digest, Answers: answers}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return nil, err
	}
	var res callsv1.RoundResult
	if err := h.Get(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (d *devCall) history(id, runID string) *historypb.History {
	d.t.Helper()
	h, err := workflowtest.History(context.Background(), d.c, id, runID)
	if err != nil {
		d.t.Fatal(err)
	}
	return h
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func callID(t *testing.T) string {
	return "call/testing_purge/" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + randomHex(8)
}

// On a real server: a stale, repeated or foreign round is refused without
// a single event written to the call's history, and the call carries on.
func TestRefusedRoundsLeaveNoTraceInHistory(t *testing.T) {
	d := newDevCall(t)
	id := callID(t)
	runID, first := d.start(id, purgeInput(t))
	if first.GetRound() != 1 {
		t.Fatalf("first result = %v", first)
	}
	ok := map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}
	if _, err := d.round(id, runID, 1, ok); err != nil {
		t.Fatal(err)
	}
	before := len(d.history(id, runID).GetEvents())
	for name, round := range map[string]int32{"repeated": 1, "stale": 0, "ahead": 5} {
		if _, err := d.round(id, runID, round, ok); err == nil {
			t.Errorf("%s round was accepted", name)
		}
	}
	if after := len(d.history(id, runID).GetEvents()); after != before {
		t.Errorf("refused rounds changed the history from %d to %d events", before, after)
	}
	final, err := d.round(id, runID, 2, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "r"})})
	if err != nil || final.GetEnvelope() == "" || final.GetCallId() == "" {
		t.Fatalf("final round = %v, %v", final, err)
	}
	// The call is over: another round is refused by Temporal itself.
	if _, err := d.round(id, runID, 2, nil); err == nil {
		t.Error("a round after the end was accepted")
	}
	if n := d.invokes.Load(); n != 1 {
		t.Errorf("side effect ran %d times", n)
	}
}

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break calls in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, calls.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { calls.Register(r, &calls.Activities{}) })
}

// TestRecordHistories adds the history of each path of the workflow, open
// (waiting for a round) and closed, to testdata/histories, from a dev
// server with the activities faked. It never overwrites a history:
//
//	go test ./workers/calls -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	d := newDevCall(t)
	ctx := context.Background()
	type round struct {
		round   int32
		answers map[string]*callsv1.Answer
	}
	// capture starts a call, answers its rounds, waits until it is idle
	// (waiting for the next round, or over) and records its history.
	capture := func(scenario string, in *callsv1.ElicitedCallInput, rounds []round, end func(id, runID string) error) {
		t.Run(scenario, func(t *testing.T) {
			id := callID(t)
			runID, _ := d.start(id, in)
			for _, r := range rounds {
				if _, err := d.round(id, runID, r.round, r.answers); err != nil {
					t.Fatal(err)
				}
			}
			if err := end(id, runID); err != nil {
				t.Fatal(err)
			}
			if err := workflowtest.WaitIdle(ctx, d.c, id, runID); err != nil {
				t.Fatal(err)
			}
			workflowtest.Record(t, d.c, *record, scenario, id, runID)
		})
	}
	waiting := func(string, string) error { return nil }
	ended := func(id, runID string) error { return d.c.GetWorkflow(ctx, id, runID).Get(ctx, nil) }
	fields := round{1, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}}
	remindFields := round{1, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"every": "2h", "channel": "CHANNEL_LOG"})}}

	capture("waiting-first-round", purgeInput(t), nil, waiting)
	capture("waiting-admin", purgeInput(t), []round{fields}, waiting)
	capture("waiting-confirm", remindInput(t), []round{remindFields}, waiting)
	// Fields, a re-asked admin question, the side effect.
	capture("fields-admin-reasked", purgeInput(t), []round{
		fields,
		{2, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true})}},
		{3, map[string]*callsv1.Answer{"r3.admin": accept(t, map[string]any{"confirm": true, "reason": "cleanup"})}},
	}, ended)
	// Fields, a preview confirmation, the side effect.
	capture("fields-preview", remindInput(t), []round{
		remindFields,
		{2, map[string]*callsv1.Answer{"r2.confirm": accept(t, map[string]any{"confirm": true})}},
	}, ended)
	capture("declined", purgeInput(t), []round{{1, map[string]*callsv1.Answer{"r1.fields": {Action: callsv1.Action_ACTION_DECLINE}}}}, ended)
	// A call its service refused pending a visit: waiting for the person,
	// and declined (end-visit: the service is told, since version 2 in an
	// activity of its own).
	capture("visit-waiting", visitInput(), nil, waiting)
	capture("visit-declined", visitInput(), []round{{1, map[string]*callsv1.Answer{"r1.visit": {Action: callsv1.Action_ACTION_DECLINE}}}}, ended)
	// A task that asks nothing: its side effect runs in the background.
	task := purgeInput(t)
	task.Task, task.Steps = true, nil
	task.Arguments = `{"agent_id":"agent-9","confirm":true,"reason":"r"}`
	capture("task-ran", task, nil, ended)
	// The same task, extended while its side effect runs (task-deadline
	// version 1): the extend update and its audit activity.
	d.hold = make(chan struct{})
	capture("task-extended", task, nil, func(id, runID string) error {
		var view callsv1.TaskView
		for deadline := time.Now().Add(30 * time.Second); view.GetDeadline() == nil; time.Sleep(20 * time.Millisecond) {
			v, err := d.c.QueryWorkflow(ctx, id, runID, calls.TaskQuery().Name)
			if err == nil {
				err = v.Get(&view)
			}
			if err != nil || time.Now().After(deadline) {
				return fmt.Errorf("the task's side effect did not run: %v", err)
			}
		}
		h, err := d.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: id, RunID: runID, UpdateID: id + "/extend/1", UpdateName: calls.ExtendUpdate().Name,
			Args: []any{&callsv1.ExtendTaskUpdate{Caller: alice, Deadline: timestamppb.New(view.GetDeadline().AsTime().Add(time.Hour)),
				Reason: "the import is bigger than planned", CallId: "calls-extend:1"}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		close(d.hold)
		if err != nil {
			return err
		}
		return ended(id, runID)
	})
	d.hold = nil
	abandoned := purgeInput(t)
	abandoned.RoundTimeout = durationpb.New(time.Second)
	capture("abandoned", abandoned, nil, func(id, runID string) error {
		var appErr *temporal.ApplicationError
		if err := ended(id, runID); !errors.As(err, &appErr) || appErr.Type() != calls.ErrTypeAbandoned {
			return fmt.Errorf("abandoned call ended with %v", err)
		}
		return nil
	})
}
