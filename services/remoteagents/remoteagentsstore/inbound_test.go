package remoteagentsstore_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"testing"
	"testing/fstest"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
)

const (
	working   = remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING
	completed = remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED
	cancelled = remoteagentsv1.InboundStatus_INBOUND_STATUS_CANCELLED
)

func inboundTask(n int, sender, agent string, at time.Time) *remoteagentsv1.Inbound {
	return &remoteagentsv1.Inbound{
		TaskId: fmt.Sprintf("tsk_%026d", n), ContextId: fmt.Sprintf("ctx_%d", n%2), AgentId: agent, Sender: sender,
		A2AMessageId: fmt.Sprintf("m-%d", n), MessageId: fmt.Sprintf("msg_%026d", n), ThreadId: fmt.Sprintf("thr_%026d", n),
		Text: "hello", Depth: 1, Status: working, CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at),
	}
}

// events is a task's log as (kind status text) lines.
func events(t *testing.T, s *remoteagentsstore.Store, taskID string, after int64) []string {
	t.Helper()
	evs, err := s.InboundEvents(t.Context(), taskID, after, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.GetSeq() != after+int64(i)+1 || e.GetTaskId() != taskID {
			t.Errorf("event %d is %+v, want seq %d of %s", i, e, after+int64(i)+1, taskID)
		}
		out = append(out, fmt.Sprintf("%s %s %q", e.GetKind(), e.GetStatus(), e.GetText()))
	}
	return out
}

