// Package schedulesstore keeps schedules and their runs in SQL: SQLite by
// default, PostgreSQL when the service is given a postgres:// DSN. Both run
// the same queries; the schemas live in migrations/<dialect>/.
package schedulesstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of schedules.Store.
type Store struct {
	db *sqldb.DB
}

var _ schedules.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "schedules", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, agent_id, description, cron, interval_seconds, timezone, tool, arguments, status, spec_hash,
	approval_workflow_id, temporal_schedule_id, decided_by, decision_note, decide_ms, paused_by, depth, create_ms, update_ms, revision`

// Create implements schedules.Store, with sqldb.InsertOnce.
func (s *Store) Create(ctx context.Context, sch *schedulesv1.Schedule, call idempotency.Call) (*schedulesv1.Schedule, bool, error) {
	args, err := protojson.Marshal(orEmpty(sch.GetAction().GetArguments()))
	if err != nil {
		return nil, false, fmt.Errorf("encode arguments: %w", err)
	}
	d := sch.GetDecision()
	return sqldb.InsertOnce(ctx, s.db, sqldb.Once[*schedulesv1.Schedule]{
		What: "schedule",
		Insert: `INSERT INTO schedules (` + columns + `, idempotency_key, request_digest)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{sch.GetId(), sch.GetAgentId(), sch.GetDescription(), sch.GetCron(), sch.GetIntervalSeconds(), sch.GetTimezone(),
			sch.GetAction().GetTool(), string(args), int32(sch.GetStatus()), sch.GetSpecHash(),
			sch.GetApprovalWorkflowId(), sch.GetTemporalScheduleId(), d.GetDecidedBy(), d.GetNote(), sqldb.Millis(d.GetDecideTime()),
			sch.GetPausedBy(), sch.GetDepth(), sqldb.Millis(sch.GetCreateTime()), sqldb.Millis(sch.GetUpdateTime()), sch.GetRevision(),
			call.KeyOrNil(), call.Digest},
		Holders:    `SELECT ` + columns + `, request_digest FROM schedules WHERE agent_id = ? AND idempotency_key = ?`,
		HolderArgs: []any{sch.GetAgentId(), call.KeyOrNil()},
		Scan:       sqldb.DigestLast(scanRow),
		Digest:     call.Digest,
		New:        sch,
	})
}

