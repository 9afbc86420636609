package schedules_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/temporal"

	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// changedHash is the spec hash of a schedule after a change
// (schedules_update): the approval asked for before it was about specHash.
const changedHash = "9f1c0e5d2b7a48c6a1e3d5f7b9c2e4a6"

// changeInput is the approval request of the first change of the schedule
// of approvalInput.
func changeInput() *schedulesv1.ApprovalInput {
	in := approvalInput()
	in.Revision, in.SpecHash = 1, changedHash
	return in
}

// TestApprovalOfAChange: the owner is told that the schedule changed and
// runs nothing until the change is approved, and only an approval of the
// changed spec is carried out.
func TestApprovalOfAChange(t *testing.T) {
	e := newEnv(t)
	stale := e.updateAfter(time.Hour, "approve", &schedulesv1.ApproveUpdate{DecidedBy: "owner-1", SpecHash: specHash})
	approve := e.updateAfter(2*time.Hour, "approve", &schedulesv1.ApproveUpdate{DecidedBy: "owner-1", SpecHash: changedHash})
	res, err := e.runApproval(t, changeInput())
	if err != nil {
		t.Fatal(err)
	}
	if stale.rejected == nil || !strings.Contains(stale.rejected.Error(), "spec hash "+changedHash+", not "+specHash) {
		t.Errorf("approve of the spec before the change: rejected %v, want the validator's refusal", stale.rejected)
	}
	if approve.err != nil || res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_APPROVED {
		t.Fatalf("approve of the change: %v, outcome %v", approve.err, res.GetOutcome())
	}
	if len(e.schedules.decisions) != 1 || e.schedules.decisions[0].GetSpecHash() != changedHash {
		t.Errorf("decisions applied = %v, want one, about %s", e.schedules.decisions, changedHash)
	}
	if len(e.notifier.notices) != 1 {
		t.Fatalf("%d notices, want 1", len(e.notifier.notices))
	}
	n := e.notifier.notices[0]
	if n.GetTitle() != "Change 1 of schedule "+scheduleID+" needs your approval" ||
		!strings.Contains(n.GetMessage(), "runs nothing until you approve the change") ||
		!strings.Contains(n.GetMessage(), "schedule-approval/"+scheduleID+"/"+changedHash) {
		t.Errorf("notice %v, want the change named, with the workflow of the changed spec", n)
	}
}

// TestApprovalOvertakenByAChange: the owner approves the request about the
// spec before a change; the service refuses it (the schedule's request is
// about another hash now), so the old request keeps waiting, approving
// nothing, until the change withdraws it.
func TestApprovalOvertakenByAChange(t *testing.T) {
	e := newEnv(t)
	e.schedules.decide = func(req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(
			"this decision is about spec hash "+req.GetSpecHash()+", but schedule "+scheduleID+"'s approval request is about "+changedHash))
	}
	approve := e.updateAfter(time.Hour, "approve", &schedulesv1.ApproveUpdate{DecidedBy: "owner-1"})
	var afterRefusal *schedulesv1.ApprovalState
	e.RegisterDelayedCallback(func() { afterRefusal = e.state(t) }, 90*time.Minute)
	e.RegisterDelayedCallback(e.CancelWorkflow, 2*time.Hour) // the change withdraws it
	_, err := e.runApproval(t, approvalInput())
	if !temporal.IsCanceledError(err) {
		t.Fatalf("the overtaken request ended with %v, want withdrawn (canceled)", err)
	}
	var ae *temporal.ApplicationError
	if !errors.As(approve.err, &ae) || !ae.NonRetryable() || !strings.Contains(ae.Message(), "approval request is about "+changedHash) {
		t.Errorf("approve of the overtaken request: %v, want a non-retryable refusal naming the new hash", approve.err)
	}
	if afterRefusal.GetStatus() != "waiting" || !strings.Contains(afterRefusal.GetLastRefusal(), changedHash) {
		t.Errorf("state after the refusal = %v, want waiting with the refusal", afterRefusal)
	}
	// One attempt, refused, not retried: nothing was approved.
	if diff := cmp.Diff([]schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_APPROVE}, e.schedules.kinds()); diff != "" {
		t.Errorf("decisions applied (-want +got):\n%s", diff)
	}
}
