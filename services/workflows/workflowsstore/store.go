// Package workflowsstore keeps agents' workflows, their versions and their
// runs in SQL: SQLite by default, PostgreSQL when the service is given a
// postgres:// DSN. Both run the same queries; the schemas live in
// migrations/<dialect>/. Definitions and run states are stored as protobuf
// JSON.
package workflowsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/services/workflows"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of workflows.Store.
type Store struct {
	db *sqldb.DB
}

var _ workflows.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "workflows", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

var (
	encode = protojson.MarshalOptions{UseProtoNames: true}
	decode = protojson.UnmarshalOptions{DiscardUnknown: true}
)

const workflowColumns = `w.id, w.agent_id, w.name, w.description, w.latest_version, w.create_ms, w.update_ms`

// CreateWorkflow implements workflows.Store, with sqldb.InsertOnce: the
// agent's idempotency key is the row's key.
func (s *Store) CreateWorkflow(ctx context.Context, w *workflowsv1.Workflow, call idempotency.Call) (*workflowsv1.Workflow, bool, error) {
	def, err := encode.Marshal(w.GetDefinition())
	if err != nil {
		return nil, false, fmt.Errorf("encode definition: %w", err)
	}
	var (
		out     *workflowsv1.Workflow
		created bool
	)
	err = s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[*workflowsv1.Workflow]{
			What: "workflow",
			Insert: `INSERT INTO workflows (id, agent_id, name, description, latest_version, create_ms, update_ms, idempotency_key, request_digest)
				VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?)`,
			Args: []any{w.GetWorkflowId(), w.GetAgentId(), w.GetName(), w.GetDescription(), sqldb.Millis(w.GetCreateTime()), sqldb.Millis(w.GetUpdateTime()),
				call.KeyOrNil(), call.Digest},
			Holders:    `SELECT ` + workflowColumns + `, w.request_digest FROM workflows w WHERE w.agent_id = ? AND w.idempotency_key = ?`,
			HolderArgs: []any{w.GetAgentId(), call.KeyOrNil()},
			Scan:       sqldb.DigestLast(scanWorkflowRow),
			Digest:     call.Digest,
			New:        w,
		})
		if errors.Is(err, sqldb.ErrNotInserted) {
			return workflows.ErrNameTaken
		}
		if err != nil || !inserted {
			out = first
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workflow_versions (workflow_id, version, definition_json, create_ms) VALUES (?, 1, ?, ?)`,
			w.GetWorkflowId(), string(def), sqldb.Millis(w.GetCreateTime())); err != nil {
			return fmt.Errorf("insert workflow version: %w", err)
		}
		out, created = w, true
		return nil
	})
	if errors.Is(err, idempotency.ErrKeyReused) {
		return out, false, err
	}
	if err != nil {
		return nil, false, err
	}
	if !created {
		// The first call's workflow, with its first version.
		out, err = s.GetWorkflow(ctx, out.GetWorkflowId(), 1)
	}
	return out, created, err
}

// GetWorkflow implements workflows.Store.
func (s *Store) GetWorkflow(ctx context.Context, id string, version int32) (*workflowsv1.Workflow, error) {
	return getWorkflow(ctx, s.db, id, version)
}

func getWorkflow(ctx context.Context, q sqldb.Querier, id string, version int32) (*workflowsv1.Workflow, error) {
	row := q.QueryRow(ctx, `SELECT `+workflowColumns+`, v.version, v.definition_json, v.create_ms
		FROM workflows w JOIN workflow_versions v ON v.workflow_id = w.id
		WHERE w.id = ? AND w.delete_ms = 0 AND v.version = CASE WHEN ? = 0 THEN w.latest_version ELSE ? END`, id, version, version)
	return sqldb.One(row, scanVersion, workflows.ErrNotFound)
}

// UpdateWorkflow implements workflows.Store: the new version is the latest
// plus one, written under the row's lock, so concurrent updates make
// consecutive versions.
func (s *Store) UpdateWorkflow(ctx context.Context, id string, expected int32, description *string, def *workflowsv1.Definition, at time.Time) (*workflowsv1.Workflow, error) {
	js, err := encode.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("encode definition: %w", err)
	}
	var out *workflowsv1.Workflow
	err = s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var latest int32
		err := tx.QueryRow(ctx, `UPDATE workflows SET latest_version = latest_version + 1, update_ms = ?,
			description = CASE WHEN ? THEN ? ELSE description END
			WHERE id = ? AND delete_ms = 0 RETURNING latest_version`,
			at.UnixMilli(), description != nil, ptrOr(description), id).Scan(&latest)
		if errors.Is(err, sql.ErrNoRows) {
			return workflows.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("update workflow: %w", err)
		}
		if expected != 0 && latest-1 != expected {
			return workflows.ErrVersionConflict
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workflow_versions (workflow_id, version, definition_json, create_ms) VALUES (?, ?, ?, ?)`,
			id, latest, string(js), at.UnixMilli()); err != nil {
			return fmt.Errorf("insert workflow version: %w", err)
		}
		out, err = getWorkflow(ctx, tx, id, latest)
		return err
	})
	return out, err
}

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ListWorkflows implements workflows.Store.
func (s *Store) ListWorkflows(ctx context.Context, agent string, offset, limit int) ([]*workflowsv1.Workflow, int, error) {
	q := sqldb.ListQuery{What: "workflows", Columns: workflowColumns, From: "workflows w", Where: "w.delete_ms = 0", OrderBy: "w.create_ms DESC, w.id DESC"}
	if agent != "" {
		q.And(`w.agent_id = ?`, agent)
	}
	list, total, err := sqldb.Page(ctx, s.db, q, offset, limit, scanWorkflow)
	for _, w := range list {
		w.Version = w.GetLatestVersion()
	}
	return list, total, err
}

