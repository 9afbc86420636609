// Package eventlog is the mesh's event log: the events its domains declare
// in their contracts (toolmesh.tool.v1.event), pulled from each domain's
// outbox (internal/outbox) by the relay (relay.go), recorded once by id, and
// read by the edge for MCP events (events/poll) as the caller of the
// request: an agent sees the events about itself, the owner every agent's.
//
// A poll's cursor is the sequence number of the last event it read: any
// replica of the service, behind any edge replica, answers any cursor. A
// poll without one starts from now. Events older than the retention are
// pruned (RunPrune); a cursor from before the pruned ones answers with
// truncated.
package eventlog

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
)

// Defaults of Config.
const (
	// DefaultRetention is how long the log keeps an event.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultPollInterval is the nextPollMs of a poll that read everything.
	DefaultPollInterval = 2 * time.Second
	// DefaultMaxEvents is how many events a poll answers when it names no
	// bound.
	DefaultMaxEvents = 100
)

// Config tunes the service.
type Config struct {
	// Types are the event types the contracts declare.
	Types []*toolcatalog.EventType
	// Retention is how long an event is kept (default DefaultRetention).
	Retention time.Duration
	// PollInterval is when a client that read everything polls again
	// (default DefaultPollInterval).
	PollInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events.
	Log *slog.Logger
	// Webhooks configures webhook subscriptions (none when its Sealer is
	// nil).
	Webhooks Webhooks
}

// Service implements toolmesh.events.v1.EventsService.
type Service struct {
	store Store
	cfg   Config
	types map[string]*toolcatalog.EventType
	valid *boundary.Validator
	log   *slog.Logger
	// webhooks posts deliveries (Webhooks.policy's client: checked at
	// each connection, no redirects).
	webhooks *http.Client
}

var _ eventsv1connect.EventsServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) (*Service, error) {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Webhooks.MaxPerPrincipal <= 0 {
		cfg.Webhooks.MaxPerPrincipal = DefaultMaxSubscriptions
	}
	v, err := boundary.NewValidator()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	s := &Service{store: store, cfg: cfg, types: map[string]*toolcatalog.EventType{}, valid: v, log: cfg.Log,
		webhooks: cfg.Webhooks.policy().Client(egress.ClientOptions{Timeout: DeliveryTimeout, MaxResponseBytes: 64 << 10})}
	for _, t := range cfg.Types {
		s.types[t.Name] = t
	}
	return s, nil
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	return server.Register(eventsv1connect.EventsServiceName, eventsv1connect.EventsServiceHandler(s), eventsv1connect.NewEventsServiceHandler, nil)
}

// Record implements EventsService.Record.
func (s *Service) Record(ctx context.Context, req *eventsv1.RecordRequest) (*eventsv1.RecordResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	n, err := s.record(ctx, req.GetOccurrences(), false)
	if err != nil {
		return nil, err
	}
	return &eventsv1.RecordResponse{Recorded: int32(n), Duplicates: int32(len(req.GetOccurrences()) - n)}, nil
}

// record stores occurrences, each once by id, and answers how many were
// new. An occurrence that does not fit its type refuses them all, or —
// with skipBad, for the relay, which must not stay stuck behind it — is
// logged and left out.
func (s *Service) record(ctx context.Context, occs []*outboxv1.Occurrence, skipBad bool) (int, error) {
	now := s.cfg.Now().UTC()
	recs := make([]*Recorded, 0, len(occs))
	for _, o := range occs {
		r, err := s.recorded(o, now)
		if err != nil && skipBad {
			s.log.ErrorContext(ctx, "events.event_dropped", "event_id", o.GetEventId(), "name", o.GetName(), "error", err)
			continue
		}
		if err != nil {
			return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("event %s: %w", o.GetEventId(), err))
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	n, err := s.store.Record(ctx, recs)
	if err != nil {
		return 0, connect.NewError(connect.CodeInternal, fmt.Errorf("record events: %w", err))
	}
	return n, nil
}

// recorded checks o against its type and makes it a log entry.
func (s *Service) recorded(o *outboxv1.Occurrence, now time.Time) (*Recorded, error) {
	t, ok := s.types[o.GetName()]
	if !ok {
		return nil, fmt.Errorf("no event type %q", o.GetName())
	}
	payload := dynamicpb.NewMessage(t.Payload)
	if want := string(t.Payload.FullName()); !strings.HasSuffix(o.GetPayload().GetTypeUrl(), "/"+want) {
		return nil, fmt.Errorf("payload %s is not a %s", o.GetPayload().GetTypeUrl(), want)
	}
	if err := proto.Unmarshal(o.GetPayload().GetValue(), payload); err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	data, err := dataOpts.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	return &Recorded{
		ID: o.GetEventId(), Name: t.Name, Agent: t.AgentOf(payload), Payload: o.GetPayload().GetValue(),
		Data: string(data), Time: o.GetTime().AsTime(), Recorded: now,
	}, nil
}

// dataOpts encode a payload as clients get it: the field names of the
// contracts, as tool results have them.
var dataOpts = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}