// Get implements schedules.Store.
func (s *Store) Get(ctx context.Context, id string) (*schedulesv1.Schedule, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM schedules WHERE id = ?`, id), scan, schedules.ErrNotFound)
}

// List implements schedules.Store.
func (s *Store) List(ctx context.Context, agentID string, status schedulesv1.ScheduleStatus, offset, limit int) ([]*schedulesv1.Schedule, int, error) {
	q := sqldb.ListQuery{What: "schedules", Columns: columns, From: "schedules", OrderBy: "create_ms DESC, id DESC"}
	if agentID != "" {
		q.And(`agent_id = ?`, agentID)
	}
	if status != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(status))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scan)
}

// Update implements schedules.Store.
func (s *Store) Update(ctx context.Context, sch *schedulesv1.Schedule, from *schedulesv1.Schedule) (*schedulesv1.Schedule, error) {
	d := sch.GetDecision()
	updated, changed, err := sqldb.Update(ctx, s.db, "update schedule", func(ctx context.Context) (*schedulesv1.Schedule, error) { return s.Get(ctx, sch.GetId()) },
		`UPDATE schedules SET status = ?, spec_hash = ?, approval_workflow_id = ?,
		decided_by = ?, decision_note = ?, decide_ms = ?, paused_by = ?, update_ms = ?
		WHERE id = ? AND status = ? AND spec_hash = ? AND revision = ?`,
		int32(sch.GetStatus()), sch.GetSpecHash(), sch.GetApprovalWorkflowId(),
		d.GetDecidedBy(), d.GetNote(), sqldb.Millis(d.GetDecideTime()), sch.GetPausedBy(), sqldb.Millis(sch.GetUpdateTime()),
		sch.GetId(), int32(from.GetStatus()), from.GetSpecHash(), from.GetRevision())
	if err == nil && !changed {
		return nil, schedules.ErrStale
	}
	return updated, err
}

// Revise implements schedules.Store. The change's row in schedule_updates
// is inserted first and claims the key (sqldb.InsertOnce) and the revision
// number; the schedule's row is changed after, from the state from read.
func (s *Store) Revise(ctx context.Context, next, from *schedulesv1.Schedule, by string, call idempotency.Call) (*schedulesv1.Schedule, int32, bool, error) {
	args, err := protojson.Marshal(orEmpty(next.GetAction().GetArguments()))
	if err != nil {
		return nil, 0, false, fmt.Errorf("encode arguments: %w", err)
	}
	var (
		revision int32
		created  bool
	)
	err = s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		type change struct {
			scheduleID string
			revision   int32
		}
		first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[change]{
			What: "schedule change",
			Insert: `INSERT INTO schedule_updates (schedule_id, revision, agent_id, idempotency_key, request_digest, create_ms)
				VALUES (?, ?, ?, ?, ?, ?)`,
			Args:       []any{next.GetId(), next.GetRevision(), by, call.KeyOrNil(), call.Digest, sqldb.Millis(next.GetUpdateTime())},
			Holders:    `SELECT schedule_id, revision, request_digest FROM schedule_updates WHERE agent_id = ? AND idempotency_key = ?`,
			HolderArgs: []any{by, call.KeyOrNil()},
			Scan: func(r sqldb.Scanner) (change, string, error) {
				var c change
				var digest string
				err := r.Scan(&c.scheduleID, &c.revision, &digest)
				return c, digest, err
			},
			Digest: call.Digest,
			New:    change{next.GetId(), next.GetRevision()},
		})
		if errors.Is(err, sqldb.ErrNotInserted) {
			return schedules.ErrStale // another change took this revision
		}
		if err != nil {
			return err
		}
		revision, created = first.revision, inserted
		if !inserted {
			return nil
		}
		changed, err := sqldb.Changed(ctx, tx, "change schedule", `UPDATE schedules SET description = ?, cron = ?, interval_seconds = ?,
			timezone = ?, tool = ?, arguments = ?, depth = ?, status = ?, spec_hash = ?, approval_workflow_id = ?,
			decided_by = '', decision_note = '', decide_ms = 0, paused_by = '', update_ms = ?, revision = ?
			WHERE id = ? AND status = ? AND spec_hash = ? AND revision = ?`,
			next.GetDescription(), next.GetCron(), next.GetIntervalSeconds(), next.GetTimezone(), next.GetAction().GetTool(), string(args),
			next.GetDepth(), int32(next.GetStatus()), next.GetSpecHash(), next.GetApprovalWorkflowId(), sqldb.Millis(next.GetUpdateTime()),
			next.GetRevision(), next.GetId(), int32(from.GetStatus()), from.GetSpecHash(), from.GetRevision())
		if err != nil {
			return err
		}
		if !changed {
			return schedules.ErrStale
		}
		return nil
	})
	if err != nil && !errors.Is(err, idempotency.ErrKeyReused) {
		return nil, 0, false, err
	}
	stored, gerr := s.Get(ctx, next.GetId())
	if gerr != nil {
		return nil, 0, false, gerr
	}
	return stored, revision, created, err
}

// Delete implements schedules.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM schedules WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	return nil
}

const execColumns = `run_id, schedule_id, scheduled_ms, start_ms, end_ms, status, domain_code, result, attempts`

// RecordExecution implements schedules.Store.
func (s *Store) RecordExecution(ctx context.Context, e *schedulesv1.Execution) (*schedulesv1.Execution, error) {
	result := ""
	if e.GetResult() != nil {
		b, err := protojson.Marshal(e.GetResult())
		if err != nil {
			return nil, fmt.Errorf("encode result: %w", err)
		}
		result = string(b)
	}
	// The WHERE keeps an ended run as it is: a late or repeated report
	// never reopens it.
	if _, err := s.db.Exec(ctx, `INSERT INTO schedule_executions (`+execColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET start_ms = excluded.start_ms, end_ms = excluded.end_ms, status = excluded.status,
			domain_code = excluded.domain_code, result = excluded.result, attempts = excluded.attempts
		WHERE schedule_executions.status = ? AND schedule_executions.schedule_id = excluded.schedule_id`,
		e.GetRunId(), e.GetScheduleId(), sqldb.Millis(e.GetScheduledTime()), sqldb.Millis(e.GetStartTime()), sqldb.Millis(e.GetEndTime()),
		int32(e.GetStatus()), e.GetDomainCode(), result, e.GetAttempts(),
		int32(schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)); err != nil {
		return nil, fmt.Errorf("record execution: %w", err)
	}
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+execColumns+` FROM schedule_executions WHERE run_id = ?`, e.GetRunId()),
		scanExecution, schedules.ErrNotFound)
}

