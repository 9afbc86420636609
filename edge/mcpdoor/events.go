package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// MCP events (io.modelcontextprotocol/events, 2026-07-28 only): the event
// types the contracts declare (toolmesh.tool.v1.event), and their
// occurrences, which the events service keeps.
//
//   - server/discover declares the extension, and — for the clients that
//     read the sketch-era shape, ChatGPT among them — a top-level
//     capabilities.events as well.
//   - events/list shows a caller the types whose tool (the option's READ
//     tool) it may call through its toolset selection, as tools/list shows
//     tools: each with the JSON schemas of its subscription arguments and
//     of its payload.
//   - events/poll reads one type's occurrences after a cursor from the
//     events service, as the caller: its own agent's, or every agent's for
//     the owner. Stateless — the cursor says where the log was read up to,
//     so any replica answers any cursor; a null (or absent) cursor starts
//     from now. The caller's right to the type is checked at every poll.
//   - events/subscribe subscribes the caller by webhook, or refreshes its
//     subscription (same type, arguments and URL): the events service
//     keeps it, seals its secret and delivers through a Temporal workflow
//     (docs/events.md). events/unsubscribe ends it. The caller's right to
//     the type is checked at each subscribe, so a refresh after a grant
//     was revoked is refused and ends the subscription.
//
// A session-era request (2025) for an events method is "method not
// found": the extension is defined for the stateless wire only.

// ExtensionEvents is the MCP Events extension's identifier.
const ExtensionEvents = "io.modelcontextprotocol/events"

// Event methods.
const (
	methodEventsList        = "events/list"
	methodEventsPoll        = "events/poll"
	methodEventsSubscribe   = "events/subscribe"
	methodEventsUnsubscribe = "events/unsubscribe"
)

// The extension's error codes (SEP-3415). Where the clients that ship it
// differ from the SEP (the AI SDK's fixture ends with -32012 for Forbidden),
// the message and data say which error it is too.
const (
	codeEventNotFound    = -32023
	codeEventForbid      = -32024
	codeEventExhausted   = -32025
	codeEventUnsupported = -32026
)

// eventParams are the params of the event methods.
type eventParams struct {
	mcp.ParamsBase
	// Cursor: events/list's page, events/poll's position (null: from
	// now).
	Cursor    *string         `json:"cursor,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	MaxAgeMs  *int64          `json:"maxAgeMs,omitempty"`
	MaxEvents *int32          `json:"maxEvents,omitempty"`
	// Delivery and TTLMs are events/subscribe's (and Delivery's URL
	// events/unsubscribe's); TTLMs null asks for no expiry.
	Delivery *eventDelivery  `json:"delivery,omitempty"`
	TTLMs    json.RawMessage `json:"ttlMs,omitempty"`
}

// eventDelivery is how a subscription is delivered.
type eventDelivery struct {
	Mode   string `json:"mode,omitempty"`
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// occurrence is an event as a client gets it.
type occurrence struct {
	EventID   string          `json:"eventId"`
	Name      string          `json:"name"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
	Cursor    *string         `json:"cursor"`
}

// eventsPollResult answers events/poll.
type eventsPollResult struct {
	mcp.ResultBase
	ResultType string        `json:"resultType"`
	Events     []*occurrence `json:"events"`
	Cursor     string        `json:"cursor"`
	Truncated  bool          `json:"truncated"`
	HasMore    bool          `json:"hasMore"`
	NextPollMs int64         `json:"nextPollMs"`
}

// eventDescription is an event type as events/list shows it.
type eventDescription struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Delivery      []string        `json:"delivery"`
	InputSchema   json.RawMessage `json:"inputSchema"`
	PayloadSchema json.RawMessage `json:"payloadSchema"`
}

// eventsListResult answers events/list.
type eventsListResult struct {
	mcp.ResultBase
	ResultType string              `json:"resultType"`
	Events     []*eventDescription `json:"events"`
	NextCursor string              `json:"nextCursor,omitempty"`
}

// eventTypes are the event types the door serves: those of cfg.Events.
type eventTypes struct {
	types []*toolcatalog.EventType
	// described are the types as events/list shows them, by index of
	// types; names are their names (sorted, as types are).
	described []*eventDescription
	names     []string
	// delivery are the delivery modes the edge offers.
	delivery []string
}

// eventFeature serves the event methods: the event types, the events
// service that keeps their occurrences, and what the door's lists page by.
type eventFeature struct {
	types    *eventTypes
	source   port.Events
	pageSize int
	log      *slog.Logger
	resolve  *resolver
}

