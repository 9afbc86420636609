// Package messagesstore keeps messages in SQL: SQLite by default, PostgreSQL
// when the service is given a postgres:// DSN. Both run the same queries; the
// schemas live in migrations/<dialect>/.
package messagesstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/services/messages"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of messages.Store.
type Store struct {
	db *sqldb.DB
}

var _ messages.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "messages", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, thread_id, from_agent, to_agent, body, create_ms, depth`

// Send implements messages.Store. A keyed send first claims its key in
// message_keys (sqldb.InsertOnce), which records what the send answered:
// the message it stored, or the earlier one it was suppressed as a
// duplicate of. A retry waits for the claim and answers the same.
func (s *Store) Send(ctx context.Context, m *messagesv1.Message, dedupKey string, after time.Time, call idempotency.Call) (messages.Sent, error) {
	var out messages.Sent
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		if call.Key != "" {
			first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[messages.Sent]{
				What:   "message key",
				Insert: `INSERT INTO message_keys (from_agent, idempotency_key, request_digest, message_id, duplicate) VALUES (?, ?, ?, ?, ?)`,
				Args:   []any{m.GetFromAgent(), call.Key, call.Digest, m.GetId(), false},
				Holders: `SELECT m.id, m.thread_id, m.from_agent, m.to_agent, m.body, m.create_ms, m.depth, k.duplicate, k.request_digest
					FROM message_keys k JOIN messages m ON m.id = k.message_id WHERE k.from_agent = ? AND k.idempotency_key = ?`,
				HolderArgs: []any{m.GetFromAgent(), call.Key},
				Scan: func(r sqldb.Scanner) (messages.Sent, string, error) {
					sent := messages.Sent{Replayed: true}
					var digest string
					msg, err := scanRow(r, &sent.Duplicate, &digest)
					sent.Message = msg
					return sent, digest, err
				},
				Digest: call.Digest,
			})
			out = first
			if err != nil || !inserted {
				return err
			}
		}
		// Claim the dedup slot: the upsert writes (and returns a row) only
		// when there is no slot yet or its message is not after the cutoff.
		var claimed string
		err := tx.QueryRow(ctx, `INSERT INTO message_dedup (from_agent, to_agent, dedup_key, message_id, create_ms) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (from_agent, to_agent, dedup_key) DO UPDATE SET message_id = excluded.message_id, create_ms = excluded.create_ms
			WHERE message_dedup.create_ms <= ?
			RETURNING message_id`,
			m.GetFromAgent(), m.GetToAgent(), dedupKey, m.GetId(), m.GetCreateTime().AsTime().UnixMilli(), after.UnixMilli()).Scan(&claimed)
		if errors.Is(err, sql.ErrNoRows) {
			orig, err := sqldb.One(tx.QueryRow(ctx, `SELECT `+columns+` FROM messages WHERE id = (
				SELECT message_id FROM message_dedup WHERE from_agent = ? AND to_agent = ? AND dedup_key = ?)`,
				m.GetFromAgent(), m.GetToAgent(), dedupKey), scan, messages.ErrNotFound)
			if err != nil {
				return fmt.Errorf("read original message: %w", err)
			}
			if call.Key != "" {
				if _, err := tx.Exec(ctx, `UPDATE message_keys SET message_id = ?, duplicate = ? WHERE from_agent = ? AND idempotency_key = ?`,
					orig.GetId(), true, m.GetFromAgent(), call.Key); err != nil {
					return fmt.Errorf("record the duplicate under its key: %w", err)
				}
			}
			out = messages.Sent{Message: orig, Duplicate: true}
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim dedup slot: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO messages (`+columns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			m.GetId(), m.GetThreadId(), m.GetFromAgent(), m.GetToAgent(), m.GetText(), m.GetCreateTime().AsTime().UnixMilli(), m.GetDepth()); err != nil {
			return fmt.Errorf("insert message: %w", err)
		}
		out = messages.Sent{Message: m}
		return nil
	})
	if errors.Is(err, idempotency.ErrKeyReused) {
		return out, err
	}
	if err != nil {
		return messages.Sent{}, err
	}
	return out, nil
}

// Get implements messages.Store.
func (s *Store) Get(ctx context.Context, id string) (*messagesv1.Message, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM messages WHERE id = ?`, id), scan, messages.ErrNotFound)
}

// InThread implements messages.Store.
func (s *Store) InThread(ctx context.Context, threadID, agent string) (bool, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM messages
		WHERE thread_id = ? AND (from_agent = ? OR to_agent = ?) LIMIT 1) AS hit`, threadID, agent, agent).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up thread: %w", err)
	}
	return n > 0, nil
}

// Inbox implements messages.Store.
func (s *Store) Inbox(ctx context.Context, agent string, offset, limit int) ([]*messagesv1.Message, int, error) {
	return sqldb.Page(ctx, s.db, newest(`to_agent = ?`, agent), offset, limit, scan)
}

// Thread implements messages.Store.
func (s *Store) Thread(ctx context.Context, threadID, agent string, offset, limit int) ([]*messagesv1.Message, int, error) {
	return sqldb.Page(ctx, s.db, newest(`thread_id = ? AND (from_agent = ? OR to_agent = ?)`, threadID, agent, agent), offset, limit, scan)
}

// newest lists the messages that meet where, newest first.
func newest(where string, args ...any) sqldb.ListQuery {
	return sqldb.ListQuery{What: "messages", Columns: columns, From: `messages`, Where: where, Args: args, OrderBy: `create_ms DESC, id DESC`}
}

func scan(r sqldb.Scanner) (*messagesv1.Message, error) {
	return scanRow(r)
}

// scanRow reads a row of columns, and of more columns into more.
func scanRow(r sqldb.Scanner, more ...any) (*messagesv1.Message, error) {
	var (
		m        messagesv1.Message
		createMS int64
	)
	if err := r.Scan(append([]any{&m.Id, &m.ThreadId, &m.FromAgent, &m.ToAgent, &m.Text, &createMS, &m.Depth}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read message: %w", err)
	}
	m.CreateTime = sqldb.Timestamp(createMS)
	return &m, nil
}