// ListExecutions implements schedules.Store.
func (s *Store) ListExecutions(ctx context.Context, scheduleID string, offset, limit int) ([]*schedulesv1.Execution, int, error) {
	return sqldb.Page(ctx, s.db, sqldb.ListQuery{
		What: "executions", Columns: execColumns, From: "schedule_executions",
		Where: `schedule_id = ?`, Args: []any{scheduleID}, OrderBy: "scheduled_ms DESC, run_id DESC",
	}, offset, limit, scanExecution)
}

func scan(r sqldb.Scanner) (*schedulesv1.Schedule, error) {
	return scanRow(r)
}

// scanRow reads a row of columns, and of more columns into more.
func scanRow(r sqldb.Scanner, more ...any) (*schedulesv1.Schedule, error) {
	var (
		sch                          schedulesv1.Schedule
		action                       schedulesv1.Action
		args                         string
		interval, status, depth      int64
		decidedBy, note              string
		decideMS, createMS, updateMS int64
		revision                     int64
	)
	if err := r.Scan(append([]any{&sch.Id, &sch.AgentId, &sch.Description, &sch.Cron, &interval, &sch.Timezone, &action.Tool, &args,
		&status, &sch.SpecHash, &sch.ApprovalWorkflowId, &sch.TemporalScheduleId, &decidedBy, &note, &decideMS,
		&sch.PausedBy, &depth, &createMS, &updateMS, &revision}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read schedule: %w", err)
	}
	action.Arguments = &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(args), action.Arguments); err != nil {
		return nil, fmt.Errorf("read schedule %s arguments: %w", sch.Id, err)
	}
	sch.Action = &action
	sch.IntervalSeconds = int32(interval)
	sch.Status = schedulesv1.ScheduleStatus(status)
	sch.Depth = int32(depth)
	sch.Revision = int32(revision)
	if decideMS != 0 || decidedBy != "" {
		sch.Decision = &schedulesv1.Decision{DecidedBy: decidedBy, Note: note, DecideTime: sqldb.Timestamp(decideMS)}
	}
	sch.CreateTime = sqldb.Timestamp(createMS)
	sch.UpdateTime = sqldb.Timestamp(updateMS)
	return &sch, nil
}

func scanExecution(r sqldb.Scanner) (*schedulesv1.Execution, error) {
	var (
		e                                       schedulesv1.Execution
		scheduledMS, startMS, endMS, status, at int64
		result                                  string
	)
	if err := r.Scan(&e.RunId, &e.ScheduleId, &scheduledMS, &startMS, &endMS, &status, &e.DomainCode, &result, &at); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read execution: %w", err)
	}
	e.ScheduledTime = sqldb.Timestamp(scheduledMS)
	e.StartTime = sqldb.Timestamp(startMS)
	e.EndTime = sqldb.Timestamp(endMS)
	e.Status = schedulesv1.ExecutionStatus(status)
	e.Attempts = int32(at)
	if result != "" {
		e.Result = &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(result), e.Result); err != nil {
			return nil, fmt.Errorf("read execution %s result: %w", e.RunId, err)
		}
	}
	return &e, nil
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}
