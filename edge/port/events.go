package port

import (
	"context"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// Events serves MCP events (the io.modelcontextprotocol/events extension):
// the event types the contracts declare, and their occurrences as the
// events service keeps them. A door shows a caller the types whose tool
// the caller may call through its selection, and checks that again at each
// request.
type Events interface {
	// Types are the event types, sorted by name.
	Types() []*toolcatalog.EventType
	// Poll reads the caller's events after a cursor from the events
	// service, as the caller. Its errors are the service's (connect
	// codes).
	Poll(ctx context.Context, caller *identity.Principal, req *eventsv1.PollRequest) (*eventsv1.PollResponse, error)
	// Subscribe subscribes the caller by webhook (or refreshes its
	// subscription), as the caller.
	Subscribe(ctx context.Context, caller *identity.Principal, req *eventsv1.SubscribeRequest) (*eventsv1.SubscribeResponse, error)
	// Unsubscribe ends the caller's subscription, as the caller.
	Unsubscribe(ctx context.Context, caller *identity.Principal, req *eventsv1.UnsubscribeRequest) (*eventsv1.UnsubscribeResponse, error)
}
