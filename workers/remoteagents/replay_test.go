package remoteagents_test

import (
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/temporaltest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

var record = flag.Bool("record", false, "record the histories in testdata/ against a Temporal dev server (bin/temporal) before replaying them")

// histories are the recorded runs the replay test checks the workflow
// against: a change that would break a running invocation fails here.
var histories = []string{"answered_by_message", "followed_then_cancelled"}

func TestReplayRecordedHistories(t *testing.T) {
	if *record {
		recordHistories(t)
	}
	for _, name := range histories {
		t.Run(name, func(t *testing.T) {
			temporaltest.Replay(t, filepath.Join("testdata", name+".json"), "remoteagents.invoke", remoteagents.InvokeWorkflow)
		})
	}
}

// recorder stands in for RemoteAgentsService's RecordInvocationOutcome.
type recorder struct {
	remoteagentsv1connect.UnimplementedRemoteAgentsServiceHandler
}

func (recorder) RecordInvocationOutcome(context.Context, *remoteagentsv1.RecordInvocationOutcomeRequest) (*remoteagentsv1.RecordInvocationOutcomeResponse, error) {
	return &remoteagentsv1.RecordInvocationOutcomeResponse{}, nil
}

// recordHistories runs invocations on a dev server, with the real
// activities against an A2A agent on the official Go SDK, and writes each
// history as JSON.
func recordHistories(t *testing.T) {
	srv := temporaltest.Start(t)
	ctx := context.Background()
	c, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: srv.HostPort, Namespace: srv.Namespace}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := servertest.Start(t, server.Register(remoteagentsv1connect.RemoteAgentsServiceName, remoteagentsv1connect.RemoteAgentsServiceHandler(recorder{}),
		remoteagentsv1connect.NewRemoteAgentsServiceHandler, remoteagentsv1.RegisterRemoteAgentsServiceHandler))
	acts := activities(t)
	acts.RemoteAgents = remoteagentsv1connect.NewRemoteAgentsServiceClient(rec.Client(), rec.URL, servertest.ClientOptions(nil)...)
	acts.Self = mesh.Caller{Subject: "toolmesh-worker-remoteagents", Agent: "toolmesh-worker-remoteagents", Roles: []string{mesh.RoleService}}
	w := worker.New(c, remoteagents.TaskQueue(), worker.Options{})
	remoteagents.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	base := serveAgent(t, &travelAgent{})

	run := func(name, text string, drive func(id string)) {
		in := invokeInput(base, text)
		in.InvocationId = "inv_" + name
		id := "invoke/planner/" + in.InvocationId
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: remoteagents.TaskQueue(), StaticSummary: "replay: " + name}, "remoteagents.invoke", in)
		if err != nil {
			t.Fatal(err)
		}
		drive(id)
		_ = r.Get(ctx, nil)
		temporaltest.SaveHistory(t, c, id, r.GetRunID(), filepath.Join("testdata", name+".json"))
	}
	run("answered_by_message", "quick question", func(string) {})
	run("followed_then_cancelled", "book a flight", func(id string) {
		// Let it poll the working task twice, then cancel it.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			v, err := c.QueryWorkflow(ctx, id, "", "status")
			var o remoteagentsv1.InvokeOutcome
			if err == nil && v.Get(&o) == nil && o.GetRemoteState() == "working" && o.GetTaskId() != "" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(3500 * time.Millisecond) // two polls: 1 s and 2 s later
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	})
}
