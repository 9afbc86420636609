package credits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
)

// Store keeps wallets, their ledgers and the settings. Implementations live
// in creditsstore (SQLite and PostgreSQL).
type Store interface {
	// Apply records e, a grant (positive amount) or a spend (negative
	// amount), in e.Wallet's ledger and moves the wallet's balance by the
	// amount, atomically, and returns the entry with its balance after. A
	// change of more than maxAmount (either way) records nothing and
	// returns ErrOverMax.
	//
	// Two keys name a change: its reference (unique among grants, and among
	// a wallet's spends) and the call's idempotency key (unique per actor).
	// A change whose keys are taken records nothing: when every entry that
	// holds them was made by the same request (call.Digest) Apply returns
	// the first entry as a replay, and a *ReusedError otherwise. A change
	// that would take the balance below zero records nothing and returns an
	// *InsufficientError.
	//
	// A retry is answered before any limit is applied: the first entry
	// stands even when the balance or maxAmount has changed since.
	Apply(ctx context.Context, e *creditsv1.LedgerEntry, call idempotency.Call, maxAmount int64) (Applied, error)
	// Balance returns the sum of the wallet's ledger entries (0 for a wallet
	// never used).
	Balance(ctx context.Context, wallet string) (int64, error)
	// Ledger returns one page of the wallet's entries, newest first, and the
	// total count.
	Ledger(ctx context.Context, wallet string, offset, limit int) ([]*creditsv1.LedgerEntry, int, error)
	// Wallets returns one page of the wallets, the most recently changed
	// first, and the total count; only wallet's when wallet is not "".
	Wallets(ctx context.Context, wallet string, offset, limit int) ([]Wallet, int, error)
	// Settings returns the settings that were ever set.
	Settings(ctx context.Context) ([]Setting, error)
	// SetSetting stores s and returns the setting it replaced (ok false when
	// it was never set). Concurrent sets of one setting each return the
	// value they replaced, as if they ran one after the other.
	SetSetting(ctx context.Context, s Setting) (prev Setting, ok bool, err error)
}

// Applied is what Apply did.
type Applied struct {
	// Entry is the entry recorded, or on a replay the first entry.
	Entry *creditsv1.LedgerEntry
	// Replayed is true when the change was made before and nothing was
	// recorded now.
	Replayed bool
	// FirstCallID is, on a replay, the idempotency key of the call that made
	// the first entry ("" when it had none).
	FirstCallID string
}

// Wallet is a wallet's row: its balance and when it last changed.
type Wallet struct {
	Wallet     string
	Balance    int64
	UpdateTime time.Time
}

// Setting is a stored credits setting.
type Setting struct {
	// Name is the key's name, e.g. "max_grant_amount".
	Name       string
	Value      int64
	UpdateTime time.Time
	UpdatedBy  string
}

// InsufficientError refuses a change that would take a balance below zero.
type InsufficientError struct {
	// Balance is the wallet's balance when the change was refused.
	Balance int64
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("insufficient balance %d", e.Balance)
}

// ReusedError refuses a change whose reference or idempotency key is taken
// by a different one.
type ReusedError struct {
	// First is the entry that holds the reference or the key.
	First *creditsv1.LedgerEntry
}

func (e *ReusedError) Error() string {
	return fmt.Sprintf("reference %q or idempotency key already used by entry %s", e.First.GetReference(), e.First.GetId())
}

// ErrOverMax refuses a change larger than the configured maximum.
var ErrOverMax = errors.New("amount exceeds the configured maximum")

// ErrBalanceLimit refuses a grant that would overflow a balance.
var ErrBalanceLimit = errors.New("balance would exceed the largest representable amount")
