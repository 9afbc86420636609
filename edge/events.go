package edge

import (
	"context"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
)

// events serves MCP events (port.Events) from the contracts' event types
// and the events service, which the edge calls as the caller of each
// request.
type events struct {
	types  []*toolcatalog.EventType
	client eventsv1connect.EventsServiceClient
}

// newEvents is the edge's events; nil when the contracts declare none or
// the edge has no events service.
func newEvents(cfg Config, reg *toolcatalog.Registry) *events {
	url := cfg.Services[eventsv1connect.EventsServiceName]
	if len(reg.Events()) == 0 || url == "" {
		return nil
	}
	c := meshclient.Config{HTTP: cfg.HTTPClient, Signer: cfg.Mesh, Timeout: cfg.CallTimeout, Telemetry: cfg.Telemetry}
	return &events{types: reg.Events(), client: meshclient.New(c, eventsv1connect.NewEventsServiceClient, url)}
}

func (e *events) Types() []*toolcatalog.EventType { return e.types }

func (e *events) Poll(ctx context.Context, caller *identity.Principal, req *eventsv1.PollRequest) (*eventsv1.PollResponse, error) {
	return e.client.Poll(mesh.WithCall(ctx, mesh.Call{Caller: caller.Caller()}), req)
}

func (e *events) Subscribe(ctx context.Context, caller *identity.Principal, req *eventsv1.SubscribeRequest) (*eventsv1.SubscribeResponse, error) {
	return e.client.Subscribe(mesh.WithCall(ctx, mesh.Call{Caller: caller.Caller()}), req)
}

func (e *events) Unsubscribe(ctx context.Context, caller *identity.Principal, req *eventsv1.UnsubscribeRequest) (*eventsv1.UnsubscribeResponse, error) {
	return e.client.Unsubscribe(mesh.WithCall(ctx, mesh.Call{Caller: caller.Caller()}), req)
}
