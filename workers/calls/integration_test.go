package calls_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/temporaltest"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

var (
	temporalServer temporaltest.Shared
	record         = flag.Bool("record", false, "record the replay histories in testdata/histories from a real dev server")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(temporalServer.Run(m))
}

// devCall is an ElicitedCall on the dev server, its activities faked.
type devCall struct {
	t       *testing.T
	c       client.Client
	queue   string
	invokes atomic.Int32
}

func newDevCall(t *testing.T) *devCall {
	s := temporalServer.Server(t)
	c, err := temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: s.HostPort, Namespace: s.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var r [4]byte
	_, _ = rand.Read(r[:])
	d := &devCall{t: t, c: c, queue: "calls-" + hex.EncodeToString(r[:])}
	w := worker.New(c, d.queue, worker.Options{})
	w.RegisterWorkflowWithOptions(calls.ElicitedCall, workflow.RegisterOptions{Name: calls.Contract().Name})
	w.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		d.invokes.Add(1)
		return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{"removed":2}}`}, nil
	}, activity.RegisterOptions{Name: calls.ActivityInvoke})
	w.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{"next_runs":["2030-01-01T11:00:00Z","2030-01-01T13:00:00Z","2030-01-01T15:00:00Z"]}}`}, nil
	}, activity.RegisterOptions{Name: calls.ActivityPreview})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return d
}

// start starts the workflow with round 0 (update-with-start, as the edge
// does) and returns its id, run id and first result.
func (d *devCall) start(id string, in *callsv1.ElicitedCallInput) (string, *callsv1.RoundResult) {
	d.t.Helper()
	op := d.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: d.queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, calls.Contract().Name, in)
	h, err := d.c.UpdateWithStartWorkflow(context.Background(), client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: id + "/1", UpdateName: calls.RoundUpdate().Name,
			Args:         []any{&callsv1.RoundRequest{Round: 0, ArgumentsDigest: in.GetArgumentsDigest()}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		d.t.Fatal(err)
	}
	var res callsv1.RoundResult
	if err := h.Get(context.Background(), &res); err != nil {
		d.t.Fatal(err)
	}
	run, err := op.Get(context.Background())
	if err != nil {
		d.t.Fatal(err)
	}
	return run.GetRunID(), &res
}

// round delivers a round; it returns the update's error (a refusal).
func (d *devCall) round(id, runID string, round int32, answers map[string]*callsv1.Answer) (*callsv1.RoundResult, error) {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	h, err := d.c.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{
		WorkflowID: id, RunID: runID, UpdateID: fmt.Sprintf("%s/%d/%x", id, round+1, nonce),
		UpdateName:   calls.RoundUpdate().Name,
		Args:         []any{&callsv1.RoundRequest{Round: round, ArgumentsDigest: digest, Answers: answers}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return nil, err
	}
	var res callsv1.RoundResult
	if err := h.Get(context.Background(), &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (d *devCall) history(id, runID string) *historypb.History {
	d.t.Helper()
	var h historypb.History
	it := d.c.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			d.t.Fatal(err)
		}
		h.Events = append(h.Events, e)
	}
	return &h
}

func callID(t *testing.T) string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return "call/testing_purge/" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + hex.EncodeToString(r[:])
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

// Recorded histories of real runs replay against today's workflow code: a
// change that would break calls in flight fails here. Record them again
// (only for an intended, versioned change) with
//
//	go test ./workers/calls -run TestReplay -record
func TestReplay(t *testing.T) {
	dir := filepath.Join("testdata", "histories")
	if *record {
		recordHistories(t, dir)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no histories in %s (record them with -record): %v", dir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(calls.ElicitedCall, workflow.RegisterOptions{Name: calls.Contract().Name})
			if err := r.ReplayWorkflowHistoryFromJSONFile(sdklog.NewStructuredLogger(logging.Discard()), f); err != nil {
				t.Errorf("replay: %v", err)
			}
		})
	}
}

// recordHistories runs the workflow's paths on the dev server and writes
// their histories.
func recordHistories(t *testing.T, dir string) {
	d := newDevCall(t)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(name, id, runID string) {
		h := d.history(id, runID)
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(id, runID string) error {
		return d.c.GetWorkflow(context.Background(), id, runID).Get(context.Background(), nil)
	}

	// Fields, a re-asked admin question, the side effect.
	id := callID(t) + "-admin"
	runID, _ := d.start(id, purgeInput(t))
	steps := []struct {
		round   int32
		answers map[string]*callsv1.Answer
	}{
		{1, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}},
		{2, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true})}},
		{3, map[string]*callsv1.Answer{"r3.admin": accept(t, map[string]any{"confirm": true, "reason": "cleanup"})}},
	}
	for _, s := range steps {
		if _, err := d.round(id, runID, s.round, s.answers); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait(id, runID); err != nil {
		t.Fatal(err)
	}
	write("fields-admin-reasked", id, runID)

	// Fields, a preview confirmation, the side effect.
	id = callID(t) + "-preview"
	runID, _ = d.start(id, remindInput(t))
	if _, err := d.round(id, runID, 1, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"every": "2h", "channel": "CHANNEL_LOG"})}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.round(id, runID, 2, map[string]*callsv1.Answer{"r2.confirm": accept(t, map[string]any{"confirm": true})}); err != nil {
		t.Fatal(err)
	}
	if err := wait(id, runID); err != nil {
		t.Fatal(err)
	}
	write("fields-preview", id, runID)

	// Declined.
	id = callID(t) + "-declined"
	runID, _ = d.start(id, purgeInput(t))
	if _, err := d.round(id, runID, 1, map[string]*callsv1.Answer{"r1.fields": {Action: callsv1.Action_ACTION_DECLINE}}); err != nil {
		t.Fatal(err)
	}
	if err := wait(id, runID); err != nil {
		t.Fatal(err)
	}
	write("declined", id, runID)

	// Abandoned.
	id = callID(t) + "-abandoned"
	in := purgeInput(t)
	in.RoundTimeout = durationpbOf(time.Second)
	runID, _ = d.start(id, in)
	var appErr *temporal.ApplicationError
	if err := wait(id, runID); !errors.As(err, &appErr) || appErr.Type() != calls.ErrTypeAbandoned {
		t.Fatalf("abandoned call ended with %v", err)
	}
	write("abandoned", id, runID)
}

func durationpbOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
