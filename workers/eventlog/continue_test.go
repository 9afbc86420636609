package eventlog_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	eventlogworker "github.com/toolmesh/toolmesh/workers/eventlog"
)

// TestADeliveryContinuesAsAServedType: an idle subscription's delivery
// workflow continues as new, after its polls, as the workflow type the
// worker serves (before, it continued under the Go function's name, which
// no worker served, and the subscription's deliveries stopped for good);
// and a run stuck under that old name is served again.
func TestADeliveryContinuesAsAServedType(t *testing.T) {
	for _, started := range []string{"eventlog.delivery", "DeliveryWorkflow"} {
		t.Run(started, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			eventlogworker.Register(env, &eventlogworker.Activities{})
			env.OnActivity(eventlogworker.ActivityNextDeliveries, mock.Anything, mock.Anything, mock.Anything).
				Return(&eventsv1.NextDeliveriesResponse{Through: "c1"}, nil)
			env.ExecuteWorkflow(started, &eventsv1.DeliveryWorkflowInput{SubscriptionId: "sub_1", Subject: "alice"})
			var cont *workflow.ContinueAsNewError
			if err := env.GetWorkflowError(); !errors.As(err, &cont) {
				t.Fatalf("an idle delivery ended with %v, want continue-as-new", err)
			}
			if cont.WorkflowType.Name != "eventlog.delivery" {
				t.Errorf("continues as %q, want eventlog.delivery (the type its worker serves)", cont.WorkflowType.Name)
			}
		})
	}
}