// buildEvents reads the event types of source; nil when there are none or
// no events service.
func buildEvents(source port.Events) *eventTypes {
	if source == nil || len(source.Types()) == 0 {
		return nil
	}
	ev := &eventTypes{types: source.Types(), delivery: []string{"poll", "webhook"}}
	for _, t := range ev.types {
		ev.described = append(ev.described, &eventDescription{
			Name: t.Name, Description: t.Description, Delivery: ev.delivery,
			InputSchema: t.InputSchema, PayloadSchema: t.PayloadSchema,
		})
		ev.names = append(ev.names, t.Name)
	}
	return ev
}

// addEventMethods registers the event methods with the SDK (so it parses
// them); eventsMiddleware answers them, with the caller in hand.
func (e *eventFeature) addEventMethods(server *mcp.Server) error {
	unreachable := func(context.Context, *mcp.ServerSession, *eventParams) (*ackResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "event method outside the edge's middleware"}
	}
	for _, m := range []string{methodEventsList, methodEventsPoll, methodEventsSubscribe, methodEventsUnsubscribe} {
		if err := mcp.AddReceivingCustomMethod(server, m, unreachable); err != nil {
			return fmt.Errorf("register %s: %w", m, err)
		}
	}
	server.AddReceivingMiddleware(e.eventsMiddleware)
	return nil
}

// discoverResult is server/discover's result with the top-level events
// capability besides the extension.
type discoverResult struct {
	*mcp.DiscoverResult
	Capabilities *capabilitiesWithEvents `json:"capabilities"`
}

type capabilitiesWithEvents struct {
	*mcp.ServerCapabilities
	Events struct{} `json:"events"`
}

// eventsMiddleware serves the event methods and adds the top-level events
// capability to server/discover.
func (e *eventFeature) eventsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "server/discover":
			res, err := next(ctx, method, req)
			if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil && dr.Capabilities != nil {
				return &discoverResult{DiscoverResult: dr, Capabilities: &capabilitiesWithEvents{ServerCapabilities: dr.Capabilities}}, nil
			}
			return res, err
		case methodEventsList, methodEventsPoll, methodEventsSubscribe, methodEventsUnsubscribe:
		default:
			return next(ctx, method, req)
		}
		if !modernRequest(req) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is served at MCP %s only", method, ModernProtocol)}
		}
		rq, err := e.resolve.of(ctx, req)
		if err != nil {
			return nil, err
		}
		p, r := rq.caller, rq.reach
		params, _ := req.GetParams().(*eventParams)
		if params == nil {
			params = &eventParams{}
		}
		switch method {
		case methodEventsList:
			return e.listEvents(p, r, params)
		case methodEventsPoll:
			return e.pollEvents(ctx, p, r, params)
		case methodEventsSubscribe:
			return e.subscribeEvents(ctx, p, r, params)
		case methodEventsUnsubscribe:
			return e.unsubscribeEvents(ctx, p, params)
		}
		return next(ctx, method, req)
	}
}

// mayWatch reports whether p may see the events of t through r: whether
// it may call t's tool, which its selection reaches.
func mayWatch(p *identity.Principal, r *reach, t *toolcatalog.EventType) bool {
	if !r.has(t.Tool.Name) {
		return false
	}
	ok, _ := p.MayCall(t.Tool)
	return ok
}

// listEvents answers events/list: the types p may see through r.
func (e *eventFeature) listEvents(p *identity.Principal, r *reach, params *eventParams) (mcp.Result, error) {
	var items []*eventDescription
	var keys []string
	for i, t := range e.types.types {
		if mayWatch(p, r, t) {
			items = append(items, e.types.described[i])
			keys = append(keys, t.Name)
		}
	}
	cur := ""
	if params.Cursor != nil {
		cur = *params.Cursor
	}
	out, next, err := page(items, keys, cur, e.pageSize)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	return &eventsListResult{ResultType: "complete", Events: out, NextCursor: next}, nil
}

