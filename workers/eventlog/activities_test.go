package eventlog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	eventlogworker "github.com/toolmesh/toolmesh/workers/eventlog"
)

// fakeLog stands in for the event log: NextDeliveries answers next (or
// refuses with refuse), EndSubscription records its reasons.
type fakeLog struct {
	eventsv1connect.EventsServiceClient
	mu     sync.Mutex
	refuse error
	reads  int
	acked  []string
	ended  []string
	caller []mesh.Caller
}

func (f *fakeLog) NextDeliveries(ctx context.Context, req *eventsv1.NextDeliveriesRequest) (*eventsv1.NextDeliveriesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	f.acked = append(f.acked, req.GetAcked())
	f.caller = append(f.caller, mesh.FromContext(ctx).Caller)
	if f.refuse != nil {
		return nil, f.refuse
	}
	return &eventsv1.NextDeliveriesResponse{From: "c0", Through: "c1"}, nil
}

func (f *fakeLog) EndSubscription(ctx context.Context, req *eventsv1.EndSubscriptionRequest) (*eventsv1.EndSubscriptionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = append(f.ended, req.GetReason())
	f.caller = append(f.caller, mesh.FromContext(ctx).Caller)
	return &eventsv1.EndSubscriptionResponse{}, nil
}

var input = &eventsv1.DeliveryWorkflowInput{SubscriptionId: "sub_" + strings.Repeat("a", 32), Subject: "alice", AgentId: "alice", Grants: []string{"toolmesh:read"}}

// TestRetiredSubscriberEndsItsSubscription: when the event log (its agent
// check) refuses the calls made as the subscriber — a retired or paused
// agent — the workflow ends the subscription as the worker itself, and
// ends.
func TestRetiredSubscriberEndsItsSubscription(t *testing.T) {
	f := &fakeLog{refuse: connect.NewError(connect.CodePermissionDenied, errors.New("agent alice is retired"))}
	self := mesh.Caller{Subject: "toolmesh-worker-eventlog", Agent: "toolmesh-worker-eventlog", Roles: []string{mesh.RoleService}}
	env := workflowtest.NewEnv()
	eventlogworker.Register(env, &eventlogworker.Activities{Events: f, Self: self})
	env.ExecuteWorkflow(eventlogworker.DeliveryWorkflow, input)
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %v, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if len(f.ended) != 1 || !strings.Contains(f.ended[0], "agent alice is retired") {
		t.Fatalf("ended with %q", f.ended)
	}
	if f.caller[0].Agent != "alice" || f.caller[len(f.caller)-1].Agent != self.Agent {
		t.Errorf("callers %v: want the subscriber's reads, the worker's end", f.caller)
	}
}

// TestQuietDeliveriesContinueAsNew: a subscription with nothing to deliver
// keeps reading the log, and continues as new after a bounded number of
// rounds, carrying its position.
func TestQuietDeliveriesContinueAsNew(t *testing.T) {
	f := &fakeLog{}
	env := workflowtest.NewEnv()
	eventlogworker.Register(env, &eventlogworker.Activities{Events: f})
	env.ExecuteWorkflow(eventlogworker.DeliveryWorkflow, input)
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	if f.reads < 100 || f.acked[0] != "" || f.acked[len(f.acked)-1] != "c1" {
		t.Errorf("%d reads, acked %q … %q", f.reads, f.acked[0], f.acked[len(f.acked)-1])
	}
}
