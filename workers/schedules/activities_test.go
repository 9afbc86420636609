package schedules_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/workers/schedules"
)

// fakeOwner stands in for OwnerService: it remembers who notified what.
type fakeOwner struct {
	ownerv1connect.UnimplementedOwnerServiceHandler

	mu      sync.Mutex
	callers []mesh.Caller
	reqs    []*ownerv1.NotifyRequest
	err     error
}

func (f *fakeOwner) Notify(ctx context.Context, req *ownerv1.NotifyRequest) (*ownerv1.NotifyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.callers = append(f.callers, mesh.FromContext(ctx).Caller)
	f.reqs = append(f.reqs, req)
	return &ownerv1.NotifyResponse{}, f.err
}

func TestApprovalRequestReachesTheOwnerFromTheAgent(t *testing.T) {
	owner := &fakeOwner{}
	acts := &schedules.Activities{Notifier: schedules.OwnerNotifier{Owner: owner}}
	in := approvalInput()
	in.Depth = 2
	if err := acts.NotifyOwner(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if len(owner.reqs) != 1 {
		t.Fatalf("%d notifications, want 1", len(owner.reqs))
	}
	want := mesh.Caller{Subject: "schedule/" + scheduleID, Agent: "agent-a", Depth: 3}
	if c := owner.callers[0]; c.Subject != want.Subject || c.Agent != want.Agent || c.Depth != want.Depth || len(c.Roles) != 0 {
		t.Errorf("notified as %+v, want %+v: the agent that asks, one level deeper, without roles", c, want)
	}
	req := owner.reqs[0]
	if req.GetLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING || !strings.Contains(req.GetTitle(), scheduleID) {
		t.Errorf("notification %v, want a warning naming the schedule", req)
	}
	for _, s := range []string{"testing_echo", "every 1 hour", `{"message":"hello"}`, "schedules_approve", approvalID()} {
		if !strings.Contains(req.GetMessage(), s) {
			t.Errorf("message %q does not say %q", req.GetMessage(), s)
		}
	}
}

func TestNotifyErrors(t *testing.T) {
	for _, tc := range []struct {
		err       error
		retryable bool
	}{
		{connect.NewError(connect.CodeFailedPrecondition, errors.New("no notification channel is enabled")), false},
		{connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), true},
	} {
		err := schedules.OwnerNotifier{Owner: &fakeOwner{err: tc.err}}.Notify(context.Background(), schedules.ApprovalNotice(approvalInput()))
		var ae *temporal.ApplicationError
		nonRetryable := errors.As(err, &ae) && ae.NonRetryable()
		if err == nil || nonRetryable == tc.retryable {
			t.Errorf("Notify failing with %v = %v; want retryable %v", connect.CodeOf(tc.err), err, tc.retryable)
		}
		// A retried failure's message may reach a run's result: the
		// client's own error text (a refused dial) stays out of it.
		if tc.retryable && (ae == nil || ae.Message() != rpcerror.MessageUnreachable) {
			t.Errorf("retryable failure %v, want the message %q", err, rpcerror.MessageUnreachable)
		}
	}
}
