package owner_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
)

func TestOnlyTheAskingAgentExtendsItsAsk(t *testing.T) {
	eachProtocol(t, owner.Config{}, func(t *testing.T, e *env) {
		res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "Ship it?", WaitSeconds: waitNone(), TimeoutSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		a := res.GetAsk()
		ctx := servertest.WithIdempotencyKey(agentA(), "extend-1")
		ext, err := e.c.ExtendAsk(ctx, &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 7200, Reason: "the owner is travelling"})
		if err != nil {
			t.Fatal(err)
		}
		want := a.GetExpireTime().AsTime().Add(2 * time.Hour)
		if got := ext.GetAsk().GetExpireTime().AsTime(); !got.Equal(want) {
			t.Errorf("expire time after extending by 2h = %s, want %s", got, want)
		}
		e.wf.mu.Lock()
		u := e.wf.extends[0]
		e.wf.mu.Unlock()
		if u.GetRequestedBy() != "agent-a" || u.GetReason() != "the owner is travelling" || u.GetCallId() == "" || u.GetRequest().GetExtendSeconds() != 7200 {
			t.Errorf("extend update = %v, want the caller, the reason, a call id and the request for the audit record", u)
		}
		// A retry with the same key is the same extension.
		again, err := e.c.ExtendAsk(ctx, &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 7200, Reason: "the owner is travelling"})
		if err != nil || !again.GetAsk().GetExpireTime().AsTime().Equal(want) {
			t.Errorf("retried extension = %v, %v; want the expire time of the first", again, err)
		}

		// Another agent, and the owner, may not extend it.
		_, err = e.c.ExtendAsk(agentB(), &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 60, Reason: "mine now"})
		wantCode(t, "another agent extending", err, connect.CodePermissionDenied)
		if err != nil && !strings.Contains(err.Error(), "only the agent that asked") {
			t.Errorf("refusal %q does not say who may extend", err)
		}
		_, err = e.c.ExtendAsk(theOwner(), &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 60, Reason: "owner"})
		wantCode(t, "the owner extending an agent's ask", err, connect.CodePermissionDenied)

		// Past the longest life of an ask: refused, naming the limit.
		_, err = e.c.ExtendAsk(agentA(), &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 7 * 24 * 3600, Reason: "a week more"})
		wantCode(t, "extending past 7 days", err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "at most 7 days") {
			t.Errorf("refusal %q does not name the limit", err)
		}

		// An ask that ended cannot be extended.
		if _, err := e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: a.GetAskId(), Answer: "yes"}); err != nil {
			t.Fatal(err)
		}
		_, err = e.c.ExtendAsk(agentA(), &ownerv1.ExtendAskRequest{AskId: a.GetAskId(), ExtendSeconds: 60, Reason: "late"})
		wantCode(t, "extending an answered ask", err, connect.CodeFailedPrecondition)
	})
}
