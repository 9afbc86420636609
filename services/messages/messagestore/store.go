// Package messagestore keeps messages in SQL: SQLite by default, PostgreSQL
// when the service is given a postgres:// DSN. Both run the same queries; the
// schemas live in migrations/<dialect>/.
package messagestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/services/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
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

// Send implements messages.Store.
func (s *Store) Send(ctx context.Context, m *messagesv1.Message, dedupKey string, after time.Time, idempotencyKey string) (*messagesv1.Message, bool, error) {
	var (
		out *messagesv1.Message
		dup bool
	)
	byKey := `SELECT ` + columns + ` FROM messages WHERE from_agent = ? AND idempotency_key = ?`
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		out, dup = nil, false
		// sentBefore finds the message an earlier send with this key stored.
		sentBefore := func() (bool, error) {
			if idempotencyKey == "" {
				return false, nil
			}
			prev, err := sqldb.One(tx.QueryRowContext(ctx, s.db.Rebind(byKey), m.GetFromAgent(), idempotencyKey), scan, messages.ErrNotFound)
			if errors.Is(err, messages.ErrNotFound) {
				return false, nil
			}
			out = prev
			return err == nil, err
		}
		if found, err := sentBefore(); found || err != nil {
			return err
		}
		// Claim the dedup slot: the upsert writes (and returns a row) only
		// when there is no slot yet or its message is not after the cutoff.
		var claimed string
		err := tx.QueryRowContext(ctx, s.db.Rebind(`INSERT INTO message_dedup (from_agent, to_agent, dedup_key, message_id, create_ms) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (from_agent, to_agent, dedup_key) DO UPDATE SET message_id = excluded.message_id, create_ms = excluded.create_ms
			WHERE message_dedup.create_ms <= ?
			RETURNING message_id`),
			m.GetFromAgent(), m.GetToAgent(), dedupKey, m.GetId(), m.GetCreateTime().AsTime().UnixMilli(), after.UnixMilli()).Scan(&claimed)
		if errors.Is(err, sql.ErrNoRows) {
			// The slot is taken. If by this send's own first attempt, which
			// committed after the check above (PostgreSQL lets the upsert
			// wait for it; SQLite runs the two one after the other), this is
			// a retry: answer as the first attempt did, not as a duplicate.
			if found, err := sentBefore(); found || err != nil {
				return err
			}
			orig, err := sqldb.One(tx.QueryRowContext(ctx, s.db.Rebind(`SELECT `+columns+` FROM messages WHERE id = (
				SELECT message_id FROM message_dedup WHERE from_agent = ? AND to_agent = ? AND dedup_key = ?)`),
				m.GetFromAgent(), m.GetToAgent(), dedupKey), scan, messages.ErrNotFound)
			if err != nil {
				return fmt.Errorf("read original message: %w", err)
			}
			out, dup = orig, true
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim dedup slot: %w", err)
		}
		var key any
		if idempotencyKey != "" {
			key = idempotencyKey
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO messages (`+columns+`, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			m.GetId(), m.GetThreadId(), m.GetFromAgent(), m.GetToAgent(), m.GetText(), m.GetCreateTime().AsTime().UnixMilli(), m.GetDepth(), key); err != nil {
			return fmt.Errorf("insert message: %w", err)
		}
		out = m
		return nil
	})
	if err != nil && sqldb.IsUniqueViolation(err) && idempotencyKey != "" {
		// A concurrent send with the same key won; return its message.
		prev, err := sqldb.One(s.db.QueryRowContext(ctx, s.db.Rebind(byKey), m.GetFromAgent(), idempotencyKey), scan, messages.ErrNotFound)
		return prev, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return out, dup, nil
}

// Get implements messages.Store.
func (s *Store) Get(ctx context.Context, id string) (*messagesv1.Message, error) {
	return sqldb.One(s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT `+columns+` FROM messages WHERE id = ?`), id), scan, messages.ErrNotFound)
}

// InThread implements messages.Store.
func (s *Store) InThread(ctx context.Context, threadID, agent string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT COUNT(*) FROM (SELECT 1 FROM messages
		WHERE thread_id = ? AND (from_agent = ? OR to_agent = ?) LIMIT 1) AS hit`), threadID, agent, agent).Scan(&n)
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
	var (
		m        messagesv1.Message
		createMS int64
	)
	if err := r.Scan(&m.Id, &m.ThreadId, &m.FromAgent, &m.ToAgent, &m.Text, &createMS, &m.Depth); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read message: %w", err)
	}
	m.CreateTime = timestamppb.New(time.UnixMilli(createMS).UTC())
	return &m, nil
}
