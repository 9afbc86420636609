package owner_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	owner "github.com/toolmesh/toolmesh/workers/owner"
)

// fakeOwner is an OwnerService that remembers who called it with what.
type fakeOwner struct {
	ownerv1connect.UnimplementedOwnerServiceHandler
	mu        sync.Mutex
	notifies  []*ownerv1.NotifyRequest
	records   []*ownerv1.RecordAskOutcomeRequest
	callers   []mesh.Caller
	notifyErr error
}

func (f *fakeOwner) Notify(ctx context.Context, req *ownerv1.NotifyRequest) (*ownerv1.NotifyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notifies = append(f.notifies, req)
	f.callers = append(f.callers, mesh.FromContext(ctx).Caller)
	return &ownerv1.NotifyResponse{}, f.notifyErr
}

func (f *fakeOwner) RecordAskOutcome(ctx context.Context, req *ownerv1.RecordAskOutcomeRequest) (*ownerv1.RecordAskOutcomeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, req)
	f.callers = append(f.callers, mesh.FromContext(ctx).Caller)
	return &ownerv1.RecordAskOutcomeResponse{}, nil
}

func startFakeOwner(t *testing.T) (*fakeOwner, *owner.Activities) {
	t.Helper()
	f := &fakeOwner{}
	srv := servertest.Start(t, server.Register(ownerv1connect.OwnerServiceName, ownerv1connect.OwnerServiceHandler(f), ownerv1connect.NewOwnerServiceHandler, nil))
	self := mesh.Caller{Subject: "toolmesh-worker-owner", Agent: "toolmesh-worker-owner", Roles: []string{mesh.RoleService}}
	return f, &owner.Activities{
		Owner: ownerv1connect.NewOwnerServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...),
		Self:  self,
	}
}

func TestNotifyOwnerActsForTheAskingAgent(t *testing.T) {
	f, acts := startFakeOwner(t)
	in := askInput("ship", "hold")
	in.Depth = 2
	if err := acts.NotifyOwner(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if len(f.notifies) != 1 {
		t.Fatalf("%d notifications, want 1", len(f.notifies))
	}
	n := f.notifies[0]
	for _, want := range []string{"Deploy to production?", "ship | hold", "all checks are green", in.GetAskId(), "ask/agent-a/" + in.GetAskId()} {
		if !strings.Contains(n.GetMessage(), want) {
			t.Errorf("notification %q lacks %q", n.GetMessage(), want)
		}
	}
	if n.GetLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING || n.GetTitle() != "Question from agent-a" {
		t.Errorf("notification = %v", n)
	}
	if c := f.callers[0]; c.Agent != "agent-a" || c.Subject != "agent-a" || c.Depth != 3 || c.HasRole(mesh.RoleService) {
		t.Errorf("Notify called as %+v, want agent-a one level deeper, without the service role", c)
	}

	// A refusal no retry can fix is not retried.
	f.notifyErr = mesh.NewCapabilityGapError("owner.notification_channel", errors.New("no channel"))
	err := acts.NotifyOwner(context.Background(), in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		t.Errorf("NotifyOwner with no channel = %v, want a non-retryable error", err)
	}
	f.notifyErr = connect.NewError(connect.CodeUnavailable, errors.New("busy"))
	if err := acts.NotifyOwner(context.Background(), in); err == nil || errors.As(err, &app) && app.NonRetryable() {
		t.Errorf("NotifyOwner while the service is unavailable = %v, want a retryable error", err)
	}
}

func TestRecordOutcomeActsAsTheWorker(t *testing.T) {
	f, acts := startFakeOwner(t)
	req := &ownerv1.RecordAskOutcomeRequest{AskId: "ask_01jd8xw0000000000000000000", Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, ResolveTime: timestamppb.Now()}
	if err := acts.RecordOutcome(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(f.records) != 1 || f.records[0].GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED {
		t.Errorf("records = %v", f.records)
	}
	if c := f.callers[0]; c.Agent != "toolmesh-worker-owner" || !c.HasRole(mesh.RoleService) {
		t.Errorf("RecordAskOutcome called as %+v, want the worker with the service role", c)
	}
}
