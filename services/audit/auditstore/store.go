// Package auditstore keeps the audit trail in SQL: SQLite by default,
// PostgreSQL when the service is given a postgres:// DSN. Both run the same
// queries; the schemas live in migrations/<dialect>/.
//
// Appends are serialised by the row lock of the one-row audit_head table:
// each append first bumps the head's sequence number (which waits for any
// other append in flight to commit), then writes the record and the new head
// hash in the same transaction.
package auditstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"iter"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of audit.Store.
type Store struct {
	db *sqldb.DB
}

var _ audit.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "audit", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// Existing returns a store over a database the audit service made, without
// touching its schema: what an offline verify reads (db may be read-only).
func Existing(db *sqldb.DB) *Store { return &Store{db: db} }

const columns = `seq, time_ms, actor, tool, reason, args_digest, outcome, call_id, prev_hash, hash, replay_of`

// errReplay rolls back an append whose call id is already recorded.
var errReplay = errors.New("call already recorded")

// Append implements audit.Store.
func (s *Store) Append(ctx context.Context, callID string, seal func(seq int64, prevHash string) (*auditv1.Record, error)) (*auditv1.Record, bool, error) {
	var out *auditv1.Record
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		// Taking the head's row lock first serialises appends: a concurrent
		// append waits here until this one commits, then sees its head.
		var (
			seq  int64
			prev string
		)
		err := tx.QueryRow(ctx, `UPDATE audit_head SET seq = seq + 1 WHERE id = 1 RETURNING seq, hash`).Scan(&seq, &prev)
		if errors.Is(err, sql.ErrNoRows) {
			return audit.ErrHeadMissing
		}
		if err != nil {
			return fmt.Errorf("lock audit head: %w", err)
		}
		first, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM audit_records WHERE call_id = ?`, callID))
		if err == nil {
			out = first
			return errReplay
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		r, err := seal(seq, prev)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_records (`+columns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.GetSeq(), r.GetTime().AsTime().UnixMilli(), r.GetActor(), r.GetTool(), r.GetReason(), r.GetArgsDigest(),
			int32(r.GetOutcome()), r.GetCallId(), r.GetPrevHash(), r.GetHash(), r.GetReplayOf()); err != nil {
			if sqldb.IsUniqueViolation(err) {
				return fmt.Errorf("%w (record %d)", audit.ErrChainConflict, seq)
			}
			return fmt.Errorf("insert audit record: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE audit_head SET hash = ? WHERE id = 1`, r.GetHash()); err != nil {
			return fmt.Errorf("move audit head: %w", err)
		}
		out = r
		return nil
	})
	if errors.Is(err, errReplay) {
		return out, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// List implements audit.Store.
func (s *Store) List(ctx context.Context, f audit.Filter, offset, limit int) ([]*auditv1.Record, int, error) {
	q := sqldb.ListQuery{What: "audit records", Columns: columns, From: `audit_records`, OrderBy: `seq DESC`}
	if f.Actor != "" {
		q.And(`actor = ?`, f.Actor)
	}
	if f.Tool != "" {
		q.And(`tool = ?`, f.Tool)
	}
	if !f.Since.IsZero() {
		q.And(`time_ms >= ?`, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		q.And(`time_ms < ?`, f.Until.UnixMilli())
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scan)
}

// Head implements audit.Store.
func (s *Store) Head(ctx context.Context) (*auditv1.Checkpoint, error) {
	var h auditv1.Checkpoint
	row := s.db.QueryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`)
	if err := row.Scan(&h.Seq, &h.Hash); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, audit.ErrHeadMissing
		}
		return nil, fmt.Errorf("read audit head: %w", err)
	}
	return &h, nil
}

// Walk implements audit.Store. The head and the records come from one
// read-only transaction, so appends committed meanwhile are not half seen.
func (s *Store) Walk(ctx context.Context, from int64, visit func(head *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error) error {
	return s.db.InSnapshot(ctx, func(tx *sqldb.Tx) error {
		var head *auditv1.Checkpoint
		var h auditv1.Checkpoint
		switch err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`).Scan(&h.Seq, &h.Hash); {
		case err == nil:
			head = &h
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read audit head: %w", err)
		}
		records := func(yield func(*auditv1.Record, error) bool) {
			rows, err := tx.Query(ctx, `SELECT `+columns+` FROM audit_records WHERE seq >= ? ORDER BY seq`, from)
			if err != nil {
				yield(nil, fmt.Errorf("read audit records: %w", err))
				return
			}
			defer rows.Close()
			for rows.Next() {
				r, err := scan(rows)
				if !yield(r, err) || err != nil {
					return
				}
			}
			if err := rows.Err(); err != nil {
				yield(nil, fmt.Errorf("read audit records: %w", err))
			}
		}
		return visit(head, records)
	})
}

func scan(row sqldb.Scanner) (*auditv1.Record, error) {
	var (
		r       auditv1.Record
		timeMS  int64
		outcome int64
	)
	if err := row.Scan(&r.Seq, &timeMS, &r.Actor, &r.Tool, &r.Reason, &r.ArgsDigest, &outcome, &r.CallId, &r.PrevHash, &r.Hash, &r.ReplayOf); err != nil {
		return nil, fmt.Errorf("read audit record: %w", err)
	}
	r.Time = sqldb.Timestamp(timeMS)
	r.Outcome = auditv1.Outcome(outcome)
	return &r, nil
}
