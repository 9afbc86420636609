package workflows

import (
	"context"
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// Store keeps workflows, their versions and their runs. Implementations
// live in workflowsstore (SQLite and PostgreSQL); who may see and change
// what is decided here, in the service.
type Store interface {
	// CreateWorkflow stores w at version 1 with its definition. A call
	// with the same idempotency key (per agent) returns the workflow the
	// first call stored, with created false, or idempotency.ErrKeyReused
	// for another request; ErrNameTaken when the agent has a workflow of
	// that name.
	CreateWorkflow(ctx context.Context, w *workflowsv1.Workflow, call idempotency.Call) (stored *workflowsv1.Workflow, created bool, err error)
	// GetWorkflow returns a workflow that is not deleted at a version (the
	// latest for 0), with its definition; ErrNotFound when there is none.
	GetWorkflow(ctx context.Context, id string, version int32) (*workflowsv1.Workflow, error)
	// UpdateWorkflow stores def as the workflow's next version (and the
	// description, when given) and returns it; ErrNotFound, or
	// ErrVersionConflict when expected is not 0 and not the latest
	// version.
	UpdateWorkflow(ctx context.Context, id string, expected int32, description *string, def *workflowsv1.Definition, at time.Time) (*workflowsv1.Workflow, error)
	// ListWorkflows returns one page of an agent's workflows (every
	// agent's for ""), newest first, without definitions, and the total.
	ListWorkflows(ctx context.Context, agent string, offset, limit int) ([]*workflowsv1.Workflow, int, error)
	// DeleteWorkflow marks the workflow deleted (its versions stay, for
	// its runs) and returns it as it was; ErrNotFound.
	DeleteWorkflow(ctx context.Context, id string, at time.Time) (*workflowsv1.Workflow, error)

	// CreateRun stores a new run made by a request with digest digest.
	// When a run with its id exists (a call with the same idempotency
	// key) it stores nothing and returns that run, with created false, or
	// idempotency.ErrKeyReused when another request made it.
	CreateRun(ctx context.Context, r *workflowsv1.Run, digest string) (stored *workflowsv1.Run, created bool, err error)
	// GetRun returns the run with every node; ErrNotFound.
	GetRun(ctx context.Context, id string) (*workflowsv1.Run, error)
	// ListRuns returns one page of runs, newest first, without nodes: an
	// agent's ("" for every agent's), of one workflow ("" for any), in one
	// status (UNSPECIFIED for any), and the total.
	ListRuns(ctx context.Context, agent, workflowID string, status workflowsv1.RunStatus, offset, limit int) ([]*workflowsv1.Run, int, error)
	// RecordRun writes a run's state as its workflow reports it (status,
	// output, error, nodes, deadline, end time), at time at, unless the run
	// has ended (the first end recorded wins); changed says whether it
	// wrote. ErrNotFound.
	RecordRun(ctx context.Context, id string, o *workflowsv1.RunOutcome, at time.Time) (r *workflowsv1.Run, changed bool, err error)
	// DeleteRun removes a run whose workflow could not be started, so
	// that a retry starts afresh; it does nothing to a run that ended.
	DeleteRun(ctx context.Context, id string) error
}

// Store errors.
var (
	ErrNotFound        = errors.New("not found")
	ErrNameTaken       = errors.New("name taken")
	ErrVersionConflict = errors.New("version conflict")
)