// Poll implements EventsService.Poll.
func (s *Service) Poll(ctx context.Context, req *eventsv1.PollRequest) (*eventsv1.PollResponse, error) {
	caller := mesh.FromContext(ctx).Caller
	if caller.Agent == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	t, ok := s.types[req.GetName()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no event type %q", req.GetName()))
	}
	args, err := s.arguments(ctx, t, req.GetArguments())
	if err != nil {
		return nil, err
	}
	if req.Cursor == nil {
		// From now: the log's end, and no events.
		end, err := s.store.End(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read events: %w", err))
		}
		return &eventsv1.PollResponse{Cursor: cursorOf(end), NextPollMs: s.cfg.PollInterval.Milliseconds()}, nil
	}
	after, err := parseCursor(req.GetCursor())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	q := Query{Name: t.Name, After: after, Limit: int(req.GetMaxEvents())}
	if q.Limit == 0 {
		q.Limit = DefaultMaxEvents
	}
	if !caller.Oversees() {
		q.Agent = caller.Agent
	}
	if age := req.GetMaxAgeMs(); age > 0 {
		q.Since = s.cfg.Now().Add(-time.Duration(age) * time.Millisecond)
	}
	p, err := s.store.Read(ctx, q)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read events: %w", err))
	}
	out := &eventsv1.PollResponse{Cursor: cursorOf(p.End), Truncated: after < p.PrunedThrough, HasMore: p.Full}
	if !p.Full {
		out.NextPollMs = s.cfg.PollInterval.Milliseconds()
	}
	for _, e := range p.Events {
		if args != nil {
			payload := dynamicpb.NewMessage(t.Payload)
			if err := proto.Unmarshal(e.Payload, payload); err != nil || !t.Matches(args, payload) {
				continue
			}
		}
		out.Events = append(out.Events, &eventsv1.Event{EventId: e.ID, Name: e.Name, Time: timestamppb.New(e.Time), Data: e.Data, Cursor: cursorOf(e.Seq)})
	}
	return out, nil
}

// arguments decodes and validates a subscription's arguments at the
// events.arguments boundary, as a tool's arguments are (strict JSON, each
// fault named by its path under "arguments"); nil when there are none.
func (s *Service) arguments(ctx context.Context, t *toolcatalog.EventType, raw string) (*dynamicpb.Message, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	args := dynamicpb.NewMessage(t.Arguments)
	if vs := s.valid.DecodeJSON(ctx, s.log, "events.arguments", "this event type", []byte(raw), args); len(vs) > 0 {
		for i := range vs {
			vs[i].Field = strings.TrimSuffix("arguments."+vs[i].Field, ".")
		}
		return nil, boundary.InvalidArgument(vs...)
	}
	return args, nil
}

// cursorPrefix marks the cursors of this log.
const cursorPrefix = "ev1."

// cursorOf is the cursor after the event with sequence number seq.
func cursorOf(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(seq, 10)))
}

// parseCursor reads a cursor cursorOf made.
func parseCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if n, ok := strings.CutPrefix(string(b), cursorPrefix); ok {
			if seq, err := strconv.ParseInt(n, 10, 64); err == nil && seq >= 0 {
				return seq, nil
			}
		}
	}
	return 0, errors.New("cursor: not a cursor of this server's events")
}

// RunPrune removes events older than the retention every interval until
// ctx ends.
func (s *Service) RunPrune(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.store.Prune(ctx, s.cfg.Now().Add(-s.cfg.Retention)); err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "events.prune_failed", "error", err)
			}
		} else if n > 0 {
			s.log.InfoContext(ctx, "events.pruned", "events", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
