// Package creditstore keeps wallets, ledgers and settings in SQL: SQLite by
// default, PostgreSQL when the service is given a postgres:// DSN. Both run
// the same queries; the schemas live in migrations/<dialect>/.
//
// A change never overdraws a wallet, under any concurrency: the ledger
// insert and a conditional UPDATE of the wallet's balance row ("balance >=
// amount") run in one transaction. SQLite serialises writers (immediate
// transactions); PostgreSQL re-checks the condition on the latest row
// version after waiting for the row lock. The CHECK constraints on balance
// and balance_after back this up in the schema.
package creditstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/services/credits"
	"google.golang.org/protobuf/types/known/timestamppb"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of credits.Store.
type Store struct {
	db *sqldb.DB
}

var _ credits.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "credits", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const (
	columns        = `id, wallet, kind, amount, balance_after, reference, note, actor, create_ms`
	settingColumns = `config_key, value, update_ms, updated_by`
)

// Apply implements credits.Store.
func (s *Store) Apply(ctx context.Context, e *creditsv1.LedgerEntry) (*creditsv1.LedgerEntry, error) {
	out, err := s.apply(ctx, e)
	var short *credits.InsufficientError
	if err != nil && (sqldb.IsUniqueViolation(err) || errors.As(err, &short) || errors.Is(err, credits.ErrBalanceLimit)) {
		// A concurrent change with the same reference may have committed
		// first: its ledger row collides with ours, or (PostgreSQL, read
		// committed) our balance update waited for it and found the
		// balance it left. Look again, and answer as for a retry if so.
		out, err = s.apply(ctx, e)
	}
	return out, err
}