// eventType is the type params name, when p may see it through r: -32602
// without a name, -32023 for an unknown type, -32024 for one p may not
// see (now: grants are checked at every request).
func (e *eventFeature) eventType(p *identity.Principal, r *reach, params *eventParams) (*toolcatalog.EventType, error) {
	if params.Name == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "name: the event type is required"}
	}
	for _, t := range e.types.types {
		if t.Name != params.Name {
			continue
		}
		if !mayWatch(p, r, t) {
			return nil, eventError(codeEventForbid, fmt.Sprintf("forbidden: this caller may not see the events %q (they follow the tool %s, which its grants or toolset selection leave out)", t.Name, t.Tool.Name),
				map[string]any{"kind": "event", "name": t.Name})
		}
		return t, nil
	}
	return nil, eventError(codeEventNotFound, fmt.Sprintf("no event type %q", params.Name), map[string]any{"kind": "event", "name": params.Name})
}

// eventError is an error of the extension with data.
func eventError(code int64, msg string, data map[string]any) error {
	raw, _ := json.Marshal(data)
	return &jsonrpc.Error{Code: code, Message: msg, Data: raw}
}

// pollEvents answers events/poll.
func (e *eventFeature) pollEvents(ctx context.Context, p *identity.Principal, r *reach, params *eventParams) (mcp.Result, error) {
	t, err := e.eventType(p, r, params)
	if err != nil {
		return nil, err
	}
	args, err := eventArguments(params)
	if err != nil {
		return nil, err
	}
	req := &eventsv1.PollRequest{Name: t.Name, Arguments: args}
	req.Cursor = params.Cursor
	if params.MaxAgeMs != nil {
		if *params.MaxAgeMs < 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "maxAgeMs: must not be negative"}
		}
		req.MaxAgeMs = *params.MaxAgeMs
	}
	if params.MaxEvents != nil {
		if *params.MaxEvents < 1 || *params.MaxEvents > maxPollEvents {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("maxEvents: must be 1 to %d", maxPollEvents)}
		}
		req.MaxEvents = *params.MaxEvents
	}
	res, err := e.source.Poll(ctx, p, req)
	if err != nil {
		return nil, e.eventsServiceError(ctx, t, err)
	}
	out := &eventsPollResult{ResultType: "complete", Events: []*occurrence{}, Cursor: res.GetCursor(),
		Truncated: res.GetTruncated(), HasMore: res.GetHasMore(), NextPollMs: res.GetNextPollMs()}
	for _, e := range res.GetEvents() {
		c := e.GetCursor()
		out.Events = append(out.Events, &occurrence{EventID: e.GetEventId(), Name: e.GetName(),
			Timestamp: e.GetTime().AsTime().UTC().Format(time.RFC3339Nano), Data: json.RawMessage(e.GetData()), Cursor: &c})
	}
	return out, nil
}

// eventArguments are the subscription arguments of params as the events
// service takes them: a JSON object, "" for none.
func eventArguments(params *eventParams) (string, error) {
	args := bytes.TrimSpace(params.Arguments)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return "", nil
	}
	if args[0] != '{' {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments: must be a JSON object"}
	}
	return string(args), nil
}

// subscribeResult answers events/subscribe.
type subscribeResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	ID             string          `json:"id"`
	RefreshBefore  *string         `json:"refreshBefore"`
	Cursor         string          `json:"cursor"`
	Truncated      bool            `json:"truncated"`
	DeliveryStatus *deliveryStatus `json:"deliveryStatus,omitempty"`
}

type deliveryStatus struct {
	Active         bool    `json:"active"`
	LastDeliveryAt *string `json:"lastDeliveryAt"`
	LastError      *string `json:"lastError"`
	FailedSince    *string `json:"failedSince,omitempty"`
}

