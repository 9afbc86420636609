package invariants_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
)

// TestA2ATasks: an A2A task the store delivered and ended has its whole
// event log and is found under its sender's message id; a task whose log
// lost an event, or one the workload saw acknowledged that is not there,
// is caught.
func TestA2ATasks(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := e.Open(t)
		st := sqldbtest.OpenStore(t, db, remoteagentsstore.Open)
		deliver := func(id, msg string) {
			if _, _, err := st.CreateInbound(t.Context(), &remoteagentsv1.Inbound{TaskId: id, ContextId: "ctx_" + id, AgentId: "local", Sender: "a2a-local",
				A2AMessageId: msg, MessageId: "msg_" + id, ThreadId: "thr_" + id, Text: "hello", Depth: 1,
				Status: remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING, CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now)}); err != nil {
				t.Fatal(err)
			}
		}
		deliver("tsk_a", "m1")
		deliver("tsk_b", "m2")
		if _, _, err := st.EndInbound(t.Context(), "tsk_a", remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED, "done", "msg_answer", now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		acked := []chaoslog.Ack{{Domain: "a2a", ID: "tsk_a", Key: "m1", Agent: "a2a-local", At: now}, {Domain: "a2a", ID: "tsk_b", Key: "m2", Agent: "a2a-local", At: now}}
		in := invariants.Input{DBs: invariants.DBs{RemoteAgents: db}, Acked: acked}
		res, out := check(t, in)
		if !res.Held() {
			t.Fatalf("the store's own A2A tasks do not hold:\n%s", out)
		}

		// The answer event of tsk_a lost: a resubscription would skip it.
		if _, err := db.Exec(t.Context(), `DELETE FROM inbound_events WHERE task_id = 'tsk_a' AND seq = 2`); err != nil {
			t.Fatal(err)
		}
		res, out = check(t, in)
		only(t, res, out, invariants.A2ALogsWhole, "a2a task tsk_a")

		in.Acked = append(acked[1:], chaoslog.Ack{Domain: "a2a", ID: "tsk_lost", Key: "m3", Agent: "a2a-local", At: now},
			chaoslog.Ack{Domain: "a2a", ID: "tsk_b", Key: "m1", Agent: "a2a-local", At: now})
		if _, err := db.Exec(t.Context(), `INSERT INTO inbound_events (task_id, seq, kind, status, at_ms) VALUES ('tsk_a', 2, 2, 2, 0)`); err != nil {
			t.Fatal(err)
		}
		res, out = check(t, in)
		if len(res.Violations) != 2 || res.Violations[0].Key != "a2a tsk_lost key m3" || res.Violations[1].Key != "a2a tsk_b key m1" {
			t.Fatalf("violations = %+v, want the lost task and the task under another message id\n%s", res.Violations, out)
		}
	})
}
