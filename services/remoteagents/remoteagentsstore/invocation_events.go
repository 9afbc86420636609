package remoteagentsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
)

// An invocation's events (invocation_events) are what its remote agent
// reported while it worked, each once by its key, numbered in the order
// they came; the invocation's row keeps the latest text (progress) and
// state, written in the same transaction.

const invEventColumns = `invocation_id, seq, remote_state, text, at_ms`

// AppendInvocationEvent implements remoteagents.Store.
func (s *Store) AppendInvocationEvent(ctx context.Context, e remoteagents.InvocationEventIn) (*remoteagentsv1.InvocationEvent, bool, error) {
	var (
		out      *remoteagentsv1.InvocationEvent
		appended bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM invocations WHERE id = ?`, e.InvocationID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return remoteagents.ErrNotFound
			}
			return fmt.Errorf("read invocation: %w", err)
		}
		prev, err := scanInvocationEvent(tx.QueryRow(ctx, `SELECT `+invEventColumns+` FROM invocation_events WHERE invocation_id = ? AND event_key = ?`,
			e.InvocationID, e.Key))
		if err == nil {
			out = prev
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var last int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM invocation_events WHERE invocation_id = ?`, e.InvocationID).Scan(&last); err != nil {
			return fmt.Errorf("read invocation events: %w", err)
		}
		out = &remoteagentsv1.InvocationEvent{InvocationId: e.InvocationID, Seq: last + 1, RemoteState: e.RemoteState, Text: e.Text,
			Time: sqldb.Timestamp(e.At.UnixMilli())}
		if _, err := tx.Exec(ctx, `INSERT INTO invocation_events (invocation_id, seq, event_key, remote_state, text, at_ms) VALUES (?, ?, ?, ?, ?, ?)`,
			e.InvocationID, out.Seq, e.Key, e.RemoteState, e.Text, e.At.UnixMilli()); err != nil {
			return fmt.Errorf("append invocation event: %w", err)
		}
		appended = true
		// A working invocation shows where the remote task is; one that
		// has ended keeps its outcome.
		if _, err := tx.Exec(ctx, `UPDATE invocations SET
			progress = COALESCE(NULLIF(CAST(? AS TEXT), ''), progress),
			remote_state = COALESCE(NULLIF(CAST(? AS TEXT), ''), remote_state),
			task_id = COALESCE(NULLIF(CAST(? AS TEXT), ''), task_id),
			context_id = COALESCE(NULLIF(CAST(? AS TEXT), ''), context_id)
			WHERE id = ? AND status = ?`,
			e.Text, e.RemoteState, e.TaskID, e.ContextID,
			e.InvocationID, int32(remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING)); err != nil {
			return fmt.Errorf("record invocation progress: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, appended, nil
}

// InvocationEvents implements remoteagents.Store.
func (s *Store) InvocationEvents(ctx context.Context, invocationID string, after int64, limit int) ([]*remoteagentsv1.InvocationEvent, error) {
	return sqldb.All(ctx, s.db, "list invocation events", scanInvocationEvent,
		`SELECT `+invEventColumns+` FROM invocation_events WHERE invocation_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		invocationID, after, limit)
}

func scanInvocationEvent(r sqldb.Scanner) (*remoteagentsv1.InvocationEvent, error) {
	var (
		e    remoteagentsv1.InvocationEvent
		atMS int64
	)
	if err := r.Scan(&e.InvocationId, &e.Seq, &e.RemoteState, &e.Text, &atMS); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read invocation event: %w", err)
	}
	e.Time = sqldb.Timestamp(atMS)
	return &e, nil
}
