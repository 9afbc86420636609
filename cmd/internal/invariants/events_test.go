package invariants_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldbtest"
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
