// Package tasksstore keeps work tasks in SQL: SQLite by default, PostgreSQL
// when the service is given a postgres:// DSN. Both run the same queries; the
// schemas live in migrations/<dialect>/.
package tasksstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/tasks"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of tasks.Store.
type Store struct {
	db *sqldb.DB
}

var _ tasks.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "tasks", migrations); err != nil {
		return nil, err
	}
	if err := outbox.Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, agent_id, description, status, priority, result, cancel_reason, create_ms, update_ms, project_id`

// Create implements tasks.Store. The task's row is inserted first and
// claims the key (sqldb.InsertOnce); the day's counter is counted after, so
// a retry finds the first task instead of being refused by the cap that
// task filled. The counter's row lock serialises the agent's creates of one
// day, so the cap cannot be overshot.
func (s *Store) Create(ctx context.Context, t *tasksv1.Task, call idempotency.Call, maxPerDay int) (*tasksv1.Task, bool, error) {
	agent, day := t.GetAgentId(), t.GetCreateTime().AsTime().UTC().Format(time.DateOnly)
	var (
		out     *tasksv1.Task
		created bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[*tasksv1.Task]{
			What:   "task",
			Insert: `INSERT INTO tasks (` + columns + `, idempotency_key, request_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			Args: []any{t.GetId(), agent, t.GetDescription(), int32(t.GetStatus()), int32(t.GetPriority()), t.GetResult(), t.GetCancelReason(),
				t.GetCreateTime().AsTime().UnixMilli(), t.GetUpdateTime().AsTime().UnixMilli(), t.GetProjectId(), call.KeyOrNil(), call.Digest},
			Holders:    `SELECT ` + columns + `, request_digest FROM tasks WHERE agent_id = ? AND idempotency_key = ?`,
			HolderArgs: []any{agent, call.KeyOrNil()},
			Scan:       sqldb.DigestLast(scanRow),
			Digest:     call.Digest,
		})
		if err != nil {
			out = first
			return err
		}
		if !inserted {
			out = first
			return nil
		}
		var n int
		if err := tx.QueryRow(ctx, `INSERT INTO task_daily_counts (agent_id, day, created) VALUES (?, ?, 1)
			ON CONFLICT (agent_id, day) DO UPDATE SET created = task_daily_counts.created + 1
			RETURNING created`, agent, day).Scan(&n); err != nil {
			return fmt.Errorf("count today's tasks: %w", err)
		}
		if n > maxPerDay {
			return tasks.ErrDailyCap
		}
		out, created = t, true
		return nil
	})
	if errors.Is(err, idempotency.ErrKeyReused) {
		return out, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// Get implements tasks.Store.
func (s *Store) Get(ctx context.Context, agentID, id string) (*tasksv1.Task, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM tasks WHERE id = ? AND agent_id = ?`, id, agentID), scan, tasks.ErrNotFound)
}

// List implements tasks.Store.
func (s *Store) List(ctx context.Context, agentID string, f tasks.Filter, offset, limit int) ([]*tasksv1.Task, int, error) {
	q := sqldb.ListQuery{What: "tasks", Columns: columns, From: `tasks`, Where: `agent_id = ?`, Args: []any{agentID}, OrderBy: `create_ms DESC, id DESC`}
	if f.Status != tasksv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(f.Status))
	}
	if f.ProjectID != "" {
		q.And(`project_id = ?`, f.ProjectID)
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scan)
}

// Update implements tasks.Store: the change and its event
// work_task.status_changed, together.
func (s *Store) Update(ctx context.Context, t *tasksv1.Task, from tasksv1.TaskStatus) (*tasksv1.Task, error) {
	var updated *tasksv1.Task
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var (
			changed bool
			err     error
		)
		updated, changed, err = sqldb.Update(ctx, tx, "update task", func(ctx context.Context) (*tasksv1.Task, error) { return get(ctx, tx, t.GetAgentId(), t.GetId()) },
			`UPDATE tasks SET status = ?, result = ?, cancel_reason = ?, update_ms = ?
			WHERE id = ? AND agent_id = ? AND status = ?`,
			int32(t.GetStatus()), t.GetResult(), t.GetCancelReason(), t.GetUpdateTime().AsTime().UnixMilli(),
			t.GetId(), t.GetAgentId(), int32(from))
		if err != nil {
			return err
		}
		if !changed {
			return tasks.ErrStale
		}
		if updated.GetStatus() == from {
			return nil
		}
		return outbox.Write(ctx, tx, outbox.New(outbox.ID(tasks.EventStatusChanged, updated.GetId(), updated.GetStatus().String()), tasks.EventStatusChanged,
			&tasksv1.WorkTaskStatusChanged{TaskId: updated.GetId(), AgentId: updated.GetAgentId(), ProjectId: updated.GetProjectId(),
				Status: updated.GetStatus(), PreviousStatus: from, Task: updated}, updated.GetUpdateTime().AsTime()))
	})
	if err != nil {
		return nil, err
	}
	return updated, nil
}

// get reads the agent's task with id in q.
func get(ctx context.Context, q sqldb.Querier, agentID, id string) (*tasksv1.Task, error) {
	return sqldb.One(q.QueryRow(ctx, `SELECT `+columns+` FROM tasks WHERE id = ? AND agent_id = ?`, id, agentID), scan, tasks.ErrNotFound)
}

func scan(r sqldb.Scanner) (*tasksv1.Task, error) {
	return scanRow(r)
}

// scanRow reads a row of columns, and of more columns into more.
func scanRow(r sqldb.Scanner, more ...any) (*tasksv1.Task, error) {
	var (
		t                  tasksv1.Task
		status, priority   int64
		createMS, updateMS int64
	)
	if err := r.Scan(append([]any{&t.Id, &t.AgentId, &t.Description, &status, &priority, &t.Result, &t.CancelReason, &createMS, &updateMS, &t.ProjectId}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read task: %w", err)
	}
	t.Status = tasksv1.TaskStatus(status)
	t.Priority = tasksv1.TaskPriority(priority)
	t.CreateTime = sqldb.Timestamp(createMS)
	t.UpdateTime = sqldb.Timestamp(updateMS)
	return &t, nil
}
