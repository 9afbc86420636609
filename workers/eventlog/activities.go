package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/mesh"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
)

// errRefused is the type of the application errors of calls the event log
// (or the agent check in front of it) refuses: not retried.
const errRefused = "EventLogRefused"

// errFailed is the type of a delivery that failed and is retried.
const errFailed = "DeliveryFailed"

// Activities call the event log: as the subscriber for its deliveries (so
// the services' agent check refuses a retired agent's), as the worker
// itself to end a subscription.
type Activities struct {
	// Events reaches the event log; its client sends the identity in the
	// call's context as a mesh token.
	Events eventsv1connect.EventsServiceClient
	// Self is the worker's own identity (mesh.RoleService).
	Self mesh.Caller
}

// subscriber is the identity a subscription's calls carry.
func subscriber(in *eventsv1.DeliveryWorkflowInput) mesh.Caller {
	return mesh.Caller{Subject: in.GetSubject(), Agent: in.GetAgentId(), Roles: in.GetRoles(), Grants: in.GetGrants()}
}

// NextDeliveries records the deliveries up to acked as done and returns
// the next ones.
func (a *Activities) NextDeliveries(ctx context.Context, in *eventsv1.DeliveryWorkflowInput, acked string) (*eventsv1.NextDeliveriesResponse, error) {
	if a.Events == nil {
		return nil, errNoClient
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: subscriber(in)})
	res, err := a.Events.NextDeliveries(ctx, &eventsv1.NextDeliveriesRequest{SubscriptionId: in.GetSubscriptionId(), Acked: acked})
	if err != nil {
		return nil, classify(err)
	}
	return res, nil
}

// Deliver has the event log POST one event; a failed POST is an error of
// type DeliveryFailed, retried after the receiver's Retry-After when it
// gave one.
func (a *Activities) Deliver(ctx context.Context, in *eventsv1.DeliveryWorkflowInput, req *eventsv1.DeliverRequest) (*eventsv1.DeliverResponse, error) {
	if a.Events == nil {
		return nil, errNoClient
	}
	req.Attempt = activity.GetInfo(ctx).Attempt
	res, err := a.Events.Deliver(mesh.WithCall(ctx, mesh.Call{Caller: subscriber(in)}), req)
	if err != nil {
		return nil, classify(err)
	}
	if res.GetOutcome() == eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED {
		opts := temporal.ApplicationErrorOptions{}
		if ms := res.GetRetryAfterMs(); ms > 0 {
			opts.NextRetryDelay = min(time.Duration(ms)*time.Millisecond, DeliveryRetry.MaximumInterval)
		}
		return nil, temporal.NewApplicationErrorWithOptions(fmt.Sprintf("delivery of event %d failed: %s", req.GetSeq(), res.GetError()), errFailed, opts)
	}
	return res, nil
}

// EndSubscription ends a subscription, as the worker itself.
func (a *Activities) EndSubscription(ctx context.Context, id, reason string) error {
	if a.Events == nil {
		return errNoClient
	}
	_, err := a.Events.EndSubscription(mesh.WithCall(ctx, mesh.Call{Caller: a.Self}),
		&eventsv1.EndSubscriptionRequest{SubscriptionId: id, Reason: clip(reason, 200)})
	return classify(err)
}

// classify makes the event log's refusals non-retryable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeFailedPrecondition:
		return temporal.NewNonRetryableApplicationError(err.Error(), errRefused, err)
	}
	return err
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// errNoClient is returned by activities built without an event log client.
var errNoClient = errors.New("eventlog activities: no EventsService client")
