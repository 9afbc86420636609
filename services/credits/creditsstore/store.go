// Package creditsstore keeps wallets, ledgers and settings in SQL: SQLite by
// default, PostgreSQL when the service is given a postgres:// DSN. Both run
// the same queries; the schemas live in migrations/<dialect>/.
//
// A change never overdraws a wallet, under any concurrency: it locks the
// wallet's balance row first, and reads the balance, inserts the ledger row
// and writes the new balance under that lock, in one transaction. The CHECK
// constraints on balance and balance_after back this up in the schema.
package creditsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/services/credits"
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
//
// The wallet's row is locked first, so the changes of one wallet run one at
// a time and the ledger lists them in the order the balance moved. The
// ledger row is inserted next, with sqldb.InsertOnce: it claims the
// reference and the idempotency key, and a retry (which waits for the first
// attempt on either lock) finds the first entry instead of being judged
// against the balance the first attempt left.
func (s *Store) Apply(ctx context.Context, e *creditsv1.LedgerEntry, call idempotency.Call, maxAmount int64) (credits.Applied, error) {
	var out credits.Applied
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		ms := e.GetCreateTime().AsTime().UnixMilli()
		var balance int64
		if err := tx.QueryRow(ctx, `INSERT INTO credit_wallets (wallet, balance, update_ms) VALUES (?, 0, ?)
			ON CONFLICT (wallet) DO UPDATE SET update_ms = credit_wallets.update_ms
			RETURNING balance`, e.GetWallet(), ms).Scan(&balance); err != nil {
			return fmt.Errorf("lock wallet: %w", err)
		}
		after, fits := move(balance, e.GetAmount())
		if fits && skipsLedgerInsert(e) {
			// A chaosbroken build only: the balance moves without its
			// ledger row, for the invariant checker's test to catch.
			out = credits.Applied{Entry: e}
			return setBalance(ctx, tx, e.GetWallet(), after, ms)
		}
		first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[held]{
			What:   "ledger entry",
			Insert: `INSERT INTO credit_ledger (` + columns + `, request_digest, call_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			Args: []any{e.GetId(), e.GetWallet(), int32(e.GetKind()), e.GetAmount(), max(after, 0), e.GetReference(), e.GetNote(),
				e.GetActor(), ms, call.Digest, call.KeyOrNil()},
			Holders:    `SELECT ` + columns + `, request_digest, call_id FROM credit_ledger WHERE ` + referenceScope(e) + ` OR (actor = ? AND call_id = ?) ORDER BY seq`,
			HolderArgs: append(referenceArgs(e), e.GetActor(), call.KeyOrNil()),
			Scan: func(r sqldb.Scanner) (held, string, error) {
				h, digest, err := scanHeld(r)
				if digest == "" && (h.entry.GetWallet() != e.GetWallet() || h.entry.GetAmount() != e.GetAmount()) {
					// Stored before digests were kept: the same wallet and
					// amount were what made a retry then.
					digest = "another request"
				}
				return h, digest, err
			},
			Digest: call.Digest,
		})
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return &credits.ReusedError{First: first.entry}
		case err != nil:
			return err
		case !inserted:
			out = credits.Applied{Entry: first.entry, Replayed: true, FirstCallID: first.callID}
			return nil
		}
		if e.GetAmount() > maxAmount || -e.GetAmount() > maxAmount {
			return credits.ErrOverMax
		}
		if !fits {
			if e.GetAmount() < 0 {
				return &credits.InsufficientError{Balance: balance}
			}
			return credits.ErrBalanceLimit
		}
		if err := setBalance(ctx, tx, e.GetWallet(), after, ms); err != nil {
			return err
		}
		e.BalanceAfter = after
		out = credits.Applied{Entry: e}
		return nil
	})
	if err != nil {
		return credits.Applied{}, err
	}
	return out, nil
}

// setBalance writes a wallet's new balance, under the lock Apply took.
func setBalance(ctx context.Context, tx *sqldb.Tx, wallet string, balance, ms int64) error {
	if _, err := tx.Exec(ctx, `UPDATE credit_wallets SET balance = ?, update_ms = ? WHERE wallet = ?`, balance, ms, wallet); err != nil {
		return fmt.Errorf("move balance: %w", err)
	}
	return nil
}

// move returns balance plus amount and whether it stays within
// [0, MaxInt64]; the bounds are checked on the old balance so the check
// itself cannot overflow.
func move(balance, amount int64) (int64, bool) {
	if amount < 0 {
		return balance + amount, balance >= -amount
	}
	if balance > math.MaxInt64-amount {
		return 0, false
	}
	return balance + amount, true
}

// referenceScope is the condition that selects the entry holding e's
// reference: a grant's reference is unique among grants, a spend's among its
// wallet's spends.
func referenceScope(e *creditsv1.LedgerEntry) string {
	if e.GetKind() == creditsv1.EntryKind_ENTRY_KIND_GRANT {
		return `(kind = ? AND reference = ?)`
	}
	return `(kind = ? AND wallet = ? AND reference = ?)`
}

func referenceArgs(e *creditsv1.LedgerEntry) []any {
	if e.GetKind() == creditsv1.EntryKind_ENTRY_KIND_GRANT {
		return []any{int32(e.GetKind()), e.GetReference()}
	}
	return []any{int32(e.GetKind()), e.GetWallet(), e.GetReference()}
}

// held is a stored entry with the idempotency key of the call that made it.
type held struct {
	entry  *creditsv1.LedgerEntry
	callID string
}

// scanHeld reads a row of columns, request_digest and call_id.
func scanHeld(r sqldb.Scanner) (held, string, error) {
	var (
		h        held
		digest   string
		callID   sql.NullString
		kind, ms int64
		e        creditsv1.LedgerEntry
	)
	if err := r.Scan(&e.Id, &e.Wallet, &kind, &e.Amount, &e.BalanceAfter, &e.Reference, &e.Note, &e.Actor, &ms, &digest, &callID); err != nil {
		return h, "", fmt.Errorf("read ledger entry: %w", err)
	}
	e.Kind = creditsv1.EntryKind(kind)
	e.CreateTime = sqldb.Timestamp(ms)
	h.entry, h.callID = &e, callID.String
	return h, digest, nil
}

// Balance implements credits.Store.
func (s *Store) Balance(ctx context.Context, wallet string) (int64, error) {
	var balance int64
	if err := s.db.QueryRow(ctx, `SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM credit_ledger WHERE wallet = ?`,
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

// Wallets implements credits.Store.
func (s *Store) Wallets(ctx context.Context, wallet string, offset, limit int) ([]credits.Wallet, int, error) {
	q := sqldb.ListQuery{What: "wallets", Columns: `wallet, balance, update_ms`, From: `credit_wallets`, OrderBy: `update_ms DESC, wallet`}
	if wallet != "" {
		q.And(`wallet = ?`, wallet)
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, func(r sqldb.Scanner) (credits.Wallet, error) {
		var w credits.Wallet
		var ms int64
		if err := r.Scan(&w.Wallet, &w.Balance, &ms); err != nil {
			return w, err
		}
		w.UpdateTime = time.UnixMilli(ms).UTC()
		return w, nil
	})
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
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE credit_config SET updated_by = updated_by WHERE config_key = ?`, st.Name)
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
			res, err := tx.Exec(ctx, `INSERT INTO credit_config (config_key, value, update_ms, updated_by) VALUES (?, ?, ?, ?)
				ON CONFLICT (config_key) DO NOTHING`, st.Name, st.Value, st.UpdateTime.UnixMilli(), st.UpdatedBy)
			if err != nil {
				return fmt.Errorf("write setting: %w", err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Join(errRaced, err)
			}
			return nil
		}
		prev, err = scanSetting(tx.QueryRow(ctx, `SELECT `+settingColumns+` FROM credit_config WHERE config_key = ?`, st.Name))
		if err != nil {
			return err
		}
		existed = true
		if _, err := tx.Exec(ctx, `UPDATE credit_config SET value = ?, update_ms = ?, updated_by = ? WHERE config_key = ?`,
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
	e.CreateTime = sqldb.Timestamp(ms)
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
