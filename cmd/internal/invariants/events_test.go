package invariants_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
)

// TestEventsRecorded: the events of changes wait in the outbox or are in
// the event log; a change whose event left the outbox without reaching
// the log is caught and named by the event.
func TestEventsRecorded(t *testing.T) {
	ownerDB := sqldbtest.Open(t, t.TempDir()+"/owner.db")
	st := sqldbtest.OpenStore(t, ownerDB, ownerstore.Open)
	logDB := sqldbtest.Open(t, t.TempDir()+"/eventlog.db")
	sqldbtest.OpenStore(t, logDB, eventlogstore.Open)
	id := ids.NewAt("ask", now)
	if _, _, err := st.CreateAsk(t.Context(), &ownerv1.Ask{AskId: id, AgentId: "a", Question: "go?", Status: ownerv1.AskStatus_ASK_STATUS_PENDING,
		CreateTime: timestamppb.New(now), ExpireTime: timestamppb.New(now.Add(time.Hour)), WorkflowId: "wf-" + id}, "d"+id); err != nil {
		t.Fatal(err)
	}
	in := invariants.Input{DBs: invariants.DBs{Owner: ownerDB, EventLog: logDB}}
	res, out := check(t, in)
	if !res.Held() {
		t.Fatalf("an event waiting in the outbox was reported:\n%s", out)
	}
	// The outbox lost it: the relay acknowledged what the log never got.
	created := outbox.ID(owner.EventAskCreated, id)
	if _, err := outbox.Ack(t.Context(), ownerDB, []string{created}); err != nil {
		t.Fatal(err)
	}
	res, out = check(t, in)
	if len(res.Violations) != 1 || res.Violations[0].Invariant != invariants.EventsRecorded || res.Violations[0].Key != created {
		t.Fatalf("violations = %+v, want the lost ask.created\n%s", res.Violations, out)
	}
	// Without the event log, the check is skipped.
	if res, _ := check(t, invariants.Input{DBs: invariants.DBs{Owner: ownerDB}}); !res.Held() {
		t.Errorf("without the event log: %+v", res.Violations)
	}
}

// TestWebhooksOwed: subscriptions whose cursors lie within the log and
// whose acknowledged deliveries are their own later events hold; a cursor
// past the log's end, a delivery of another type's event, or one of no
// subscription is caught.
func TestWebhooksOwed(t *testing.T) {
	logDB := sqldbtest.Open(t, t.TempDir()+"/eventlog.db")
	sqldbtest.OpenStore(t, logDB, eventlogstore.Open)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := logDB.Exec(t.Context(), q, args...); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"ask.created", "ask.answered", "ask.created"} {
		exec(`INSERT INTO events (event_id, name, agent_id, payload, data, time_ms, record_ms) VALUES (?, ?, 'a', ?, '{}', 1, 1)`,
			fmt.Sprintf("ev-%d", i), name, []byte{})
	}
	subscribe := func(id, name string, cursor int64) {
		exec(`INSERT INTO subscriptions (id, principal, subject, agent_id, roles, grants, name, arguments, url, secret, prev_until_ms, cursor,
			start_truncated, expire_ms, create_ms, update_ms, ended_ms, end_reason, last_delivery_ms, last_error, failed_since_ms)
			VALUES (?, 'p', 's', 'a', '', '', ?, '{}', 'https://hooks.example/h', ?, 0, ?, false, 0, 1, 1, 0, '', 0, '', 0)`, id, name, []byte{1}, cursor)
	}
	subscribe("sub-1", "ask.created", 1)
	exec(`INSERT INTO subscription_deliveries (subscription_id, seq) VALUES ('sub-1', 3), ('sub-1', 1)`)
	in := invariants.Input{DBs: invariants.DBs{EventLog: logDB}}
	if res, out := check(t, in); !res.Held() {
		t.Fatalf("consistent subscriptions were reported:\n%s", out)
	}
	subscribe("sub-2", "ask.answered", 9)
	exec(`INSERT INTO subscription_deliveries (subscription_id, seq) VALUES ('sub-1', 2), ('sub-9', 3)`)
	res, out := check(t, in)
	var keys []string
	for _, v := range res.Violations {
		if v.Invariant == invariants.WebhooksOwed {
			keys = append(keys, v.Key)
		}
	}
	if len(keys) != 3 || !strings.Contains(out, "past the event log's last event 3") || !strings.Contains(out, "is a ask.answered") ||
		!strings.Contains(out, "which does not exist") {
		t.Errorf("violations %v, want the cursor past the end, another type's event and an unknown subscription:\n%s", keys, out)
	}
}
