package eventlog

import (
	"context"
	"sort"
	"time"

	"github.com/toolmesh/toolmesh/internal/mesh"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1/outboxv1connect"
)

// DefaultRelayInterval is how often the relay looks into an outbox that
// was empty.
const DefaultRelayInterval = 250 * time.Millisecond

// relayBatch is how many events the relay moves per pull.
const relayBatch = 200

// Sources are the outboxes the relay empties, by domain.
type Sources map[string]outboxv1connect.OutboxServiceClient

// RunRelay moves events from each source's outbox into the log until ctx
// ends: it pulls the oldest events, records them (each once, by id) and
// then acknowledges them, which removes them from the outbox. Dying at any
// step loses nothing: events not acknowledged are pulled again, and
// recorded again as nothing new. self is the relay's mesh identity (the
// service role) for its calls.
func (s *Service) RunRelay(ctx context.Context, sources Sources, self mesh.Caller, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultRelayInterval
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: self})
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	done := make(chan struct{}, len(names))
	for _, n := range names {
		go func() {
			defer func() { done <- struct{}{} }()
			s.relay(ctx, n, sources[n], interval)
		}()
	}
	for range names {
		<-done
	}
}

// relay empties one outbox until ctx ends.
func (s *Service) relay(ctx context.Context, domain string, src outboxv1connect.OutboxServiceClient, interval time.Duration) {
	failing := false
	for {
		moved, err := s.relayOnce(ctx, src)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				s.log.WarnContext(ctx, "events.relay_failed", "domain", domain, "error", err)
			}
			failing = true
		case err == nil:
			if failing {
				s.log.InfoContext(ctx, "events.relay_resumed", "domain", domain)
			}
			failing = false
		}
		if err == nil && moved == relayBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// relayOnce moves one batch and answers how many events it moved.
func (s *Service) relayOnce(ctx context.Context, src outboxv1connect.OutboxServiceClient) (int, error) {
	pulled, err := src.Pull(ctx, &outboxv1.PullRequest{Limit: relayBatch})
	if err != nil {
		return 0, err
	}
	occs := pulled.GetOccurrences()
	if len(occs) == 0 {
		return 0, nil
	}
	n, err := s.record(ctx, occs, true)
	if err != nil {
		return 0, err
	}
	ids := make([]string, len(occs))
	for i, o := range occs {
		ids[i] = o.GetEventId()
	}
	if _, err := src.Ack(ctx, &outboxv1.AckRequest{EventIds: ids}); err != nil {
		return 0, err
	}
	if n > 0 {
		s.log.DebugContext(ctx, "events.relayed", "events", n, "duplicates", len(occs)-n)
	}
	return len(occs), nil
}
