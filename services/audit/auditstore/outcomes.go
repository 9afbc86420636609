package auditstore

import (
	"context"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
)

var _ audit.OutcomeStore = (*Store)(nil)

// RecordOutcomes implements audit.OutcomeStore: one transaction, an
// outcome whose id is stored already is skipped. The outcomes go in with
// few statements, each inserting a power of two of them (at most
// maxOutcomeRows): a statement per outcome cost the service more than the
// rows themselves, and the few texts stay prepared.
func (s *Store) RecordOutcomes(ctx context.Context, outcomes []*auditv1.CallOutcome) (int, error) {
	recorded := 0
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		recorded = 0
		args := make([]any, 0, outcomeColumns*min(len(outcomes), maxOutcomeRows))
		for rest := outcomes; len(rest) > 0; {
			k := rowsPerStatement(len(rest))
			args = args[:0]
			for _, o := range rest[:k] {
				args = append(args, o.GetId(), o.GetTime().AsTime().UnixMilli(), o.GetAgent(), o.GetSubject(), o.GetTool(), int32(o.GetKind()),
					o.GetDomainCode(), o.GetDurationMs(), o.GetAccomplishment())
			}
			res, err := tx.Exec(ctx, insertOutcomes[bits.Len(uint(k))-1], args...)
			if err != nil {
				return fmt.Errorf("record call outcomes: %w", err)
			}
			if n, err := res.RowsAffected(); err == nil {
				recorded += int(n)
			}
			rest = rest[k:]
		}
		return nil
	})
	return recorded, err
}

// The outcomes' insert statements: insertOutcomes[i] inserts 1<<i rows of
// outcomeColumns values, up to maxOutcomeRows (2,304 parameters, within
// SQLite's and PostgreSQL's bounds).
const (
	outcomeColumns = 9
	maxOutcomeRows = 256
)

var insertOutcomes = func() []string {
	var stmts []string
	for rows := 1; rows <= maxOutcomeRows; rows *= 2 {
		row := "(" + strings.Repeat("?, ", outcomeColumns-1) + "?)"
		stmts = append(stmts, `INSERT INTO audit_outcomes (id, time_ms, agent, subject, tool, kind, domain_code, duration_ms, accomplishment) VALUES `+
			strings.Repeat(row+", ", rows-1)+row+` ON CONFLICT (id) DO NOTHING`)
	}
	return stmts
}()

// rowsPerStatement is how many of n outcomes the next statement inserts:
// the largest power of two not above n, at most maxOutcomeRows.
func rowsPerStatement(n int) int {
	return min(1<<(bits.Len(uint(n))-1), maxOutcomeRows)
}

// SummarizeOutcomes implements audit.OutcomeStore, from one snapshot.
func (s *Store) SummarizeOutcomes(ctx context.Context, f audit.OutcomeFilter) (*auditv1.SummarizeOutcomesResponse, error) {
	res := &auditv1.SummarizeOutcomesResponse{Through: f.Through}
	err := s.db.InSnapshot(ctx, func(tx *sqldb.Tx) error {
		if res.Through == 0 {
			if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM audit_outcomes`).Scan(&res.Through); err != nil {
				return fmt.Errorf("read the newest outcome: %w", err)
			}
		}
		where := ` FROM audit_outcomes WHERE agent = ? AND seq <= ?`
		args := []any{f.Agent, res.Through}
		if !f.Since.IsZero() {
			where += ` AND time_ms >= ?`
			args = append(args, f.Since.UnixMilli())
		}
		if !f.Until.IsZero() {
			where += ` AND time_ms < ?`
			args = append(args, f.Until.UnixMilli())
		}
		rows, err := tx.Query(ctx, `SELECT tool, domain_code, accomplishment, COUNT(*)`+where+
			` GROUP BY tool, domain_code, accomplishment ORDER BY tool, domain_code, accomplishment`, args...)
		if err != nil {
			return fmt.Errorf("count call outcomes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var c auditv1.OutcomeCount
			if err := rows.Scan(&c.Tool, &c.DomainCode, &c.Accomplishment, &c.Count); err != nil {
				return fmt.Errorf("count call outcomes: %w", err)
			}
			res.Counts = append(res.Counts, &c)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count call outcomes: %w", err)
		}
		// Days are whole UTC days since the epoch.
		err = tx.QueryRow(ctx, `SELECT COUNT(DISTINCT time_ms / 86400000)`+where, args...).Scan(&res.ActiveDays)
		if err != nil {
			return fmt.Errorf("count active days: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// PruneOutcomes implements audit.OutcomeStore.
func (s *Store) PruneOutcomes(ctx context.Context, before time.Time, keep int64) (int64, error) {
	var removed int64
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.Exec(ctx, `DELETE FROM audit_outcomes WHERE time_ms < ?`, before.UnixMilli())
		if err != nil {
			return fmt.Errorf("prune call outcomes by age: %w", err)
		}
		n, _ := res.RowsAffected()
		removed = n
		res, err = tx.Exec(ctx, `DELETE FROM audit_outcomes WHERE seq < (SELECT MIN(seq) FROM (SELECT seq FROM audit_outcomes ORDER BY seq DESC LIMIT ?) AS newest)`, keep)
		if err != nil {
			return fmt.Errorf("prune call outcomes by count: %w", err)
		}
		n, _ = res.RowsAffected()
		removed += n
		return nil
	})
	return removed, err
}