// DeleteWorkflow implements workflows.Store.
func (s *Store) DeleteWorkflow(ctx context.Context, id string, at time.Time) (*workflowsv1.Workflow, error) {
	var out *workflowsv1.Workflow
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		w, err := getWorkflow(ctx, tx, id, 0)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE workflows SET delete_ms = ? WHERE id = ? AND delete_ms = 0`, at.UnixMilli(), id); err != nil {
			return fmt.Errorf("delete workflow: %w", err)
		}
		out = w
		return nil
	})
	return out, err
}

func scanWorkflow(r sqldb.Scanner) (*workflowsv1.Workflow, error) { return scanWorkflowRow(r) }

// scanWorkflowRow reads a row of workflowColumns, and of more columns into
// more.
func scanWorkflowRow(r sqldb.Scanner, more ...any) (*workflowsv1.Workflow, error) {
	var (
		w                  workflowsv1.Workflow
		createMS, updateMS int64
	)
	if err := r.Scan(append([]any{&w.WorkflowId, &w.AgentId, &w.Name, &w.Description, &w.LatestVersion, &createMS, &updateMS}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read workflow: %w", err)
	}
	w.CreateTime, w.UpdateTime = sqldb.Timestamp(createMS), sqldb.Timestamp(updateMS)
	return &w, nil
}

// scanVersion reads a workflow row joined with one of its versions: the
// workflow at that version (its update time is when the version was
// made).
func scanVersion(r sqldb.Scanner) (*workflowsv1.Workflow, error) {
	var (
		version   int32
		def       string
		versionMS int64
	)
	w, err := scanWorkflowRow(r, &version, &def, &versionMS)
	if err != nil {
		return nil, err
	}
	w.Version, w.UpdateTime, w.Definition = version, sqldb.Timestamp(versionMS), &workflowsv1.Definition{}
	if err := decode.Unmarshal([]byte(def), w.Definition); err != nil {
		return nil, fmt.Errorf("read definition: %w", err)
	}
	return w, nil
}

const runColumns = `id, workflow_id, version, workflow_name, agent_id, status, input_json, state_json, create_ms, update_ms, end_ms, deadline_ms, temporal_workflow_id`

// CreateRun implements workflows.Store, with sqldb.InsertOnce: the run's
// id (derived from the call's key) is its key.
func (s *Store) CreateRun(ctx context.Context, r *workflowsv1.Run, digest string) (*workflowsv1.Run, bool, error) {
	input, err := encode.Marshal(orEmpty(r.GetInput()))
	if err != nil {
		return nil, false, fmt.Errorf("encode input: %w", err)
	}
	state, err := encode.Marshal(stateOf(r))
	if err != nil {
		return nil, false, fmt.Errorf("encode run state: %w", err)
	}
	return sqldb.InsertOnce(ctx, s.db, sqldb.Once[*workflowsv1.Run]{
		What:   "run",
		Insert: `INSERT INTO runs (` + runColumns + `, request_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{r.GetRunId(), r.GetWorkflowId(), r.GetVersion(), r.GetWorkflowName(), r.GetAgentId(), int32(r.GetStatus()), string(input), string(state),
			sqldb.Millis(r.GetCreateTime()), sqldb.Millis(r.GetUpdateTime()), sqldb.Millis(r.GetEndTime()), sqldb.Millis(r.GetDeadline()), r.GetTemporalWorkflowId(), digest},
		Holders:    `SELECT ` + runColumns + `, request_digest FROM runs WHERE id = ?`,
		HolderArgs: []any{r.GetRunId()},
		Scan:       sqldb.DigestLast(scanRunRow),
		Digest:     digest,
		New:        r,
	})
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}

