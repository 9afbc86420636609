package eventlog

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// temporalDeliveries starts delivery workflows on Temporal.
type temporalDeliveries struct{ c client.Client }

// NewTemporalDeliveries starts each subscription's delivery workflow
// (workers/eventlog) on c.
func NewTemporalDeliveries(c client.Client) Deliveries { return temporalDeliveries{c: c} }

// DeliveryWorkflowID is the workflow id of a subscription's deliveries.
func DeliveryWorkflowID(subscription string) string {
	return workflowcontract.WorkflowOf(&eventsv1.DeliveryWorkflowInput{}).IDPrefix + "/" + subscription
}

// Start wakes the subscription's workflow, starting it when it is not
// running (also when an earlier one ended: a subscription subscribed again
// after it expired).
func (d temporalDeliveries) Start(ctx context.Context, in *eventsv1.DeliveryWorkflowInput) error {
	c := workflowcontract.WorkflowOf(in)
	return workflowrun.SignalWithStart(ctx, d.c, workflowrun.Start{
		Contract: c, ID: DeliveryWorkflowID(in.GetSubscriptionId()), Agent: in.GetAgentId(), Status: "delivering",
		Summary: c.Summary,
	}, workflowcontract.HandlerOf(&eventsv1.WakeSignal{}).Name, in)
}
