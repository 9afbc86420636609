// Package eventlog is the worker of the "eventlog" task queue: the
// delivery workflow of each webhook subscription (MCP events,
// docs/events.md) and its activities. The workflow's names come from the
// toolmesh.events.v1 contract messages, which the event log reads too.
//
// A delivery workflow asks the event log for the events after the
// subscription's position (NextDeliveries), delivers each (Deliver: the
// event log signs and POSTs it, so no secret is in a workflow input, an
// activity argument or a history), and acknowledges the batch with its
// next NextDeliveries. The deliveries of one batch run side by side, each
// retried with backoff on its own, so one receiver refusing one event does
// not hold the others back; a delivery that still fails after its attempts
// is abandoned and the subscription goes on. When the log has nothing
// more, the workflow waits for the wake signal (a subscribe or refresh) or
// its poll interval. It ends when the subscription does (unsubscribed,
// expired, 410 Gone, the subscriber no longer allowed to see the events),
// and continues as new to keep its history short.
package eventlog

import (
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md).
const (
	ActivityNextDeliveries  = "NextDeliveries"
	ActivityDeliver         = "Deliver"
	ActivityEndSubscription = "EndSubscription"
)

// PollInterval is how long an idle delivery workflow waits before it
// reads the log again (a wake signal cuts it short).
const PollInterval = 2 * time.Second

// loopsPerRun bounds a run's iterations before it continues as new.
const loopsPerRun = 200

// DeliveryRetry is the retry policy of one delivery: about ten minutes of
// attempts with exponential backoff (5s, 10s, … up to 5 minutes apart),
// or sooner when the receiver's Retry-After says so.
var DeliveryRetry = &temporal.RetryPolicy{
	InitialInterval:        5 * time.Second,
	BackoffCoefficient:     2,
	MaximumInterval:        5 * time.Minute,
	MaximumAttempts:        8,
	NonRetryableErrorTypes: []string{errRefused},
}

func deliveryContract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&eventsv1.DeliveryWorkflowInput{})
}

func wakeSignal() workflowcontract.Handler { return workflowcontract.HandlerOf(&eventsv1.WakeSignal{}) }

// TaskQueue is the queue this worker polls ("eventlog").
func TaskQueue() string { return deliveryContract().TaskQueue }

// Register adds the delivery workflow and its activities to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterWorkflows adds the delivery workflow, under its contract name,
// to r (a worker or a replayer).
//
// It is also registered as legacyDeliveryType: earlier releases continued
// each delivery workflow as new under the Go function's name instead of
// the contract's, a type no worker served, so every subscription's
// deliveries stopped after its first run (200 polls, about seven idle
// minutes). Served under that name, such a stuck run goes on, and its
// next continue-as-new takes the contract name.
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(DeliveryWorkflow, workflow.RegisterOptions{Name: deliveryContract().Name})
	r.RegisterWorkflowWithOptions(DeliveryWorkflow, workflow.RegisterOptions{Name: legacyDeliveryType})
}

// legacyDeliveryType is the workflow type the runs of earlier releases
// continued as (see RegisterWorkflows). Never remove it while such runs
// may exist.
const legacyDeliveryType = "DeliveryWorkflow"

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.NextDeliveries, activity.RegisterOptions{Name: ActivityNextDeliveries})
	r.RegisterActivityWithOptions(a.Deliver, activity.RegisterOptions{Name: ActivityDeliver})
	r.RegisterActivityWithOptions(a.EndSubscription, activity.RegisterOptions{Name: ActivityEndSubscription})
}

// DeliveryWorkflow delivers one subscription's events until it ends.
func DeliveryWorkflow(ctx workflow.Context, in *eventsv1.DeliveryWorkflowInput) error {
	log := workflow.GetLogger(ctx)
	wake := workflow.GetSignalChannel(ctx, wakeSignal().Name)
	// Reading the log is retried until it answers: the event log or its
	// database being down delays deliveries, it does not end them.
	readCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			NonRetryableErrorTypes: []string{errRefused}},
	})
	// A POST takes at most eventlog.DeliveryTimeout (10 s): an attempt lost
	// with its worker is retried 15 s after it started.
	deliverCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 15 * time.Second, RetryPolicy: DeliveryRetry})
	acked := in.GetAcked()
	for loop := 0; ; loop++ {
		for wake.ReceiveAsync(nil) {
		}
		var next eventsv1.NextDeliveriesResponse
		err := workflow.ExecuteActivity(readCtx, ActivityNextDeliveries, in, acked).Get(ctx, &next)
		if refused(err) {
			// The subscriber's calls are refused (a retired or paused
			// agent): its subscription ends.
			endCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
			reason := "the subscriber's calls are refused: " + rootMessage(err)
			return workflow.ExecuteActivity(endCtx, ActivityEndSubscription, in.GetSubscriptionId(), reason).Get(ctx, nil)
		}
		if err != nil {
			return err
		}
		if next.GetEnded() != "" {
			log.Info("events.delivery_ended", "subscription", in.GetSubscriptionId(), "reason", next.GetEnded())
			return nil
		}
		futures := make([]workflow.Future, 0, len(next.GetDeliveries()))
		for _, d := range next.GetDeliveries() {
			futures = append(futures, workflow.ExecuteActivity(deliverCtx, ActivityDeliver, in,
				&eventsv1.DeliverRequest{SubscriptionId: in.GetSubscriptionId(), Seq: d.GetSeq(), Cursor: next.GetFrom()}))
		}
		ended := false
		for i, f := range futures {
			var res eventsv1.DeliverResponse
			if err := f.Get(ctx, &res); err != nil {
				// Abandoned after its attempts (or refused): the
				// subscription goes on; a receiver may backfill by poll.
				log.Warn("events.delivery_abandoned", "subscription", in.GetSubscriptionId(), "event_id", next.GetDeliveries()[i].GetEventId(), "error", err)
				continue
			}
			if res.GetOutcome() == eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED {
				ended = true
			}
		}
		if ended {
			log.Info("events.delivery_ended", "subscription", in.GetSubscriptionId(), "reason", "the subscription ended during a delivery")
			return nil
		}
		acked = next.GetThrough()
		if next.GetHasMore() {
			continue
		}
		if loop >= loopsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			in.Acked = acked
			return workflow.NewContinueAsNewError(ctx, deliveryContract().Name, in)
		}
		timerCtx, cancel := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(workflow.NewTimer(timerCtx, PollInterval), func(workflow.Future) {})
		sel.AddReceive(wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.Select(ctx)
		cancel()
	}
}

// refused reports whether an activity failed with errRefused.
func refused(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == errRefused
}

// rootMessage is the message of err's application error.
func rootMessage(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Error()
	}
	return err.Error()
}
