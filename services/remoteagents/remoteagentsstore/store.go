// Package remoteagentsstore keeps the remoteagents domain's invocations and
// inbound tasks in SQL: SQLite by default, PostgreSQL when the service is
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

const invColumns = `id, agent_id, url, message, status, answer, task_id, context_id, remote_state, error, depth, workflow_id, create_ms, expire_ms, resolve_ms`

// CreateInvocation implements remoteagents.Store, with sqldb.InsertOnce:
// the row claims its id, and a retry reads the invocation that holds it.
func (s *Store) CreateInvocation(ctx context.Context, inv *remoteagentsv1.Invocation) (*remoteagentsv1.Invocation, bool, error) {
	return sqldb.InsertOnce(ctx, s.db, sqldb.Once[*remoteagentsv1.Invocation]{
		What:   "invocation",
		Insert: `INSERT INTO invocations (` + invColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{inv.GetInvocationId(), inv.GetAgentId(), inv.GetUrl(), inv.GetMessage(), int32(inv.GetStatus()), inv.GetAnswer(), inv.GetTaskId(),
			inv.GetContextId(), inv.GetRemoteState(), inv.GetError(), inv.GetDepth(), inv.GetWorkflowId(),
			sqldb.Millis(inv.GetCreateTime()), sqldb.Millis(inv.GetExpireTime()), sqldb.Millis(inv.GetResolveTime())},
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

// ResolveInvocation implements remoteagents.Store.
func (s *Store) ResolveInvocation(ctx context.Context, id string, o *remoteagentsv1.InvokeOutcome) (*remoteagentsv1.Invocation, bool, error) {
	return sqldb.Update(ctx, s.db, "resolve invocation", func(ctx context.Context) (*remoteagentsv1.Invocation, error) { return s.GetInvocation(ctx, id) },
		`UPDATE invocations SET status = ?, answer = ?, task_id = ?, context_id = ?, remote_state = ?, error = ?, resolve_ms = ?
		WHERE id = ? AND status = ?`,
		int32(o.GetStatus()), o.GetAnswer(), o.GetTaskId(), o.GetContextId(), o.GetRemoteState(), o.GetError(), sqldb.Millis(o.GetResolveTime()),
		id, int32(remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING))
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
		&inv.RemoteState, &inv.Error, &inv.Depth, &inv.WorkflowId, &createMS, &expireMS, &resolveMS); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read invocation: %w", err)
	}
	inv.Status = remoteagentsv1.InvocationStatus(status)
	inv.CreateTime, inv.ExpireTime, inv.ResolveTime = sqldb.Timestamp(createMS), sqldb.Timestamp(expireMS), sqldb.Timestamp(resolveMS)
	return &inv, nil
}

const inboundColumns = `task_id, context_id, agent_id, sender, a2a_message_id, message_id, thread_id, body, depth, status, answer, answer_message_id, create_ms, update_ms`

// CreateInbound implements remoteagents.Store, with sqldb.InsertOnce: the
// row claims its sender's A2A message id, and a redelivery reads the task
// that holds it.
func (s *Store) CreateInbound(ctx context.Context, in *remoteagentsv1.Inbound) (*remoteagentsv1.Inbound, bool, error) {
	return sqldb.InsertOnce(ctx, s.db, sqldb.Once[*remoteagentsv1.Inbound]{
		What:   "inbound task",
		Insert: `INSERT INTO inbound (` + inboundColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{in.GetTaskId(), in.GetContextId(), in.GetAgentId(), in.GetSender(), in.GetA2AMessageId(), in.GetMessageId(), in.GetThreadId(),
			in.GetText(), in.GetDepth(), int32(in.GetStatus()), in.GetAnswer(), in.GetAnswerMessageId(),
			sqldb.Millis(in.GetCreateTime()), sqldb.Millis(in.GetUpdateTime())},
		Holders:    `SELECT ` + inboundColumns + ` FROM inbound WHERE sender = ? AND a2a_message_id = ?`,
		HolderArgs: []any{in.GetSender(), in.GetA2AMessageId()},
		Scan:       sqldb.NoDigest(scanInbound),
		New:        in,
	})
}

// InboundByMessage implements remoteagents.Store.
func (s *Store) InboundByMessage(ctx context.Context, sender, a2aMessageID string) (*remoteagentsv1.Inbound, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+inboundColumns+` FROM inbound WHERE sender = ? AND a2a_message_id = ?`,
		sender, a2aMessageID), scanInbound, remoteagents.ErrNotFound)
}

// GetInbound implements remoteagents.Store.
func (s *Store) GetInbound(ctx context.Context, taskID string) (*remoteagentsv1.Inbound, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+inboundColumns+` FROM inbound WHERE task_id = ?`, taskID),
		scanInbound, remoteagents.ErrNotFound)
}

// EndInbound implements remoteagents.Store.
func (s *Store) EndInbound(ctx context.Context, taskID string, status remoteagentsv1.InboundStatus, answer, answerMessageID string, at time.Time) (*remoteagentsv1.Inbound, bool, error) {
	return sqldb.Update(ctx, s.db, "end inbound task", func(ctx context.Context) (*remoteagentsv1.Inbound, error) { return s.GetInbound(ctx, taskID) },
		`UPDATE inbound SET status = ?, answer = ?, answer_message_id = ?, update_ms = ? WHERE task_id = ? AND status = ?`,
		int32(status), answer, answerMessageID, at.UnixMilli(), taskID, int32(remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING))
}

func scanInbound(r sqldb.Scanner) (*remoteagentsv1.Inbound, error) {
	var (
		in                 remoteagentsv1.Inbound
		status             int32
		createMS, updateMS int64
	)
	if err := r.Scan(&in.TaskId, &in.ContextId, &in.AgentId, &in.Sender, &in.A2AMessageId, &in.MessageId, &in.ThreadId, &in.Text,
		&in.Depth, &status, &in.Answer, &in.AnswerMessageId, &createMS, &updateMS); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read inbound task: %w", err)
	}
	in.Status = remoteagentsv1.InboundStatus(status)
	in.CreateTime, in.UpdateTime = sqldb.Timestamp(createMS), sqldb.Timestamp(updateMS)
	return &in, nil
}
