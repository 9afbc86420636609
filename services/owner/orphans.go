package owner

import (
	"context"
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/internal/workflowrun"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// orphans withdraws the asks that were stored but whose workflow never
// started (workflowrun.Orphans): nothing would ever end them, nobody could
// answer them. A withdrawn ask is cancelled, without an answer; a workflow
// a late retry starts finds it ended (the first outcome wins).
func (s *Service) orphans() workflowrun.Orphans[*ownerv1.Ask] {
	return workflowrun.Orphans[*ownerv1.Ask]{
		Event: "owner.ask",
		Log:   s.log,
		Now:   s.now,
		Pending: func(ctx context.Context) ([]*ownerv1.Ask, error) {
			return workflowrun.AllPages(ctx, func(ctx context.Context, offset, limit int) ([]*ownerv1.Ask, int, error) {
				return s.store.ListAsks(ctx, "", ownerv1.AskStatus_ASK_STATUS_PENDING, offset, limit)
			})
		},
		Created: func(a *ownerv1.Ask) time.Time { return a.GetCreateTime().AsTime() },
		ID:      (*ownerv1.Ask).GetAskId,
		NoWorkflow: func(ctx context.Context, a *ownerv1.Ask) (bool, error) {
			_, err := s.wf.QueryAsk(ctx, a.GetWorkflowId())
			if errors.Is(err, ErrNoWorkflow) {
				return true, nil
			}
			return false, err
		},
		Withdraw: func(ctx context.Context, a *ownerv1.Ask) (bool, error) {
			_, changed, err := s.store.ResolveAsk(ctx, a.GetAskId(), Outcome{Status: ownerv1.AskStatus_ASK_STATUS_CANCELLED, At: s.nowMillis()})
			return changed, err
		},
	}
}

// Sweep withdraws every orphaned ask and returns how many it withdrew.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	if s.wf == nil {
		return 0, nil
	}
	return s.orphans().Sweep(ctx)
}

// RunSweeps sweeps every interval (workflowrun.SweepInterval) until ctx
// ends. Run it beside the server.
func (s *Service) RunSweeps(ctx context.Context, interval time.Duration) {
	if s.wf != nil {
		s.orphans().Run(ctx, interval)
	}
}
