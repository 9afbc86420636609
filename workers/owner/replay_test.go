package owner_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/temporaltest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	owner "github.com/toolmesh/toolmesh/workers/owner"
)

var record = flag.Bool("record", false, "record the histories in testdata/ against a Temporal dev server (bin/temporal) before replaying them")

// histories are the recorded runs the replay test checks the workflow
// against: a change to the workflow that would break a running ask fails
// here.
var histories = []string{"answered_by_update", "answered_by_signal", "expired", "cancelled"}

func TestReplayRecordedHistories(t *testing.T) {
	if *record {
		recordHistories(t)
	}
	for _, name := range histories {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name+".json")
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%v (record it: go test ./workers/owner -run TestReplay -record)", err)
			}
			temporaltest.Replay(t, path, "owner.ask", owner.AskWorkflow)
		})
	}
}

// recordHistories runs one ask workflow per history on a dev server, with
// the real activities calling a fake OwnerService, and writes each history
// as JSON (the format of `temporal workflow show --output json`).
func recordHistories(t *testing.T) {
	srv := temporaltest.Start(t)
	ctx := context.Background()
	c, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: srv.HostPort, Namespace: srv.Namespace}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, acts := startFakeOwner(t)
	w := worker.New(c, owner.TaskQueue(), worker.Options{})
	owner.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	run := func(name string, expireIn time.Duration, drive func(id string)) {
		in := askInput("yes", "no")
		in.AskId = "ask_" + name
		in.ExpireTime = timestamppb.New(time.Now().Add(expireIn))
		id := "ask/agent-a/" + in.AskId
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: owner.TaskQueue(), StaticSummary: "replay: " + name}, "owner.ask", in)
		if err != nil {
			t.Fatal(err)
		}
		// Let it notify and start waiting before it is driven.
		waitFor(t, func() bool {
			v, err := c.QueryWorkflow(ctx, id, "", "status")
			return err == nil && v.HasValue()
		})
		drive(id)
		_ = run.Get(ctx, nil)
		temporaltest.SaveHistory(t, c, id, run.GetRunID(), filepath.Join("testdata", name+".json"))
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	run("answered_by_update", time.Hour, func(id string) {
		// A refused update first: it must leave no trace to replay.
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: "answer", Args: []any{&ownerv1.AnswerUpdate{Answer: "maybe"}},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err == nil {
			t.Error("an invalid answer was accepted")
		}
		h, err = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: "answer", Args: []any{&ownerv1.AnswerUpdate{Answer: "yes", AnsweredBy: "alice"}},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	run("answered_by_signal", time.Hour, func(id string) {
		for _, answer := range []string{"perhaps", "no"} {
			if err := c.SignalWorkflow(ctx, id, "", "answer", &ownerv1.AnswerSignal{Answer: answer}); err != nil {
				t.Fatal(err)
			}
		}
	})
	run("expired", 2*time.Second, func(string) {})
	run("cancelled", time.Hour, func(id string) {
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
