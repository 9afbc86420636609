package remoteagents_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
)

// TestInvokeStreamReportsProgressThenTheOutcome: while InvokeStream waits,
// each event the workflow records reaches the caller once, in order, as
// progress (and what the agent said as a log message); then the outcome.
// GetInvocation shows the latest progress of a working invocation.
func TestInvokeStreamReportsProgressThenTheOutcome(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	ctx := servertest.WithIdempotencyKey(at("planner", 0), "call-stream")
	st, err := f.client.InvokeStream(ctx, &remoteagentsv1.InvokeStreamRequest{Url: agentURL, Message: "Book a flight.", WaitSeconds: wait(30)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	invID := remoteagents.InvocationID("planner", "call-stream", time.Now())
	id := remoteagents.WorkflowID("planner", invID)
	if !eventually(func() bool { return f.wf.run(id) != nil }) {
		t.Fatal("the invocation's workflow did not start")
	}
	worker := remote("toolmesh-worker-remoteagents", 0)
	record := func(key, state, text string) {
		t.Helper()
		if _, err := f.client.RecordInvocationEvent(worker, &remoteagentsv1.RecordInvocationEventRequest{InvocationId: invID, EventKey: key,
			RemoteState: state, Text: text, TaskId: "task-1"}); err != nil {
			t.Fatal(err)
		}
	}
	// An agent may not record events.
	if _, err := f.client.RecordInvocationEvent(at("planner", 0), &remoteagentsv1.RecordInvocationEventRequest{InvocationId: invID,
		EventKey: "k"}); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent recording an event: %v, want permission_denied", err)
	}

	var progress, logs []string
	next := func() *remoteagentsv1.InvokeStreamResponse {
		t.Helper()
		if !st.Receive() {
			t.Fatalf("the stream ended early: %v", st.Err())
		}
		m := st.Msg()
		if p := m.GetEvent().GetProgress(); p != nil {
			progress = append(progress, p.GetMessage())
		}
		if l := m.GetEvent().GetLog(); l != nil {
			logs = append(logs, l.GetData().GetStringValue())
		}
		return m
	}
	// Read as they are recorded: one event, then a second read twice.
	record("status:submitted", "submitted", "")
	next()
	record("status:working:m1", "working", "Searching flights.")
	record("status:working:m1", "working", "Searching flights.")
	next()
	next()
	got, err := f.client.GetInvocation(at("planner", 0), &remoteagentsv1.GetInvocationRequest{InvocationId: invID})
	if err != nil || got.GetInvocation().GetProgress() != "Searching flights." {
		t.Errorf("GetInvocation while working = %v, %v; want its latest progress", got, err)
	}
	record("status:working:m2", "working", "Found 3 flights.")
	f.wf.end(id, &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED, Answer: "Booked.",
		TaskId: "task-1", RemoteState: "completed", ResolveTime: timestamppb.Now()})
	var last *remoteagentsv1.InvokeStreamResponse
	for last == nil || last.GetInvocation() == nil {
		last = next()
	}
	if st.Receive() {
		t.Errorf("a message after the outcome: %v", st.Msg())
	}
	if inv := last.GetInvocation(); inv.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || inv.GetAnswer() != "Booked." {
		t.Errorf("the stream's last message %v, want the completed invocation", inv)
	}
	// Reports that the agent is still working may come between (on a
	// loaded machine); the events come once each, in order.
	var steps []string
	for _, p := range progress {
		if p != "The remote agent is still working on it." {
			steps = append(steps, p)
		}
	}
	want := []string{"The remote task is submitted.", "Searching flights.", "Found 3 flights."}
	if len(steps) != len(want) || steps[0] != want[0] || steps[1] != want[1] || steps[2] != want[2] {
		t.Errorf("progress %q, want %q", steps, want)
	}
	if len(logs) != 2 || logs[0] != "Searching flights." || logs[1] != "Found 3 flights." {
		t.Errorf("log messages %q, want what the agent said", logs)
	}
}

// TestInvokeStreamTakesInvokesRequest: InvokeStream's request is Invoke's,
// field for field (the service converts one into the other).
func TestInvokeStreamTakesInvokesRequest(t *testing.T) {
	a := (&remoteagentsv1.InvokeRequest{}).ProtoReflect().Descriptor().Fields()
	b := (&remoteagentsv1.InvokeStreamRequest{}).ProtoReflect().Descriptor().Fields()
	if a.Len() != b.Len() {
		t.Fatalf("InvokeRequest has %d fields, InvokeStreamRequest %d", a.Len(), b.Len())
	}
	for i := range a.Len() {
		fa, fb := a.Get(i), b.Get(i)
		if fa.Name() != fb.Name() || fa.Number() != fb.Number() || fa.Kind() != fb.Kind() || fa.HasPresence() != fb.HasPresence() ||
			!proto.Equal(fa.Options(), fb.Options()) {
			t.Errorf("field %d: InvokeRequest's %s (%d) and InvokeStreamRequest's %s (%d) differ", i, fa.Name(), fa.Number(), fb.Name(), fb.Number())
		}
	}
}
