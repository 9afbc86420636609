package remoteagentsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
)

// Inbound tasks keep a log of events (inbound_events): each change of a
// task's row and the events that say what changed are written in one
// transaction, and the row's version is the seq of its last event, so a
// snapshot of the task and the log never disagree, and a reader that has
// seen the events up to seq n reads the rest from any replica.

const inboundColumns = `task_id, context_id, agent_id, sender, a2a_message_id, message_id, thread_id, body, depth, status, answer, answer_message_id, create_ms, update_ms, version`

const (
	kindStatus = int32(inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS)
	kindAnswer = int32(inboundv1.InboundEventKind_INBOUND_EVENT_KIND_ANSWER)
)

// CreateInbound implements remoteagents.Store, with sqldb.InsertOnce: the
// row claims its sender's A2A message id, and a redelivery reads the task
// that holds it. The first event is written with the row.
func (s *Store) CreateInbound(ctx context.Context, in *remoteagentsv1.Inbound) (*remoteagentsv1.Inbound, bool, error) {
	var (
		stored  *remoteagentsv1.Inbound
		created bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		stored, created, err = sqldb.InsertOnce(ctx, tx, sqldb.Once[*remoteagentsv1.Inbound]{
			What:   "inbound task",
			Insert: `INSERT INTO inbound (` + inboundColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
			Args: []any{in.GetTaskId(), in.GetContextId(), in.GetAgentId(), in.GetSender(), in.GetA2AMessageId(), in.GetMessageId(), in.GetThreadId(),
				in.GetText(), in.GetDepth(), int32(in.GetStatus()), in.GetAnswer(), in.GetAnswerMessageId(),
				sqldb.Millis(in.GetCreateTime()), sqldb.Millis(in.GetUpdateTime())},
			Holders:    `SELECT ` + inboundColumns + ` FROM inbound WHERE sender = ? AND a2a_message_id = ?`,
			HolderArgs: []any{in.GetSender(), in.GetA2AMessageId()},
			Scan:       sqldb.NoDigest(scanInbound),
			New:        withVersion(in, 1),
		})
		if err != nil || !created {
			return err
		}
		return appendEvents(ctx, tx, in.GetTaskId(), 0, sqldb.Millis(in.GetCreateTime()), event{kindStatus, int32(in.GetStatus()), "", ""})
	})
	if err != nil {
		return nil, false, err
	}
	return stored, created, nil
}

func withVersion(in *remoteagentsv1.Inbound, v int64) *remoteagentsv1.Inbound {
	in.Version = v
	return in
}

// event is one row of a task's log, before it has a seq.
type event struct {
	kind, status    int32
	text, messageID string
}

// appendEvents writes evs after seq after, in order.
func appendEvents(ctx context.Context, tx *sqldb.Tx, taskID string, after, atMS int64, evs ...event) error {
	for i, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO inbound_events (task_id, seq, kind, status, text, message_id, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			taskID, after+int64(i)+1, e.kind, e.status, e.text, e.messageID, atMS); err != nil {
			return fmt.Errorf("append inbound event: %w", err)
		}
	}
	return nil
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

// EndInbound implements remoteagents.Store: the row moves only from
// working, and the events go with it.
func (s *Store) EndInbound(ctx context.Context, taskID string, status remoteagentsv1.InboundStatus, answer, answerMessageID string, at time.Time) (*remoteagentsv1.Inbound, bool, error) {
	var changed bool
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var version int64
		err := tx.QueryRow(ctx, `UPDATE inbound SET status = ?, answer = ?, answer_message_id = ?, update_ms = ?, version = version + ?
			WHERE task_id = ? AND status = ? RETURNING version`,
			int32(status), answer, answerMessageID, at.UnixMilli(), len(endEvents(status, answer, answerMessageID)),
			taskID, int32(remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING)).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("end inbound task: %w", err)
		}
		changed = true
		evs := endEvents(status, answer, answerMessageID)
		return appendEvents(ctx, tx, taskID, version-int64(len(evs)), at.UnixMilli(), evs...)
	})
	if err != nil {
		return nil, false, err
	}
	in, err := s.GetInbound(ctx, taskID)
	if err != nil {
		return nil, false, err
	}
	return in, changed, nil
}

// endEvents are the events of a task ending in status: an answer, then
// the status that carries it.
func endEvents(status remoteagentsv1.InboundStatus, answer, messageID string) []event {
	if status == remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED {
		return []event{{kindAnswer, int32(status), answer, messageID}, {kindStatus, int32(status), answer, messageID}}
	}
	return []event{{kindStatus, int32(status), "", ""}}
}

// ListInbound implements remoteagents.Store, by keyset over (update_ms,
// task_id), newest first.
func (s *Store) ListInbound(ctx context.Context, f remoteagents.InboundFilter) ([]*remoteagentsv1.Inbound, int, error) {
	where := `sender = ? AND agent_id = ?`
	args := []any{f.Sender, f.AgentID}
	if f.ContextID != "" {
		where += ` AND context_id = ?`
		args = append(args, f.ContextID)
	}
	if f.Status != remoteagentsv1.InboundStatus_INBOUND_STATUS_UNSPECIFIED {
		where += ` AND status = ?`
		args = append(args, int32(f.Status))
	}
	if !f.UpdatedAfter.IsZero() {
		where += ` AND update_ms >= ?`
		args = append(args, f.UpdatedAfter.UnixMilli())
	}
	var total int
	if err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM inbound WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count inbound tasks: %w", err)
	}
	page := where
	pageArgs := append([]any(nil), args...)
	if c := f.After; c != nil {
		page += ` AND (update_ms < ? OR (update_ms = ? AND task_id < ?))`
		pageArgs = append(pageArgs, c.UpdateMillis, c.UpdateMillis, c.TaskID)
	}
	pageArgs = append(pageArgs, f.Limit)
	list, err := sqldb.All(ctx, s.db, "list inbound tasks", scanInbound,
		`SELECT `+inboundColumns+` FROM inbound WHERE `+page+` ORDER BY update_ms DESC, task_id DESC LIMIT ?`, pageArgs...)
	if err != nil {
		return nil, 0, err
	}
	return list, total, nil
}

