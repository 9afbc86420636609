package tasks

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
)

// Store keeps tasks. Implementations live in tasksstore (SQLite and
// PostgreSQL); the rules about which changes are legal live here.
type Store interface {
	// Create stores t unless the agent already created maxPerDay tasks on
	// t's UTC creation day (ErrDailyCap). A call with an idempotency key
	// the agent used before stores nothing: when the key's task was created
	// by the same request (call.Digest) Create returns it with created
	// false, and otherwise idempotency.ErrKeyReused.
	Create(ctx context.Context, t *tasksv1.Task, call idempotency.Call, maxPerDay int) (stored *tasksv1.Task, created bool, err error)
	// Get returns the agent's task with that id, or ErrNotFound.
	Get(ctx context.Context, agentID, id string) (*tasksv1.Task, error)
	// List returns one page of the agent's tasks that f keeps, newest first,
	// and the total count.
	List(ctx context.Context, agentID string, f Filter, offset, limit int) ([]*tasksv1.Task, int, error)
	// Update writes t's status, result, cancel reason and update time if the
	// stored status is still from; otherwise ErrStale (or ErrNotFound).
	Update(ctx context.Context, t *tasksv1.Task, from tasksv1.TaskStatus) (*tasksv1.Task, error)
}

// EventStatusChanged is the event of a task that moved to another status
// (the toolmesh.tool.v1.event option in tasks.proto); Update writes it in
// the transaction of the change.
const EventStatusChanged = "work_task.status_changed"

// Filter narrows a list of tasks; its zero value keeps every task.
type Filter struct {
	// Status keeps the tasks in it; TASK_STATUS_UNSPECIFIED means any.
	Status tasksv1.TaskStatus
	// ProjectID keeps the tasks of that project; empty means any project,
	// or none.
	ProjectID string
}

// Store errors.
var (
	ErrNotFound = errors.New("not found")
	ErrDailyCap = errors.New("daily cap reached")
	ErrStale    = errors.New("task changed concurrently")
)
