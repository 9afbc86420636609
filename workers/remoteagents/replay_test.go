package remoteagents_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/a2atest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

var invokeType = workflowcontract.WorkflowOf(&remoteagentsv1.InvokeWorkflowInput{}).Name

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break invocations in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, remoteagents.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { remoteagents.Register(r, &remoteagents.Activities{}) })
}

// recorder stands in for RemoteAgentsService's RecordInvocationOutcome.
type recorder struct {
	remoteagentsv1connect.UnimplementedRemoteAgentsServiceHandler
}

func (recorder) RecordInvocationOutcome(context.Context, *remoteagentsv1.RecordInvocationOutcomeRequest) (*remoteagentsv1.RecordInvocationOutcomeResponse, error) {
	return &remoteagentsv1.RecordInvocationOutcomeResponse{}, nil
}

func (recorder) RecordInvocationEvent(context.Context, *remoteagentsv1.RecordInvocationEventRequest) (*remoteagentsv1.RecordInvocationEventResponse, error) {
	return &remoteagentsv1.RecordInvocationEventResponse{}, nil
}

// TestRecordHistories adds the history of each path of the invoke workflow,
// open and closed, to testdata/histories: the real activities against an
// A2A agent on the official Go SDK, on a dev server. It never overwrites a
// history:
//
//	go test ./workers/remoteagents -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	ctx := context.Background()
	c := workflowtest.Dial(t, temporalServer.Server(t))
	rec := servertest.Start(t, server.Register(remoteagentsv1connect.RemoteAgentsServiceName, remoteagentsv1connect.RemoteAgentsServiceHandler(recorder{}),
		remoteagentsv1connect.NewRemoteAgentsServiceHandler, remoteagentsv1.RegisterRemoteAgentsServiceHandler))
	acts := activities(t)
	acts.RemoteAgents = remoteagentsv1connect.NewRemoteAgentsServiceClient(rec.Client(), rec.URL, servertest.ClientOptions(nil)...)
	acts.Self = mesh.Caller{Subject: "toolmesh-worker-remoteagents", Agent: "toolmesh-worker-remoteagents", Roles: []string{mesh.RoleService}}
	workflowtest.StartWorker(t, c, remoteagents.TaskQueue(), func(r worker.Registry) { remoteagents.Register(r, acts) })
	base, _ := serveAgent03(t, &travelAgent03{})

	// capture starts an invocation, lets it send, drives it, and records
	// its history once it is idle again: following the task, or ended.
	capture := func(scenario, url, text string, drive func(id string, run client.WorkflowRun)) {
		t.Run(scenario, func(t *testing.T) {
			in := invokeInput(url, text)
			in.InvocationId = "inv_" + scenario
			id := "invoke/planner/" + in.InvocationId
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: remoteagents.TaskQueue(), StaticSummary: "replay: " + scenario}, invokeType, in)
			if err != nil {
				t.Fatal(err)
			}
			if err := workflowtest.WaitIdle(ctx, c, id, run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			drive(id, run)
			if err := workflowtest.WaitIdle(ctx, c, id, run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			workflowtest.Record(t, c, *record, scenario, id, run.GetRunID())
		})
	}
	// An agent that streams: its task is followed by StreamMessage.
	streaming := a2atest.NewProgressAgent("Searching flights.")
	streaming.Step(2)
	streamed := a2atest.Serve(t, streaming, true)

	// polled waits until the run has read the remote task n times.
	polled := func(id string, run client.WorkflowRun, n int) {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			h, err := workflowtest.History(ctx, c, id, run.GetRunID())
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, e := range h.GetEvents() {
				if a := e.GetActivityTaskCompletedEventAttributes(); a != nil {
					got++
				}
			}
			if got >= n+1 { // the send, then n polls
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s did not poll %d times", id, n)
	}

	capture("answered-by-message", base, "quick question", func(id string, run client.WorkflowRun) {
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	capture("following-a-task", base, "book a flight", func(id string, run client.WorkflowRun) { polled(id, run, 2) })
	capture("cancelled", base, "book a hotel", func(id string, run client.WorkflowRun) {
		polled(id, run, 2)
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		_ = run.Get(ctx, nil)
	})
	capture("streamed", streamed, "book a train", func(id string, run client.WorkflowRun) {
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
}
