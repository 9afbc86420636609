// Package eventlogstore keeps the event log in SQL: SQLite by default,
// PostgreSQL when the service is given a postgres:// DSN.
package eventlogstore

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/eventlog"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of eventlog.Store.
type Store struct{ db *sqldb.DB }

var _ eventlog.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "eventlog", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// recordLockKey names the PostgreSQL advisory lock that serialises
// Record's transactions ("toolevnt" in ASCII): sequence numbers are then
// committed in order, so a reader never sees a number before a smaller one.
// SQLite's writers are serialised already.
const recordLockKey int64 = 0x746f6f6c65766e74

// Record implements eventlog.Store.
func (s *Store) Record(ctx context.Context, evs []*eventlog.Recorded) (int, error) {
	n := 0
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		n = 0
		if s.db.Dialect == sqldb.Postgres {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(?)`, recordLockKey); err != nil {
				return fmt.Errorf("lock the log: %w", err)
			}
		}
		for _, e := range evs {
			added, err := sqldb.Changed(ctx, tx, "record event",
				`INSERT INTO events (event_id, name, agent_id, payload, data, time_ms, record_ms) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (event_id) DO NOTHING`,
				e.ID, e.Name, e.Agent, e.Payload, e.Data, e.Time.UnixMilli(), e.Recorded.UnixMilli())
			if err != nil {
				return err
			}
			if added {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Read implements eventlog.Store, in one snapshot of the log.
func (s *Store) Read(ctx context.Context, q eventlog.Query) (eventlog.Page, error) {
	var p eventlog.Page
	err := s.db.InSnapshot(ctx, func(tx *sqldb.Tx) error {
		p = eventlog.Page{}
		if err := tx.QueryRow(ctx, `SELECT pruned_through FROM events_log WHERE id = 1`).Scan(&p.PrunedThrough); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		var last int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&last); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		last = max(last, p.PrunedThrough)
		where := []string{`name = ?`, `seq > ?`}
		args := []any{q.Name, q.After}
		if q.Agent != "" {
			where, args = append(where, `agent_id = ?`), append(args, q.Agent)
		}
		if !q.Since.IsZero() {
			where, args = append(where, `time_ms >= ?`), append(args, q.Since.UnixMilli())
		}
		rows, err := tx.Query(ctx, `SELECT seq, event_id, name, agent_id, payload, data, time_ms, record_ms FROM events WHERE `+
			strings.Join(where, " AND ")+` ORDER BY seq LIMIT ?`, append(args, q.Limit)...)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e             eventlog.Recorded
				timeMS, recMS int64
			)
			if err := rows.Scan(&e.Seq, &e.ID, &e.Name, &e.Agent, &e.Payload, &e.Data, &timeMS, &recMS); err != nil {
				return fmt.Errorf("read event: %w", err)
			}
			e.Time, e.Recorded = time.UnixMilli(timeMS).UTC(), time.UnixMilli(recMS).UTC()
			p.Events = append(p.Events, &e)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		p.Full = len(p.Events) >= q.Limit
		p.End = max(last, q.After)
		if p.Full {
			p.End = p.Events[len(p.Events)-1].Seq
		}
		return nil
	})
	return p, err
}

// End implements eventlog.Store.
func (s *Store) End(ctx context.Context) (int64, error) {
	var end int64
	if err := s.db.QueryRow(ctx, `SELECT MAX(x) FROM (SELECT COALESCE(MAX(seq), 0) AS x FROM events UNION ALL SELECT pruned_through AS x FROM events_log) AS ends`).Scan(&end); err != nil {
		return 0, fmt.Errorf("read the log's end: %w", err)
	}
	return end, nil
}

// Prune implements eventlog.Store.
func (s *Store) Prune(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var through int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE record_ms < ?`, before.UnixMilli()).Scan(&through); err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		if through == 0 {
			return nil
		}
		res, err := tx.Exec(ctx, `DELETE FROM events WHERE seq <= ?`, through)
		if err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		m, _ := res.RowsAffected()
		n = int(m)
		if _, err := tx.Exec(ctx, `UPDATE events_log SET pruned_through = ? WHERE id = 1 AND pruned_through < ?`, through, through); err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		return nil
	})
	return n, err
}

// Has implements eventlog.Store.
func (s *Store) Has(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, id := range ids {
		var n int
		if err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM events WHERE event_id = ?`, id).Scan(&n); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		out[id] = n > 0
	}
	return out, nil
}
