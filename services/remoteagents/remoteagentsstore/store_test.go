package remoteagentsstore_test

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the remoteagents store on SQLite and on PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "invocations", Test: testInvocations},
		{Name: "invocation events", Test: testInvocationEvents},
		{Name: "inbound tasks", Test: testInbound},
		{Name: "inbound event log and list", Test: testInboundLog},
		{Name: "push configs", Test: testPushConfigs},
		{Name: "tasks from before the event log", Test: testMigratedInbound},
	})
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func open(t *testing.T, db *sqldb.DB) *remoteagentsstore.Store {
	return sqldbtest.OpenStore(t, db, remoteagentsstore.Open)
}

func diff(t *testing.T, what string, want, got proto.Message) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}

func testInvocations(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := open(t, db)
	inv := &remoteagentsv1.Invocation{
		InvocationId: "inv_01jd8xw0000000000000000001", AgentId: "planner", Url: "https://agents.example.com/travel/",
		Message: "Book a flight — to Köln, 'please'.", Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING,
		ContextId: "ctx-1", Depth: 2, WorkflowId: "invoke/planner/inv_01jd8xw0000000000000000001",
		CreateTime: timestamppb.New(t0), ExpireTime: timestamppb.New(t0.Add(time.Hour)),
	}
	stored, created, err := s.CreateInvocation(ctx, inv)
	if err != nil || !created {
		t.Fatalf("CreateInvocation = %v, created %v", err, created)
	}
	diff(t, "stored invocation", inv, stored)

	// A retry stores nothing and returns the first.
	again := proto.Clone(inv).(*remoteagentsv1.Invocation)
	again.Message = "something else"
	got, created, err := s.CreateInvocation(ctx, again)
	if err != nil || created {
		t.Fatalf("second CreateInvocation: created %v, %v; want the existing one", created, err)
	}
	diff(t, "invocation after a retried create", inv, got)

	// An extension moves the expiry later, never earlier.
	ext, changed, err := s.ExtendInvocation(ctx, inv.GetInvocationId(), t0.Add(2*time.Hour))
	if err != nil || !changed || !ext.GetExpireTime().AsTime().Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("ExtendInvocation = %v, changed %v, %v; want the expiry 2 h after the start", ext, changed, err)
	}
	if back, changed, err := s.ExtendInvocation(ctx, inv.GetInvocationId(), t0.Add(90*time.Minute)); err != nil || changed ||
		!back.GetExpireTime().AsTime().Equal(t0.Add(2*time.Hour)) {
		t.Errorf("an earlier expiry = %v, changed %v, %v; want nothing changed", back, changed, err)
	}
	inv.ExpireTime = ext.GetExpireTime()

	// The first outcome wins.
	end := &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED, Answer: "Booked.",
		TaskId: "task-9", ContextId: "ctx-1", RemoteState: "completed", ResolveTime: timestamppb.New(t0.Add(time.Minute))}
	resolved, changed, err := s.ResolveInvocation(ctx, inv.GetInvocationId(), end)
	if err != nil || !changed {
		t.Fatalf("ResolveInvocation = %v, changed %v", err, changed)
	}
	want := proto.Clone(inv).(*remoteagentsv1.Invocation)
	want.Status, want.Answer, want.TaskId, want.RemoteState, want.ResolveTime = end.Status, end.Answer, end.TaskId, end.RemoteState, end.ResolveTime
	diff(t, "resolved invocation", want, resolved)
	late := &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED, ResolveTime: timestamppb.New(t0.Add(2 * time.Minute))}
	if got, changed, err := s.ResolveInvocation(ctx, inv.GetInvocationId(), late); err != nil || changed {
		t.Errorf("a second outcome: changed %v, %v; want the first kept", changed, err)
	} else {
		diff(t, "invocation after a second outcome", want, got)
	}
	if err := s.DeleteInvocation(ctx, inv.GetInvocationId()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInvocation(ctx, inv.GetInvocationId()); err != nil {
		t.Errorf("an ended invocation was deleted: %v", err)
	}

	// A working one whose workflow never started is removed.
	fresh := proto.Clone(inv).(*remoteagentsv1.Invocation)
	fresh.InvocationId = "inv_01jd8xw0000000000000000002"
	if _, _, err := s.CreateInvocation(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInvocation(ctx, fresh.GetInvocationId()); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetInvocation(ctx, fresh.GetInvocationId())
	sqldbtest.WantErr(t, "GetInvocation after DeleteInvocation", err, remoteagents.ErrNotFound)
	_, _, err = s.ResolveInvocation(ctx, "inv_missing", end)
	sqldbtest.WantErr(t, "ResolveInvocation of an unknown id", err, remoteagents.ErrNotFound)
	if _, changed, err := s.ExtendInvocation(ctx, inv.GetInvocationId(), t0.Add(5*time.Hour)); err != nil || changed {
		t.Errorf("extending an ended invocation: changed %v, %v; want nothing changed", changed, err)
	}
}

func testInbound(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := open(t, db)
	in := &remoteagentsv1.Inbound{
		TaskId: "tsk_01jd8xw0000000000000000001", ContextId: "ctx_1", AgentId: "bob", Sender: "a2a-alice",
		A2AMessageId: "0195d3a4-msg", MessageId: "msg_01jd8xw0000000000000000001", ThreadId: "thr_01jd8xw0000000000000000001",
		Text: "hello bob", Depth: 2, Status: remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING,
		CreateTime: timestamppb.New(t0), UpdateTime: timestamppb.New(t0),
	}
	stored, created, err := s.CreateInbound(ctx, in)
	if err != nil || !created {
		t.Fatalf("CreateInbound = %v, created %v", err, created)
	}
	in.Version = 1 // its first event: delivered
	diff(t, "stored task", in, stored)

	// The same A2A message from the same sender opens no second task.
	dup := proto.Clone(in).(*remoteagentsv1.Inbound)
	dup.TaskId = "tsk_01jd8xw0000000000000000002"
	got, created, err := s.CreateInbound(ctx, dup)
	if err != nil || created {
		t.Fatalf("redelivery: created %v, %v", created, err)
	}
	diff(t, "task after a redelivery", in, got)
	// The same message id from another sender is another message.
	other := proto.Clone(dup).(*remoteagentsv1.Inbound)
	other.Sender = "a2a-carol"
	if _, created, err := s.CreateInbound(ctx, other); err != nil || !created {
		t.Fatalf("another sender's message: created %v, %v", created, err)
	}
	if got, err := s.InboundByMessage(ctx, "a2a-alice", "0195d3a4-msg"); err != nil || got.GetTaskId() != in.GetTaskId() {
		t.Errorf("InboundByMessage = %v, %v", got, err)
	}
	_, err = s.InboundByMessage(ctx, "a2a-nobody", "0195d3a4-msg")
	sqldbtest.WantErr(t, "InboundByMessage of another sender", err, remoteagents.ErrNotFound)

	at := t0.Add(time.Minute)
	done, changed, err := s.EndInbound(ctx, in.GetTaskId(), remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED, "hi alice", "msg_answer", at)
	if err != nil || !changed {
		t.Fatalf("EndInbound = %v, changed %v", err, changed)
	}
	want := proto.Clone(in).(*remoteagentsv1.Inbound)
	want.Status, want.Answer, want.AnswerMessageId, want.UpdateTime = remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED, "hi alice", "msg_answer", timestamppb.New(at)
	want.Version = 3 // the answer, then the completed status
	diff(t, "completed task", want, done)
	// An ended task stays as it ended.
	if got, changed, err := s.EndInbound(ctx, in.GetTaskId(), remoteagentsv1.InboundStatus_INBOUND_STATUS_CANCELLED, "", "", at.Add(time.Minute)); err != nil || changed {
		t.Errorf("cancel after completion: changed %v, %v", changed, err)
	} else {
		diff(t, "task after a late cancel", want, got)
	}
	_, err = s.GetInbound(ctx, "tsk_missing")
	sqldbtest.WantErr(t, "GetInbound of an unknown task", err, remoteagents.ErrNotFound)
}

// testInvocationEvents: what a remote agent reports while it works is
// recorded once per key, in order; the working invocation shows the
// latest, and one that has ended keeps its outcome.
func testInvocationEvents(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := open(t, db)
	inv := &remoteagentsv1.Invocation{
		InvocationId: "inv_01jd8xw0000000000000000003", AgentId: "planner", Url: "https://agents.example.com/travel/",
		Message: "Book a flight.", Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING, WorkflowId: "invoke/planner/inv_01jd8xw0000000000000000003",
		CreateTime: timestamppb.New(t0), ExpireTime: timestamppb.New(t0.Add(time.Hour)),
	}
	if _, _, err := s.CreateInvocation(ctx, inv); err != nil {
		t.Fatal(err)
	}
	id := inv.GetInvocationId()
	in := func(key, state, text string, at time.Duration) remoteagents.InvocationEventIn {
		return remoteagents.InvocationEventIn{InvocationID: id, Key: key, RemoteState: state, Text: text, TaskID: "task-1", ContextID: "ctx-1", At: t0.Add(at)}
	}
	for i, e := range []remoteagents.InvocationEventIn{
		in("status:submitted", "submitted", "", time.Second),
		in("status:working:m1", "working", "Searching flights — to Köln.", 2*time.Second),
		in("status:working:m2", "working", "Found 3 flights.", 3*time.Second),
	} {
		got, appended, err := s.AppendInvocationEvent(ctx, e)
		if err != nil || !appended || got.GetSeq() != int64(i+1) {
			t.Fatalf("AppendInvocationEvent(%s) = %v, appended %v, %v; want seq %d", e.Key, got, appended, err, i+1)
		}
	}
	// Read again (a stream resumed from an older heartbeat): not recorded
	// twice, and the invocation still shows the latest.
	again, appended, err := s.AppendInvocationEvent(ctx, in("status:working:m1", "working", "Searching flights — to Köln.", 4*time.Second))
	if err != nil || appended || again.GetSeq() != 2 {
		t.Errorf("a second recording of m1 = %v, appended %v, %v; want the first, seq 2", again, appended, err)
	}
	got, err := s.GetInvocation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetProgress() != "Found 3 flights." || got.GetRemoteState() != "working" || got.GetTaskId() != "task-1" || got.GetContextId() != "ctx-1" {
		t.Errorf("the working invocation = %v, want the latest progress on task-1", got)
	}
	evs, err := s.InvocationEvents(ctx, id, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []*remoteagentsv1.InvocationEvent{
		{InvocationId: id, Seq: 2, RemoteState: "working", Text: "Searching flights — to Köln.", Time: timestamppb.New(t0.Add(2 * time.Second))},
		{InvocationId: id, Seq: 3, RemoteState: "working", Text: "Found 3 flights.", Time: timestamppb.New(t0.Add(3 * time.Second))},
	}
	if d := cmp.Diff(want, evs, protocmp.Transform()); d != "" {
		t.Errorf("events after seq 1 (-want +got):\n%s", d)
	}

	// Once it has ended, an event is still recorded, and the outcome kept.
	end := &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED, Answer: "Booked.",
		TaskId: "task-1", RemoteState: "completed", ResolveTime: timestamppb.New(t0.Add(time.Minute))}
	if _, _, err := s.ResolveInvocation(ctx, id, end); err != nil {
		t.Fatal(err)
	}
	if _, appended, err := s.AppendInvocationEvent(ctx, in("status:working:m3", "working", "late", 2*time.Minute)); err != nil || !appended {
		t.Errorf("an event after the end: appended %v, %v", appended, err)
	}
	if got, err := s.GetInvocation(ctx, id); err != nil || got.GetRemoteState() != "completed" || got.GetProgress() != "Found 3 flights." {
		t.Errorf("the ended invocation = %v, %v; want its outcome kept", got, err)
	}
	_, _, err = s.AppendInvocationEvent(ctx, remoteagents.InvocationEventIn{InvocationID: "inv_missing", Key: "k", At: t0})
	sqldbtest.WantErr(t, "AppendInvocationEvent of an unknown invocation", err, remoteagents.ErrNotFound)
}
