// Package remoteagentsstore keeps the remoteagents domain's invocations and
// inbound tasks (with their event logs and push configs, inbound.go) in SQL: SQLite by default, PostgreSQL when the service is
// given a postgres:// DSN. Both run the same queries; the schemas live in
// migrations/<dialect>/.
package remoteagentsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of remoteagents.Store.
type Store struct {
	db *sqldb.DB
}

var _ remoteagents.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "remoteagents", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const invColumns = `id, agent_id, url, message, status, answer, task_id, context_id, remote_state, error, depth, workflow_id, create_ms, expire_ms, resolve_ms, protocol_version, protocol_binding, progress`

// CreateInvocation implements remoteagents.Store, with sqldb.InsertOnce:
// the row claims its id, and a retry reads the invocation that holds it.
func (s *Store) CreateInvocation(ctx context.Context, inv *remoteagentsv1.Invocation) (*remoteagentsv1.Invocation, bool, error) {
	return sqldb.InsertOnce(ctx, s.db, sqldb.Once[*remoteagentsv1.Invocation]{
		What:   "invocation",
		Insert: `INSERT INTO invocations (` + invColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{inv.GetInvocationId(), inv.GetAgentId(), inv.GetUrl(), inv.GetMessage(), int32(inv.GetStatus()), inv.GetAnswer(), inv.GetTaskId(),
			inv.GetContextId(), inv.GetRemoteState(), inv.GetError(), inv.GetDepth(), inv.GetWorkflowId(),
			sqldb.Millis(inv.GetCreateTime()), sqldb.Millis(inv.GetExpireTime()), sqldb.Millis(inv.GetResolveTime()),
			inv.GetProtocolVersion(), inv.GetProtocolBinding(), inv.GetProgress()},
		Holders:    `SELECT ` + invColumns + ` FROM invocations WHERE id = ?`,
		HolderArgs: []any{inv.GetInvocationId()},
		Scan:       sqldb.NoDigest(scanInvocation),
		New:        inv,
	})
}

// GetInvocation implements remoteagents.Store.
func (s *Store) GetInvocation(ctx context.Context, id string) (*remoteagentsv1.Invocation, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+invColumns+` FROM invocations WHERE id = ?`, id), scanInvocation, remoteagents.ErrNotFound)
}

// ListInvocations implements remoteagents.Store.
func (s *Store) ListInvocations(ctx context.Context, agent string, status remoteagentsv1.InvocationStatus, offset, limit int) ([]*remoteagentsv1.Invocation, int, error) {
	q := sqldb.ListQuery{What: "invocations", Columns: invColumns, From: "invocations", OrderBy: "create_ms DESC, id DESC"}
	if agent != "" {
		q.And(`agent_id = ?`, agent)
	}
	if status != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(status))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scanInvocation)
}

// ResolveInvocation implements remoteagents.Store.
func (s *Store) ResolveInvocation(ctx context.Context, id string, o *remoteagentsv1.InvokeOutcome) (*remoteagentsv1.Invocation, bool, error) {
	return sqldb.Update(ctx, s.db, "resolve invocation", func(ctx context.Context) (*remoteagentsv1.Invocation, error) { return s.GetInvocation(ctx, id) },
		`UPDATE invocations SET status = ?, answer = ?, task_id = ?, context_id = ?, remote_state = ?, error = ?, resolve_ms = ?,
		protocol_version = ?, protocol_binding = ? WHERE id = ? AND status = ?`,
		int32(o.GetStatus()), o.GetAnswer(), o.GetTaskId(), o.GetContextId(), o.GetRemoteState(), o.GetError(), sqldb.Millis(o.GetResolveTime()),
		o.GetProtocolVersion(), o.GetProtocolBinding(),
		id, int32(remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING))
}

// ExtendInvocation implements remoteagents.Store.
func (s *Store) ExtendInvocation(ctx context.Context, id string, expire time.Time) (*remoteagentsv1.Invocation, bool, error) {
	return sqldb.Update(ctx, s.db, "extend invocation", func(ctx context.Context) (*remoteagentsv1.Invocation, error) { return s.GetInvocation(ctx, id) },
		`UPDATE invocations SET expire_ms = ? WHERE id = ? AND status = ? AND expire_ms < ?`,
		expire.UnixMilli(), id, int32(remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING), expire.UnixMilli())
}

// DeleteInvocation implements remoteagents.Store.
func (s *Store) DeleteInvocation(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM invocations WHERE id = ? AND status = ?`,
		id, int32(remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING)); err != nil {
		return fmt.Errorf("delete invocation: %w", err)
	}
	return nil
}

func scanInvocation(r sqldb.Scanner) (*remoteagentsv1.Invocation, error) {
	var (
		inv                           remoteagentsv1.Invocation
		status                        int32
		createMS, expireMS, resolveMS int64
	)
	if err := r.Scan(&inv.InvocationId, &inv.AgentId, &inv.Url, &inv.Message, &status, &inv.Answer, &inv.TaskId, &inv.ContextId,
		&inv.RemoteState, &inv.Error, &inv.Depth, &inv.WorkflowId, &createMS, &expireMS, &resolveMS, &inv.ProtocolVersion, &inv.ProtocolBinding, &inv.Progress); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read invocation: %w", err)
	}
	inv.Status = remoteagentsv1.InvocationStatus(status)
	inv.CreateTime, inv.ExpireTime, inv.ResolveTime = sqldb.Timestamp(createMS), sqldb.Timestamp(expireMS), sqldb.Timestamp(resolveMS)
	return &inv, nil
}
