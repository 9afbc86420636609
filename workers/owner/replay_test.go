package owner_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	owner "github.com/toolmesh/toolmesh/workers/owner"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

// dial connects to the shared dev server the way a worker does.
func dial(t *testing.T) client.Client { return workflowtest.Dial(t, temporalServer.Server(t)) }

var askType = workflowcontract.WorkflowOf(&ownerv1.AskWorkflowInput{}).Name

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break asks in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, owner.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { owner.Register(r, &owner.Activities{}) })
}

// TestRecordHistories adds the history of each path of the ask workflow,
// open and closed, to testdata/histories: the real activities over a fake
// OwnerService, on a dev server. It never overwrites a history:
//
//	go test ./workers/owner -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	ctx := context.Background()
	c := dial(t)
	_, acts := startFakeOwner(t)
	workflowtest.StartWorker(t, c, owner.TaskQueue(), func(r worker.Registry) { owner.Register(r, acts) })

	// capture starts an ask, lets it notify and wait, drives it, and records
	// its history once it is idle again: still waiting or ended.
	capture := func(scenario string, expireIn time.Duration, drive func(id string)) {
		t.Run(scenario, func(t *testing.T) {
			in := askInput("yes", "no")
			in.AskId = "ask_" + scenario
			in.ExpireTime = timestamppb.New(time.Now().Add(expireIn))
			id := "ask/agent-a/" + in.AskId
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: owner.TaskQueue(), StaticSummary: "replay: " + scenario}, askType, in)
			if err != nil {
				t.Fatal(err)
			}
			if err := workflowtest.WaitIdle(ctx, c, id, run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			drive(id)
			if err := workflowtest.WaitIdle(ctx, c, id, run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			workflowtest.Record(t, c, *record, scenario, id, run.GetRunID())
		})
	}
	answer := func(id, answer string) error {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: "answer",
			Args: []any{&ownerv1.AnswerUpdate{Answer: answer, AnsweredBy: "alice"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		return err
	}
	signal := func(id, answer string) {
		if err := c.SignalWorkflow(ctx, id, "", "answer", &ownerv1.AnswerSignal{Answer: answer}); err != nil {
			t.Fatal(err)
		}
	}

	capture("waiting", time.Hour, func(string) {})
	capture("waiting-after-ignored-signal", time.Hour, func(id string) { signal(id, "perhaps") })
	capture("answered-by-update", time.Hour, func(id string) {
		// A refused update first: it must leave no trace to replay.
		if err := answer(id, "maybe"); err == nil {
			t.Error("an invalid answer was accepted")
		}
		if err := answer(id, "yes"); err != nil {
			t.Fatal(err)
		}
	})
	capture("answered-by-signal", time.Hour, func(id string) {
		signal(id, "perhaps")
		signal(id, "no")
	})
	capture("expired", 2*time.Second, func(id string) {
		if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	capture("extended-then-answered", time.Hour, func(id string) {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: "extend",
			Args: []any{&ownerv1.ExtendUpdate{ExpireTime: timestamppb.New(time.Now().Add(3 * time.Hour)), Reason: "the owner is away", RequestedBy: "agent-a",
				CallId: "owner-extend/replay", Request: &ownerv1.ExtendAskRequest{AskId: "ask_extended-then-answered", ExtendSeconds: 7200, Reason: "the owner is away"}}},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := answer(id, "yes"); err != nil {
			t.Fatal(err)
		}
	})
	capture("cancelled", time.Hour, func(id string) {
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	})
}
