package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
)

// The retention of call outcomes (docs/reputation.md): outcomes older than
// DefaultOutcomeRetention are removed, and at most DefaultMaxOutcomes are
// kept, the newest.
const (
	DefaultOutcomeRetention = 90 * 24 * time.Hour
	DefaultMaxOutcomes      = 1_000_000
	// pruneEvery is how often recording outcomes also prunes them.
	pruneEvery = time.Minute
)

// outcomes is the service's side of call outcomes.
type outcomes struct {
	store     OutcomeStore
	retention time.Duration
	keep      int64

	mu         sync.Mutex
	lastPruned time.Time
}

func newOutcomes(store Store, cfg Config) *outcomes {
	os, ok := store.(OutcomeStore)
	if !ok {
		return nil
	}
	o := &outcomes{store: os, retention: cfg.OutcomeRetention, keep: cfg.MaxOutcomes}
	if o.retention <= 0 {
		o.retention = DefaultOutcomeRetention
	}
	if o.keep <= 0 {
		o.keep = DefaultMaxOutcomes
	}
	return o
}

// errNoOutcomes answers when the store keeps no outcomes.
var errNoOutcomes = connect.NewError(connect.CodeUnimplemented, errors.New("this audit service keeps no call outcomes"))

// RecordOutcomes implements AuditService.RecordOutcomes.
func (s *Service) RecordOutcomes(ctx context.Context, req *auditv1.RecordOutcomesRequest) (*auditv1.RecordOutcomesResponse, error) {
	if err := s.authorizeAppend(ctx); err != nil {
		return nil, err
	}
	if s.outcomes == nil {
		return nil, errNoOutcomes
	}
	n, err := s.outcomes.store.RecordOutcomes(ctx, req.GetOutcomes())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record call outcomes: %w", err))
	}
	s.pruneOutcomes(ctx)
	return &auditv1.RecordOutcomesResponse{Recorded: int32(n)}, nil
}

// pruneOutcomes applies the retention at most once per pruneEvery; a
// failure is logged and tried again next time.
func (s *Service) pruneOutcomes(ctx context.Context) {
	o := s.outcomes
	now := s.now()
	o.mu.Lock()
	due := now.Sub(o.lastPruned) >= pruneEvery
	if due {
		o.lastPruned = now
	}
	o.mu.Unlock()
	if !due {
		return
	}
	removed, err := o.store.PruneOutcomes(ctx, now.Add(-o.retention), o.keep)
	if err != nil {
		s.log.WarnContext(ctx, "audit.outcomes_prune_failed", "error", err)
		return
	}
	if removed > 0 {
		s.log.InfoContext(ctx, "audit.outcomes_pruned", "removed", removed)
	}
}

// SummarizeOutcomes implements AuditService.SummarizeOutcomes.
func (s *Service) SummarizeOutcomes(ctx context.Context, req *auditv1.SummarizeOutcomesRequest) (*auditv1.SummarizeOutcomesResponse, error) {
	if err := requireCaller(ctx); err != nil {
		return nil, err
	}
	if s.outcomes == nil {
		return nil, errNoOutcomes
	}
	f := OutcomeFilter{Agent: req.GetAgent(), Through: req.GetThrough()}
	if t := req.GetSince(); t != nil {
		f.Since = t.AsTime()
	}
	if t := req.GetUntil(); t != nil {
		f.Until = t.AsTime()
	}
	res, err := s.outcomes.store.SummarizeOutcomes(ctx, f)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("count call outcomes: %w", err))
	}
	return res, nil
}