func (s *Store) apply(ctx context.Context, e *creditsv1.LedgerEntry) (*creditsv1.LedgerEntry, error) {
	var out *creditsv1.LedgerEntry
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		prev, err := s.byReference(ctx, tx, e)
		if err == nil {
			if prev.GetWallet() == e.GetWallet() && prev.GetAmount() == e.GetAmount() {
				out = prev
				return nil
			}
			return &credits.ReusedError{First: prev}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		ms := e.GetCreateTime().AsTime().UnixMilli()
		if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO credit_wallets (wallet, balance, update_ms) VALUES (?, 0, ?)
			ON CONFLICT (wallet) DO NOTHING`), e.GetWallet(), ms); err != nil {
			return fmt.Errorf("open wallet: %w", err)
		}
		// The balance after the change must stay within [0, MaxInt64]; the
		// bounds are on the old balance so the check itself cannot overflow.
		lo, hi := int64(0), int64(math.MaxInt64)
		if e.GetAmount() < 0 {
			lo = -e.GetAmount()
		} else {
			hi = math.MaxInt64 - e.GetAmount()
		}
		var after int64
		err = tx.QueryRowContext(ctx, s.db.Rebind(`UPDATE credit_wallets SET balance = balance + ?, update_ms = ?
			WHERE wallet = ? AND balance >= ? AND balance <= ? RETURNING balance`),
			e.GetAmount(), ms, e.GetWallet(), lo, hi).Scan(&after)
		if errors.Is(err, sql.ErrNoRows) {
			var balance int64
			if err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT balance FROM credit_wallets WHERE wallet = ?`), e.GetWallet()).Scan(&balance); err != nil {
				return fmt.Errorf("read balance: %w", err)
			}
			if balance < lo {
				return &credits.InsufficientError{Balance: balance}
			}
			return credits.ErrBalanceLimit
		}
		if err != nil {
			return fmt.Errorf("move balance: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO credit_ledger (`+columns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			e.GetId(), e.GetWallet(), int32(e.GetKind()), e.GetAmount(), after, e.GetReference(), e.GetNote(), e.GetActor(), ms); err != nil {
			return fmt.Errorf("insert ledger entry: %w", err)
		}
		e.BalanceAfter = after
		out = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// byReference returns the entry that holds e's reference: a grant's
// reference is unique among grants, a spend's among its wallet's spends.
func (s *Store) byReference(ctx context.Context, tx *sql.Tx, e *creditsv1.LedgerEntry) (*creditsv1.LedgerEntry, error) {
	if e.GetKind() == creditsv1.EntryKind_ENTRY_KIND_GRANT {
		return scan(tx.QueryRowContext(ctx, s.db.Rebind(`SELECT `+columns+` FROM credit_ledger WHERE kind = ? AND reference = ?`),
			int32(e.GetKind()), e.GetReference()))
	}
	return scan(tx.QueryRowContext(ctx, s.db.Rebind(`SELECT `+columns+` FROM credit_ledger WHERE kind = ? AND wallet = ? AND reference = ?`),
		int32(e.GetKind()), e.GetWallet(), e.GetReference()))
}

// Balance implements credits.Store.
func (s *Store) Balance(ctx context.Context, wallet string) (int64, error) {
	var balance int64
	if err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM credit_ledger WHERE wallet = ?`),
		wallet).Scan(&balance); err != nil {
		return 0, fmt.Errorf("sum ledger: %w", err)
	}
	return balance, nil
}

// Ledger implements credits.Store.
func (s *Store) Ledger(ctx context.Context, wallet string, offset, limit int) ([]*creditsv1.LedgerEntry, int, error) {
	return sqldb.Page(ctx, s.db, sqldb.ListQuery{What: "ledger", Columns: columns, From: `credit_ledger`,
		Where: `wallet = ?`, Args: []any{wallet}, OrderBy: `seq DESC`}, offset, limit, scan)
}

// Settings implements credits.Store.
func (s *Store) Settings(ctx context.Context) ([]credits.Setting, error) {
	return sqldb.All(ctx, s.db, "read settings", scanSetting, `SELECT `+settingColumns+` FROM credit_config ORDER BY config_key`)
}

// SetSetting implements credits.Store.
func (s *Store) SetSetting(ctx context.Context, st credits.Setting) (credits.Setting, bool, error) {
	// A second try is needed only when a concurrent first set of the same
	// setting inserted its row meanwhile; then the row exists.
	for range 3 {
		prev, existed, err := s.setSetting(ctx, st)
		if !errors.Is(err, errRaced) {
			return prev, existed, err
		}
	}
	return credits.Setting{}, false, fmt.Errorf("write setting %s: %w", st.Name, errRaced)
}

// errRaced rolls back a first set of a setting that another set inserted
// meanwhile.
var errRaced = errors.New("setting changed concurrently")

// setSetting reads the setting it replaces under the row's lock, so that
// concurrent sets of one setting each report the value they replaced:
// PostgreSQL makes the first UPDATE wait for any other set in flight, and
// the SELECT after it sees what that set wrote. When there was no row to
// lock, the set inserts one, and retries should another set have inserted
// it first. SQLite runs the sets one at a time anyway.
func (s *Store) setSetting(ctx context.Context, st credits.Setting) (credits.Setting, bool, error) {
	var (
		prev    credits.Setting
		existed bool
	)
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE credit_config SET updated_by = updated_by WHERE config_key = ?`), st.Name)
		if err != nil {
			return fmt.Errorf("lock setting: %w", err)
		}
		locked, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("lock setting: %w", err)
		}
		if locked == 0 {
			// Nothing to replace, as far as this transaction can tell: a row
			// another set has inserted since is not locked, so not read.
			res, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO credit_config (config_key, value, update_ms, updated_by) VALUES (?, ?, ?, ?)
				ON CONFLICT (config_key) DO NOTHING`), st.Name, st.Value, st.UpdateTime.UnixMilli(), st.UpdatedBy)
			if err != nil {
				return fmt.Errorf("write setting: %w", err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Join(errRaced, err)
			}
			return nil
		}
		prev, err = scanSetting(tx.QueryRowContext(ctx, s.db.Rebind(`SELECT `+settingColumns+` FROM credit_config WHERE config_key = ?`), st.Name))
		if err != nil {
			return err
		}
		existed = true
		if _, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE credit_config SET value = ?, update_ms = ?, updated_by = ? WHERE config_key = ?`),
			st.Value, st.UpdateTime.UnixMilli(), st.UpdatedBy, st.Name); err != nil {
			return fmt.Errorf("write setting: %w", err)
		}
		return nil
	})
	return prev, existed, err
}

// scan reads a row of columns.
func scan(r sqldb.Scanner) (*creditsv1.LedgerEntry, error) {
	var (
		e        creditsv1.LedgerEntry
		kind, ms int64
	)
	if err := r.Scan(&e.Id, &e.Wallet, &kind, &e.Amount, &e.BalanceAfter, &e.Reference, &e.Note, &e.Actor, &ms); err != nil {
		return nil, fmt.Errorf("read ledger entry: %w", err)
	}
	e.Kind = creditsv1.EntryKind(kind)
	e.CreateTime = timestamppb.New(time.UnixMilli(ms).UTC())
	return &e, nil
}

// scanSetting reads a row of settingColumns.
func scanSetting(r sqldb.Scanner) (credits.Setting, error) {
	var (
		st credits.Setting
		ms int64
	)
	if err := r.Scan(&st.Name, &st.Value, &ms, &st.UpdatedBy); err != nil {
		return credits.Setting{}, fmt.Errorf("read setting: %w", err)
	}
	st.UpdateTime = time.UnixMilli(ms).UTC()
	return st, nil
}