func testInboundLog(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := open(t, db)
	for i := range 5 {
		if _, _, err := s.CreateInbound(ctx, inboundTask(i, "a2a-alice", "bob", t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	// Someone else's task, and a task to another agent: never listed.
	for _, in := range []*remoteagentsv1.Inbound{inboundTask(10, "a2a-carol", "bob", t0), inboundTask(11, "a2a-alice", "dave", t0)} {
		if _, _, err := s.CreateInbound(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	id := inboundTask(1, "", "", t0).GetTaskId()
	if got := events(t, s, id, 0); fmt.Sprint(got) != `[INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_WORKING ""]` {
		t.Errorf("log of a delivered task = %v, want its delivery", got)
	}
	if _, _, err := s.EndInbound(ctx, id, completed, "the answer", "msg_a", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EndInbound(ctx, inboundTask(3, "", "", t0).GetTaskId(), cancelled, "", "", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := `[INBOUND_EVENT_KIND_ANSWER INBOUND_STATUS_COMPLETED "the answer" INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_COMPLETED "the answer"]`
	if got := events(t, s, id, 1); fmt.Sprint(got) != want {
		t.Errorf("log after the answer, from seq 1 on = %v, want %s", got, want)
	}
	if got := events(t, s, id, 3); len(got) != 0 {
		t.Errorf("log after its last event = %v, want none", got)
	}

	list := func(f remoteagents.InboundFilter) ([]string, int) {
		t.Helper()
		page, total, err := s.ListInbound(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range page {
			ids = append(ids, in.GetTaskId()[len(in.GetTaskId())-1:])
		}
		return ids, total
	}
	// The most recently changed first: 3 (cancelled), 1 (answered), then
	// by delivery, newest first; two at a time.
	f := remoteagents.InboundFilter{Sender: "a2a-alice", AgentID: "bob", Limit: 2}
	var all []string
	for {
		ids, total := list(f)
		if total != 5 {
			t.Errorf("total = %d, want 5", total)
		}
		all = append(all, ids...)
		if len(ids) < f.Limit {
			break
		}
		last, err := s.GetInbound(ctx, fmt.Sprintf("tsk_%026s", ids[len(ids)-1]))
		if err != nil {
			t.Fatal(err)
		}
		f.After = &remoteagents.InboundCursor{UpdateMillis: last.GetUpdateTime().AsTime().UnixMilli(), TaskID: last.GetTaskId()}
	}
	if fmt.Sprint(all) != "[3 1 4 2 0]" {
		t.Errorf("pages = %v, want [3 1 4 2 0]", all)
	}
	for name, tc := range map[string]struct {
		f    remoteagents.InboundFilter
		want string
	}{
		"working":             {remoteagents.InboundFilter{Status: working}, "[4 2 0]"},
		"of context 0":        {remoteagents.InboundFilter{ContextID: "ctx_0"}, "[4 2 0]"},
		"changed after 2s":    {remoteagents.InboundFilter{UpdatedAfter: t0.Add(2 * time.Second)}, "[3 1 4 2]"},
		"completed, context1": {remoteagents.InboundFilter{Status: completed, ContextID: "ctx_1"}, "[1]"},
	} {
		tc.f.Sender, tc.f.AgentID, tc.f.Limit = "a2a-alice", "bob", 10
		if ids, total := list(tc.f); fmt.Sprint(ids) != tc.want || total != len(ids) {
			t.Errorf("%s: %v (total %d), want %s", name, ids, total, tc.want)
		}
	}
}

func testPushConfigs(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := open(t, db)
	in := inboundTask(1, "a2a-alice", "bob", t0)
	if _, _, err := s.CreateInbound(ctx, in); err != nil {
		t.Fatal(err)
	}
	c := &inboundv1.PushConfig{TaskId: in.GetTaskId(), ConfigId: "hook", Url: "https://hooks.example.com/a2a", Token: "tok",
		AuthScheme: "Bearer", AuthCredentials: "secret", CreateTime: timestamppb.New(t0)}
	got, err := s.SavePushConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	c.DeliveredSeq = 1 // the task's version as it was saved: later events only
	diff(t, "saved config", c, got)

	if err := s.RecordPushDelivered(ctx, in.GetTaskId(), "hook", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPushDelivered(ctx, in.GetTaskId(), "hook", 2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PushConfig(ctx, in.GetTaskId(), "hook"); err != nil || got.GetDeliveredSeq() != 3 {
		t.Errorf("delivered_seq after 3 then 2 = %v (%v), want 3: it never goes back", got.GetDeliveredSeq(), err)
	}
	// Saving again replaces the config, and starts after the task's version.
	c2 := &inboundv1.PushConfig{TaskId: in.GetTaskId(), ConfigId: "hook", Url: "https://hooks.example.com/other", CreateTime: timestamppb.New(t0.Add(time.Second))}
	if got, err := s.SavePushConfig(ctx, c2); err != nil || got.GetUrl() != c2.GetUrl() || got.GetToken() != "" || got.GetDeliveredSeq() != 1 {
		t.Errorf("replaced config = %+v, %v", got, err)
	}
	second := &inboundv1.PushConfig{TaskId: in.GetTaskId(), ConfigId: "second", Url: "https://hooks.example.com/2", CreateTime: timestamppb.New(t0.Add(2 * time.Second))}
	if _, err := s.SavePushConfig(ctx, second); err != nil {
		t.Fatal(err)
	}
	cs, err := s.PushConfigs(ctx, in.GetTaskId())
	if err != nil || len(cs) != 2 || cs[0].GetConfigId() != "hook" || cs[1].GetConfigId() != "second" {
		t.Errorf("PushConfigs = %v, %v; want hook, second", cs, err)
	}
	if err := s.DeletePushConfig(ctx, in.GetTaskId(), "hook"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePushConfig(ctx, in.GetTaskId(), "hook"); err != nil {
		t.Errorf("deleting a deleted config: %v, want nothing changed", err)
	}
	_, err = s.PushConfig(ctx, in.GetTaskId(), "hook")
	sqldbtest.WantErr(t, "PushConfig after delete", err, remoteagents.ErrNotFound)
	// A config of a task that does not exist is not stored.
	if _, err := s.SavePushConfig(ctx, &inboundv1.PushConfig{TaskId: "tsk_missing", ConfigId: "x", Url: "https://x.example", CreateTime: timestamppb.New(t0)}); err == nil {
		t.Error("SavePushConfig of an unknown task: no error")
	}
}

// testMigratedInbound: tasks stored before the event log get the log
// their history implies, so streams and pushes of them lose nothing.
func testMigratedInbound(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	dialect := string(db.Dialect)
	first, err := os.ReadFile(path.Join("migrations", dialect, "0001_remoteagents.sql"))
	if err != nil {
		t.Fatal(err)
	}
	old := fstest.MapFS{path.Join("migrations", dialect, "0001_remoteagents.sql"): {Data: first}}
	if err := db.MigrateStore(ctx, "remoteagents", fs.FS(old)); err != nil {
		t.Fatal(err)
	}
	for i, st := range []remoteagentsv1.InboundStatus{working, completed, cancelled} {
		if _, err := db.Exec(ctx, `INSERT INTO inbound (task_id, context_id, agent_id, sender, a2a_message_id, message_id, thread_id, body, depth, status,
			answer, answer_message_id, create_ms, update_ms) VALUES (?, 'ctx', 'bob', 'a2a-alice', ?, 'msg', 'thr', 'hi', 1, ?, ?, ?, ?, ?)`,
			fmt.Sprintf("tsk_old%d", i), fmt.Sprintf("m%d", i), int32(st), map[bool]string{true: "the answer"}[st == completed],
			map[bool]string{true: "msg_a"}[st == completed], t0.UnixMilli(), t0.Add(time.Minute).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, db)
	for i, want := range []struct {
		version int64
		log     string
	}{
		{1, `[INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_WORKING ""]`},
		{3, `[INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_WORKING "" INBOUND_EVENT_KIND_ANSWER INBOUND_STATUS_COMPLETED "the answer" INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_COMPLETED "the answer"]`},
		{2, `[INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_WORKING "" INBOUND_EVENT_KIND_STATUS INBOUND_STATUS_CANCELLED ""]`},
	} {
		id := fmt.Sprintf("tsk_old%d", i)
		in, err := s.GetInbound(ctx, id)
		if err != nil || in.GetVersion() != want.version {
			t.Errorf("%s: version %d (%v), want %d", id, in.GetVersion(), err, want.version)
		}
		if got := fmt.Sprint(events(t, s, id, 0)); got != want.log {
			t.Errorf("%s: log %s, want %s", id, got, want.log)
		}
	}
}
