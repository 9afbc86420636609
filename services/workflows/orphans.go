package workflows

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowrun"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// orphans withdraws the runs that were stored but whose workflow never
// started (workflowrun.Orphans): nothing would ever end them. A withdrawn
// run is cancelled; a workflow a late retry starts finds it ended (the
// first end recorded wins).
func (s *Service) orphans() workflowrun.Orphans[*workflowsv1.Run] {
	return workflowrun.Orphans[*workflowsv1.Run]{
		Event: "workflows.run",
		Log:   s.log,
		Now:   s.cfg.Now,
		Pending: func(ctx context.Context) ([]*workflowsv1.Run, error) {
			var all []*workflowsv1.Run
			for _, st := range []workflowsv1.RunStatus{workflowsv1.RunStatus_RUN_STATUS_RUNNING, workflowsv1.RunStatus_RUN_STATUS_SUSPENDED} {
				runs, err := workflowrun.AllPages(ctx, func(ctx context.Context, offset, limit int) ([]*workflowsv1.Run, int, error) {
					return s.store.ListRuns(ctx, "", "", st, offset, limit)
				})
				if err != nil {
					return nil, err
				}
				all = append(all, runs...)
			}
			return all, nil
		},
		Created: func(r *workflowsv1.Run) time.Time { return r.GetCreateTime().AsTime() },
		ID:      (*workflowsv1.Run).GetRunId,
		NoWorkflow: func(ctx context.Context, r *workflowsv1.Run) (bool, error) {
			_, err := s.engine.QueryRun(ctx, r.GetTemporalWorkflowId())
			if errors.Is(err, ErrNoWorkflow) {
				return true, nil
			}
			return false, err
		},
		Withdraw: func(ctx context.Context, r *workflowsv1.Run) (bool, error) {
			full, err := s.store.GetRun(ctx, r.GetRunId()) // a listed run has no nodes
			if err != nil {
				return false, err
			}
			now := s.nowMillis()
			_, changed, err := s.store.RecordRun(ctx, r.GetRunId(), &workflowsv1.RunOutcome{RunId: r.GetRunId(), Status: workflowsv1.RunStatus_RUN_STATUS_CANCELLED,
				Error:    &workflowsv1.RunError{DomainCode: "unavailable", Message: "withdrawn: the run was stored but its workflow never started"},
				Nodes:    full.GetNodes(),
				Deadline: full.GetDeadline(), EndTime: timestamppb.New(now)}, now)
			return changed, err
		},
	}
}

// Sweep withdraws every orphaned run and returns how many it withdrew.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	if s.engine == nil {
		return 0, nil
	}
	return s.orphans().Sweep(ctx)
}

// RunSweeps sweeps every interval (workflowrun.SweepInterval) until ctx
// ends. Run it beside the server.
func (s *Service) RunSweeps(ctx context.Context, interval time.Duration) {
	if s.engine != nil {
		s.orphans().Run(ctx, interval)
	}
}