// stateOf is what a run's state_json holds: output, error and nodes.
func stateOf(r *workflowsv1.Run) *workflowsv1.RunOutcome {
	return &workflowsv1.RunOutcome{Output: r.GetOutput(), Error: r.GetError(), Nodes: r.GetNodes()}
}

// GetRun implements workflows.Store.
func (s *Store) GetRun(ctx context.Context, id string) (*workflowsv1.Run, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id), scanRun, workflows.ErrNotFound)
}

// ListRuns implements workflows.Store.
func (s *Store) ListRuns(ctx context.Context, agent, workflowID string, status workflowsv1.RunStatus, offset, limit int) ([]*workflowsv1.Run, int, error) {
	q := sqldb.ListQuery{What: "runs", Columns: runColumns, From: "runs", OrderBy: "create_ms DESC, id DESC"}
	if agent != "" {
		q.And(`agent_id = ?`, agent)
	}
	if workflowID != "" {
		q.And(`workflow_id = ?`, workflowID)
	}
	if status != workflowsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(status))
	}
	list, total, err := sqldb.Page(ctx, s.db, q, offset, limit, scanRun)
	for _, r := range list {
		r.Nodes = nil
	}
	return list, total, err
}

// ended are the statuses a run does not leave.
var ended = []any{int32(workflowsv1.RunStatus_RUN_STATUS_COMPLETED), int32(workflowsv1.RunStatus_RUN_STATUS_FAILED), int32(workflowsv1.RunStatus_RUN_STATUS_CANCELLED)}

// RecordRun implements workflows.Store.
func (s *Store) RecordRun(ctx context.Context, id string, o *workflowsv1.RunOutcome, at time.Time) (*workflowsv1.Run, bool, error) {
	state, err := encode.Marshal(&workflowsv1.RunOutcome{Output: o.GetOutput(), Error: o.GetError(), Nodes: o.GetNodes()})
	if err != nil {
		return nil, false, fmt.Errorf("encode run state: %w", err)
	}
	set, args := `status = ?, state_json = ?, update_ms = ?, end_ms = ?`, []any{int32(o.GetStatus()), string(state), at.UnixMilli(), sqldb.Millis(o.GetEndTime())}
	if o.GetDeadline() != nil {
		set, args = set+`, deadline_ms = ?`, append(args, sqldb.Millis(o.GetDeadline()))
	}
	return sqldb.Update(ctx, s.db, "record run", func(ctx context.Context) (*workflowsv1.Run, error) { return s.GetRun(ctx, id) },
		`UPDATE runs SET `+set+` WHERE id = ? AND status NOT IN (?, ?, ?)`, append(append(args, id), ended...)...)
}

// DeleteRun implements workflows.Store.
func (s *Store) DeleteRun(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM runs WHERE id = ? AND status NOT IN (?, ?, ?)`, append([]any{id}, ended...)...); err != nil {
		return fmt.Errorf("delete run: %w", err)
	}
	return nil
}

func scanRun(r sqldb.Scanner) (*workflowsv1.Run, error) { return scanRunRow(r) }

// scanRunRow reads a row of runColumns, and of more columns into more.
func scanRunRow(r sqldb.Scanner, more ...any) (*workflowsv1.Run, error) {
	var (
		run                                   workflowsv1.Run
		status                                int64
		input, state                          string
		createMS, updateMS, endMS, deadlineMS int64
	)
	if err := r.Scan(append([]any{&run.RunId, &run.WorkflowId, &run.Version, &run.WorkflowName, &run.AgentId, &status, &input, &state,
		&createMS, &updateMS, &endMS, &deadlineMS, &run.TemporalWorkflowId}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read run: %w", err)
	}
	run.Status = workflowsv1.RunStatus(status)
	run.Input = &structpb.Struct{}
	if err := decode.Unmarshal([]byte(input), run.Input); err != nil {
		return nil, fmt.Errorf("read run input: %w", err)
	}
	var o workflowsv1.RunOutcome
	if err := decode.Unmarshal([]byte(state), &o); err != nil {
		return nil, fmt.Errorf("read run state: %w", err)
	}
	run.Output, run.Error, run.Nodes = o.GetOutput(), o.GetError(), o.GetNodes()
	run.CreateTime, run.UpdateTime, run.EndTime, run.Deadline = sqldb.Timestamp(createMS), sqldb.Timestamp(updateMS), sqldb.Timestamp(endMS), sqldb.Timestamp(deadlineMS)
	return &run, nil
}