// subscribeEvents answers events/subscribe: webhook delivery only (poll
// needs no subscription).
func (e *eventFeature) subscribeEvents(ctx context.Context, p *identity.Principal, r *reach, params *eventParams) (mcp.Result, error) {
	t, err := e.eventType(p, r, params)
	var jerr *jsonrpc.Error
	if errors.As(err, &jerr) && jerr.Code == codeEventForbid && params.Delivery != nil {
		// A refresh its grants no longer allow ends the subscription.
		args, _ := eventArguments(params)
		_, _ = e.source.Unsubscribe(ctx, p, &eventsv1.UnsubscribeRequest{Name: params.Name, Arguments: args, Url: params.Delivery.URL})
	}
	if err != nil {
		return nil, err
	}
	dl := params.Delivery
	switch {
	case dl == nil || dl.Mode == "":
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `delivery: required, e.g. {"mode": "webhook", "url": "https://…", "secret": "whsec_…"}`}
	case dl.Mode != "webhook":
		return nil, eventError(codeEventUnsupported, fmt.Sprintf("unsupported: delivery mode %q (this server delivers by webhook, or answers events/poll)", dl.Mode),
			map[string]any{"feature": "delivery", "value": dl.Mode})
	case dl.URL == "":
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "delivery.url: required (https)"}
	case dl.Secret == "":
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `delivery.secret: required: "whsec_" followed by the base64 of 24 to 64 random bytes`}
	}
	args, err := eventArguments(params)
	if err != nil {
		return nil, err
	}
	req := &eventsv1.SubscribeRequest{Name: t.Name, Arguments: args, Url: dl.URL, Secret: dl.Secret, Cursor: params.Cursor}
	if ttl := bytes.TrimSpace(params.TTLMs); len(ttl) > 0 {
		var ms int64
		if !bytes.Equal(ttl, []byte("null")) {
			if err := json.Unmarshal(ttl, &ms); err != nil || ms <= 0 {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "ttlMs: must be a positive number of milliseconds, or null for no expiry"}
			}
		}
		req.TtlMs = &ms
	}
	res, err := e.source.Subscribe(ctx, p, req)
	if err != nil {
		return nil, e.eventsServiceError(ctx, t, err)
	}
	out := &subscribeResult{ResultType: "complete", ID: res.GetId(), Cursor: res.GetCursor(), Truncated: res.GetTruncated()}
	if res.RefreshBefore != nil {
		out.RefreshBefore = stamp(res.GetRefreshBefore().AsTime())
	}
	if st := res.GetDeliveryStatus(); st != nil {
		out.DeliveryStatus = &deliveryStatus{Active: st.GetActive()}
		if st.LastDeliveryTime != nil {
			out.DeliveryStatus.LastDeliveryAt = stamp(st.GetLastDeliveryTime().AsTime())
		}
		if e := st.GetLastError(); e != "" {
			out.DeliveryStatus.LastError = &e
		}
		if st.FailedSince != nil {
			out.DeliveryStatus.FailedSince = stamp(st.GetFailedSince().AsTime())
		}
	}
	return out, nil
}

// stamp is t as the extension writes times.
func stamp(t time.Time) *string {
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// unsubscribeEvents answers events/unsubscribe: an empty result, also
// when there was no such subscription.
func (e *eventFeature) unsubscribeEvents(ctx context.Context, p *identity.Principal, params *eventParams) (mcp.Result, error) {
	if params.Name == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "name: the event type is required"}
	}
	if params.Delivery == nil || params.Delivery.URL == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "delivery.url: required: the URL the subscription delivers to"}
	}
	args, err := eventArguments(params)
	if err != nil {
		return nil, err
	}
	if _, err := e.source.Unsubscribe(ctx, p, &eventsv1.UnsubscribeRequest{Name: params.Name, Arguments: args, Url: params.Delivery.URL}); err != nil {
		return nil, e.eventsServiceError(ctx, &toolcatalog.EventType{Name: params.Name}, err)
	}
	return &eventsEmptyResult{}, nil
}

// eventsEmptyResult is an empty result.
type eventsEmptyResult struct{ mcp.ResultBase }

// maxPollEvents bounds a poll's maxEvents.
const maxPollEvents = 1000

// eventsServiceError is the JSON-RPC error of a failed call to the events
// service.
func (e *eventFeature) eventsServiceError(ctx context.Context, t *toolcatalog.EventType, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: connectMessage(err)}
	case connect.CodeNotFound:
		return eventError(codeEventNotFound, fmt.Sprintf("no event type %q", t.Name), map[string]any{"kind": "event", "name": t.Name})
	case connect.CodePermissionDenied:
		return eventError(codeEventForbid, "forbidden: "+connectMessage(err), map[string]any{"kind": "event", "name": t.Name})
	case connect.CodeResourceExhausted:
		return eventError(codeEventExhausted, "resource exhausted: "+connectMessage(err), map[string]any{"limit": "subscriptions"})
	case connect.CodeUnimplemented:
		return eventError(codeEventUnsupported, "unsupported: "+connectMessage(err), map[string]any{"feature": "delivery", "value": "webhook"})
	}
	e.log.WarnContext(ctx, "mcp.events_failed", "event", t.Name, "error", err)
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the events service is unavailable; poll again with the same cursor",
		Data: json.RawMessage(`{"retryable":true}`)}
}

// connectMessage is a connect error's message without its code.
func connectMessage(err error) string {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr.Message()
	}
	return err.Error()
}