// InboundEvents implements remoteagents.Store.
func (s *Store) InboundEvents(ctx context.Context, taskID string, after int64, limit int) ([]*inboundv1.InboundEvent, error) {
	return sqldb.All(ctx, s.db, "list inbound events", scanEvent,
		`SELECT task_id, seq, kind, status, text, message_id, at_ms FROM inbound_events WHERE task_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		taskID, after, limit)
}

func scanEvent(r sqldb.Scanner) (*inboundv1.InboundEvent, error) {
	var (
		e            inboundv1.InboundEvent
		kind, status int32
		atMS         int64
	)
	if err := r.Scan(&e.TaskId, &e.Seq, &kind, &status, &e.Text, &e.MessageId, &atMS); err != nil {
		return nil, fmt.Errorf("read inbound event: %w", err)
	}
	e.Kind, e.Status, e.Time = inboundv1.InboundEventKind(kind), inboundv1.InboundStatus(status), sqldb.Timestamp(atMS)
	return &e, nil
}

func scanInbound(r sqldb.Scanner) (*remoteagentsv1.Inbound, error) {
	var (
		in                 remoteagentsv1.Inbound
		status             int32
		createMS, updateMS int64
	)
	if err := r.Scan(&in.TaskId, &in.ContextId, &in.AgentId, &in.Sender, &in.A2AMessageId, &in.MessageId, &in.ThreadId, &in.Text,
		&in.Depth, &status, &in.Answer, &in.AnswerMessageId, &createMS, &updateMS, &in.Version); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read inbound task: %w", err)
	}
	in.Status = remoteagentsv1.InboundStatus(status)
	in.CreateTime, in.UpdateTime = sqldb.Timestamp(createMS), sqldb.Timestamp(updateMS)
	return &in, nil
}

const pushColumns = `task_id, config_id, url, token, auth_scheme, auth_credentials, create_ms, delivered_seq`

// SavePushConfig implements remoteagents.Store: the config is sent the
// events after the task's version as it is saved.
func (s *Store) SavePushConfig(ctx context.Context, c *inboundv1.PushConfig) (*inboundv1.PushConfig, error) {
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM inbound_push_configs WHERE task_id = ? AND config_id = ?`, c.GetTaskId(), c.GetConfigId()); err != nil {
			return fmt.Errorf("replace push config: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO inbound_push_configs (`+pushColumns+`)
			SELECT ?, ?, ?, ?, ?, ?, ?, version FROM inbound WHERE task_id = ?`,
			c.GetTaskId(), c.GetConfigId(), c.GetUrl(), c.GetToken(), c.GetAuthScheme(), c.GetAuthCredentials(), sqldb.Millis(c.GetCreateTime()),
			c.GetTaskId())
		if err != nil {
			return fmt.Errorf("save push config: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.PushConfig(ctx, c.GetTaskId(), c.GetConfigId())
}

// PushConfig implements remoteagents.Store.
func (s *Store) PushConfig(ctx context.Context, taskID, configID string) (*inboundv1.PushConfig, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+pushColumns+` FROM inbound_push_configs WHERE task_id = ? AND config_id = ?`, taskID, configID),
		scanPushConfig, remoteagents.ErrNotFound)
}

// PushConfigs implements remoteagents.Store.
func (s *Store) PushConfigs(ctx context.Context, taskID string) ([]*inboundv1.PushConfig, error) {
	return sqldb.All(ctx, s.db, "list push configs", scanPushConfig,
		`SELECT `+pushColumns+` FROM inbound_push_configs WHERE task_id = ? ORDER BY create_ms, config_id`, taskID)
}

// DeletePushConfig implements remoteagents.Store.
func (s *Store) DeletePushConfig(ctx context.Context, taskID, configID string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM inbound_push_configs WHERE task_id = ? AND config_id = ?`, taskID, configID); err != nil {
		return fmt.Errorf("delete push config: %w", err)
	}
	return nil
}

// RecordPushDelivered implements remoteagents.Store.
func (s *Store) RecordPushDelivered(ctx context.Context, taskID, configID string, seq int64) error {
	if _, err := s.db.Exec(ctx, `UPDATE inbound_push_configs SET delivered_seq = ? WHERE task_id = ? AND config_id = ? AND delivered_seq < ?`,
		seq, taskID, configID, seq); err != nil {
		return fmt.Errorf("record push delivered: %w", err)
	}
	return nil
}

func scanPushConfig(r sqldb.Scanner) (*inboundv1.PushConfig, error) {
	var (
		c        inboundv1.PushConfig
		createMS int64
	)
	if err := r.Scan(&c.TaskId, &c.ConfigId, &c.Url, &c.Token, &c.AuthScheme, &c.AuthCredentials, &createMS, &c.DeliveredSeq); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read push config: %w", err)
	}
	c.CreateTime = sqldb.Timestamp(createMS)
	return &c, nil
}
