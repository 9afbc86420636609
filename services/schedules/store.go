package schedules

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Store keeps schedules and their runs. Implementations live in
// schedulesstore (SQLite and PostgreSQL); the rules about which changes are
// legal live in the service.
type Store interface {
	// Create stores s. A call with an idempotency key the agent used
	// before stores nothing: when the key's schedule was created by the same
	// request (call.Digest) Create returns it with created false, and
	// otherwise idempotency.ErrKeyReused.
	Create(ctx context.Context, s *schedulesv1.Schedule, call idempotency.Call) (stored *schedulesv1.Schedule, created bool, err error)
	// Get returns the schedule with that id, or ErrNotFound.
	Get(ctx context.Context, id string) (*schedulesv1.Schedule, error)
	// List returns one page of schedules, newest first, and the total count:
	// the agent's, or every agent's when agentID is empty; status
	// SCHEDULE_STATUS_UNSPECIFIED means any status.
	List(ctx context.Context, agentID string, status schedulesv1.ScheduleStatus, offset, limit int) ([]*schedulesv1.Schedule, int, error)
	// Update writes s's status, spec hash, approval workflow id, decision,
	// paused_by and update time if the stored schedule still has from's
	// status, spec hash and revision; otherwise ErrStale (or ErrNotFound).
	Update(ctx context.Context, s *schedulesv1.Schedule, from *schedulesv1.Schedule) (*schedulesv1.Schedule, error)
	// Revise stores next, a change of from (schedules_update) made by agent
	// by: its spec, action, description, depth, status, spec hash, approval
	// workflow id and revision (from's plus one), with the decision and
	// paused_by cleared, if the stored schedule is still as from was
	// (status, spec hash and revision); otherwise ErrStale. The change is
	// kept under the caller's idempotency key: when by used the key before
	// for the same request (call.Digest), Revise changes nothing and returns
	// the stored schedule, the revision that call made and created false;
	// for another request, idempotency.ErrKeyReused.
	Revise(ctx context.Context, next, from *schedulesv1.Schedule, by string, call idempotency.Call) (stored *schedulesv1.Schedule, revision int32, created bool, err error)
	// Delete removes a schedule whose creation could not be completed.
	Delete(ctx context.Context, id string) error
	// RecordExecution stores a run, or updates the stored run with the same
	// run id while that one is still running; a run that ended is returned
	// unchanged.
	RecordExecution(ctx context.Context, e *schedulesv1.Execution) (*schedulesv1.Execution, error)
	// ListExecutions returns one page of a schedule's runs, the most
	// recently due first, and the total count.
	ListExecutions(ctx context.Context, scheduleID string, offset, limit int) ([]*schedulesv1.Execution, int, error)
}

// Store errors.
var (
	ErrNotFound = errors.New("not found")
	ErrStale    = errors.New("schedule changed concurrently")
)
