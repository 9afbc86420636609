package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// An orphan is a pending ask whose workflow never started: Ask stored it
// and then could not start its workflow (Temporal down or too slow), and
// neither undid it (the service was killed in between, or the row could
// not be removed) nor was retried by its asker, who was answered
// unavailable. Nothing would ever end it: it would stay pending, listed,
// unanswerable. The service withdraws it — ends it as cancelled — when the
// owner answers it and in a sweep (RunSweeps).

// Defaults of the orphan sweep.
const (
	// OrphanGrace is how old a pending ask without a workflow must be
	// before it is withdrawn: longer than any Ask call takes to store the
	// ask and start its workflow, so that an ask being started is never
	// taken for an orphan.
	OrphanGrace = 2 * time.Minute
	// SweepInterval is the pause between two sweeps.
	SweepInterval = time.Minute
)

// withdrawIfOrphan ends a as cancelled when it is pending, older than
// OrphanGrace and has no workflow; it returns the ask as it stands and
// whether it was withdrawn. Ending is "first wins": an ask that ended
// meanwhile keeps its outcome, and a workflow a late retry started finds
// the ask ended.
func (s *Service) withdrawIfOrphan(ctx context.Context, a *ownerv1.Ask) (*ownerv1.Ask, bool, error) {
	if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING || s.wf == nil || s.now().Sub(a.GetCreateTime().AsTime()) < OrphanGrace {
		return a, false, nil
	}
	if _, err := s.wf.QueryAsk(ctx, a.GetWorkflowId()); !errors.Is(err, ErrNoWorkflow) {
		return a, false, err
	}
	ended, changed, err := s.store.ResolveAsk(ctx, a.GetAskId(), Outcome{Status: ownerv1.AskStatus_ASK_STATUS_CANCELLED, At: s.nowMillis()})
	if err != nil {
		return a, false, fmt.Errorf("withdraw ask %s: %w", a.GetAskId(), err)
	}
	if changed {
		s.log.WarnContext(ctx, "owner.ask_withdrawn", "ask_id", a.GetAskId(), "agent", a.GetAgentId(), "workflow_id", a.GetWorkflowId(),
			"created", a.GetCreateTime().AsTime().Format(time.RFC3339), "reason", "its workflow never started")
	}
	return ended, changed, nil
}

// Sweep withdraws every orphan (see above) and returns how many it
// withdrew. An ask whose workflow cannot be asked about now (Temporal
// down) is left for the next sweep.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	const page = 100
	var pending []*ownerv1.Ask
	for offset := 0; ; offset += page {
		list, total, err := s.store.ListAsks(ctx, "", ownerv1.AskStatus_ASK_STATUS_PENDING, offset, page)
		if err != nil {
			return 0, fmt.Errorf("list pending asks: %w", err)
		}
		pending = append(pending, list...)
		if len(list) < page || offset+page >= total {
			break
		}
	}
	n := 0
	for _, a := range pending {
		_, withdrawn, err := s.withdrawIfOrphan(ctx, a)
		if err != nil {
			s.log.DebugContext(ctx, "owner.sweep_skipped", "ask_id", a.GetAskId(), "error", err)
			continue
		}
		if withdrawn {
			n++
		}
	}
	return n, nil
}

// RunSweeps sweeps every interval until ctx ends. Run it beside the
// server.
func (s *Service) RunSweeps(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "owner.sweep_failed", "error", err)
			}
		}
	}
}
