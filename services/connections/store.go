package connections

import (
	"context"
	"errors"
	"time"

	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
)

// Store keeps connections and their sealed tokens. Implementations live in
// connectionsstore (SQLite and PostgreSQL).
type Store interface {
	// Put stores r as the agent's connection at its provider, replacing the
	// one it had (a new link). With call.Key, the link is the call's: it is
	// stored only when the call did not end before (else ErrCallEnded), and
	// the call is recorded linked, in the same transaction.
	Put(ctx context.Context, r Record, call LinkCall) error
	// EndCall records that agent's call call.Key ended without a link,
	// unless a link for it was stored first (ended is then false).
	EndCall(ctx context.Context, agent string, call LinkCall) (ended bool, err error)
	// Get returns the agent's connection at provider, or ErrNotFound.
	Get(ctx context.Context, agent string, provider connectionsv1.Provider) (Record, error)
	// ByID returns the connection id, or ErrNotFound.
	ByID(ctx context.Context, id string) (Record, error)
	// List returns one page of connections, newest first, and the total
	// count: agent's only unless agent is "", provider's only unless it is
	// unspecified.
	List(ctx context.Context, agent string, provider connectionsv1.Provider, offset, limit int) ([]*connectionsv1.Connection, int, error)
	// SetStatus moves connection id to status at now, from any status in
	// from, erasing its tokens when status is revoked, and returns it as it
	// is after; changed is false when it was in none of from.
	SetStatus(ctx context.Context, id string, status connectionsv1.Status, from []connectionsv1.Status, now time.Time) (r Record, changed bool, err error)
	// Touch records that a call used connection id at now.
	Touch(ctx context.Context, id string, now time.Time) error
	// ClaimRefresh takes the refresh lease of connection id until until,
	// when it is still at generation and active and no one holds a lease
	// that outlasts now. Of any number of callers across processes, one
	// claims it; the others get false.
	ClaimRefresh(ctx context.Context, id string, generation int64, now, until time.Time) (bool, error)
	// Refreshed stores the tokens a refresh returned for connection id, if
	// it is still at generation: the generation moves on and the lease is
	// released. It reports whether it stored them.
	Refreshed(ctx context.Context, id string, generation int64, t Sealed, expire, now time.Time) (bool, error)
	// ReleaseRefresh gives up the lease of connection id at generation (the
	// refresh failed without a verdict), so another caller may try.
	ReleaseRefresh(ctx context.Context, id string, generation int64) error
	// NotWrappedBy returns every connection holding tokens whose data keys are
	// not wrapped by kek, at most limit of them.
	NotWrappedBy(ctx context.Context, kek string, limit int) ([]Record, error)
	// Rewrapped replaces the sealed tokens of connection id, if it is still
	// at generation, with t (the same tokens, rewrapped), without moving
	// the generation.
	Rewrapped(ctx context.Context, id string, generation int64, t Sealed) (bool, error)
}

// Record is a stored connection.
type Record struct {
	// Conn is its metadata.
	Conn *connectionsv1.Connection
	// Tokens are its sealed tokens; empty once revoked.
	Tokens Sealed
	// Generation counts the changes of its tokens: a refresh applies only
	// to the generation it started from.
	Generation int64
	// LeaseUntil is when the refresh lease ends; zero when none is held.
	LeaseUntil time.Time
}

// Sealed are a connection's tokens as stored: envelope records
// (internal/seal), bound to the connection's id.
type Sealed struct {
	// KEK is the id of the key-encryption key that wraps them.
	KEK     string
	Access  []byte
	Refresh []byte // nil when the provider issued none
}

// LinkCall is the call a link was made for: its idempotency key ("" for
// none), now, and until when what became of it is kept (longer than any
// link for it stays usable).
type LinkCall struct {
	Key        string
	Now, Until time.Time
}

// ErrCallEnded is returned by Put for a link whose call ended before.
var ErrCallEnded = errors.New("the call that asked for this link ended")

// ErrNotFound is returned for a connection that does not exist.
var ErrNotFound = errors.New("connection not found")
