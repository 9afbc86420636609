package audit_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/audit"
)

// TestRecorderIsWhatTheEdgeCalls drives the service through
// audittrail.Recorder, the client the edge uses after an admin call.
func TestRecorderIsWhatTheEdgeCalls(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		rec := audittrail.NewRecorder(e.c, audittrail.RecorderOptions{})
		args := &tasksv1.CreateRequest{Description: "rotate the keys"}
		entry := audittrail.Entry{CallID: "mcp-0123456789abcdef0123456789abcdef", Actor: "owner", Tool: "tasks_create", Reason: "rotation", Arguments: args}
		r, err := rec.Record(context.Background(), entry)
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
		digest, err := audittrail.ArgumentsDigest(args)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetArgsDigest() != digest || r.GetActor() != "owner" || r.GetTool() != "tasks_create" || r.GetReason() != "rotation" ||
			r.GetCallId() != entry.CallID || r.GetOutcome() != auditv1.Outcome_OUTCOME_SUCCEEDED {
			t.Errorf("recorded %v, want the entry with digest %s", r, digest)
		}
		// The edge retrying the same call does not write a second record.
		again, err := rec.Record(context.Background(), entry)
		if err != nil || !proto.Equal(again, r) {
			t.Errorf("second Record of the same call = %v (err %v), want the first record", again, err)
		}
		if res := verify(t, e, nil); res.GetHead().GetSeq() != 1 || !res.GetIntact() {
			t.Errorf("after recording one call twice the trail is %v, want one intact record", res)
		}
	})
}

// A replay is recorded as such, naming the call that made the change; a
// replay under the call's own id is that call, whose record stands.
func TestRecorderRecordsReplays(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		rec := audittrail.NewRecorder(e.c, audittrail.RecorderOptions{})
		args := &tasksv1.CreateRequest{Description: "rotate the keys"}
		change := audittrail.Entry{CallID: "mcp-first", Actor: "owner", Tool: "tasks_create", Reason: "rotation", Arguments: args}
		first, err := rec.Record(context.Background(), change)
		if err != nil {
			t.Fatal(err)
		}
		replay := change
		replay.CallID, replay.Reason, replay.Replayed, replay.ReplayOf = "mcp-second", "rotation, again", true, "mcp-first"
		r, err := rec.Record(context.Background(), replay)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetOutcome() != auditv1.Outcome_OUTCOME_REPLAYED || r.GetReplayOf() != "mcp-first" || r.GetCallId() != "mcp-second" ||
			r.GetArgsDigest() != first.GetArgsDigest() || r.GetSeq() != 2 {
			t.Errorf("replay recorded as %v, want record 2, replayed, of mcp-first", r)
		}
		same := change
		same.Replayed, same.ReplayOf = true, "mcp-first"
		if again, err := rec.Record(context.Background(), same); err != nil || !proto.Equal(again, first) {
			t.Errorf("a replay under the first call's own id = %v, %v; want its record %v", again, err, first)
		}
		// A replay of a change made without a call id names none.
		anon := change
		anon.CallID, anon.Replayed, anon.ReplayOf = "mcp-third", true, ""
		if r, err := rec.Record(context.Background(), anon); err != nil || r.GetOutcome() != auditv1.Outcome_OUTCOME_REPLAYED || r.GetReplayOf() != "" {
			t.Errorf("a replay of a call without id = %v, %v; want a replay record", r, err)
		}
		if res := verify(t, e, nil); res.GetHead().GetSeq() != 3 || !res.GetIntact() {
			t.Errorf("the trail is %v, want three intact records", res)
		}
		// replay_of belongs to replays only.
		bad := appendReq(9)
		bad.ReplayOf = "mcp-first"
		if _, err := e.c.Append(asEdge(), bad); servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("replay_of on a change: code %v, want invalid_argument", connect.CodeOf(err))
		}
	})
}
