package owner_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
)

// TestOrphanedAsksAreWithdrawn: an ask that was stored but whose workflow
// never started (the service died between the two, and its asker, answered
// unavailable, did not retry) is withdrawn — ended as cancelled — once it
// is older than the grace, when the owner answers it and by the sweep; a
// younger one, which may still be starting, and one whose workflow runs
// are left alone.
func TestOrphanedAsksAreWithdrawn(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	e := start(t, owner.Config{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	ask := func(key string) *ownerv1.Ask {
		res, err := e.c.Ask(servertest.WithIdempotencyKey(agentA(), key), &ownerv1.AskRequest{Question: "Go on with " + key + "?", WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetAsk()
	}
	pending := func() int {
		res, err := e.c.ListAsks(theOwner(), &ownerv1.ListAsksRequest{Status: ownerv1.AskStatus_ASK_STATUS_PENDING})
		if err != nil {
			t.Fatal(err)
		}
		return int(res.GetPage().GetTotal())
	}
	answered, swept, running := ask("answered"), ask("swept"), ask("running")
	e.wf.forget(answered.GetWorkflowId())
	e.wf.forget(swept.GetWorkflowId())

	_, err := e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: answered.GetAskId(), Answer: "yes"})
	wantCode(t, "answering a young ask without a workflow", err, connect.CodeFailedPrecondition)
	if n, err := e.svc.Sweep(t.Context()); n != 0 || err != nil || pending() != 3 {
		t.Fatalf("a sweep within the grace withdrew %d (%v), %d pending; want none withdrawn", n, err, pending())
	}

	mu.Lock()
	now = now.Add(workflowrun.OrphanGrace + time.Second)
	mu.Unlock()
	_, err = e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: answered.GetAskId(), Answer: "yes"})
	wantCode(t, "answering an orphan", err, connect.CodeFailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("answering an orphan: %v, want it named cancelled", err)
	}
	if got := pending(); got != 2 {
		t.Errorf("%d asks pending after the orphan was answered, want 2", got)
	}
	if n, err := e.svc.Sweep(t.Context()); n != 1 || err != nil {
		t.Errorf("the sweep withdrew %d (%v), want the one orphan left", n, err)
	}
	res, err := e.c.ListAsks(theOwner(), &ownerv1.ListAsksRequest{Status: ownerv1.AskStatus_ASK_STATUS_PENDING})
	if err != nil || len(res.GetAsks()) != 1 || res.GetAsks()[0].GetAskId() != running.GetAskId() {
		t.Errorf("pending after the sweep: %v (%v), want only the ask whose workflow runs", res.GetAsks(), err)
	}
	got, err := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: swept.GetAskId()})
	if err != nil || got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_CANCELLED {
		t.Errorf("the swept ask reads %v (%v), want cancelled", got.GetAsk(), err)
	}
	if !strings.Contains(e.logs.String(), "owner.ask_withdrawn") {
		t.Error("no owner.ask_withdrawn event was logged")
	}
}
