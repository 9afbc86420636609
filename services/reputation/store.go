package reputation

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

// ErrNotFound is a store's answer when an agent has published no
// attestation.
var ErrNotFound = errors.New("not found")

// Store keeps the attestations the mesh's agents published. Implementations
// live in reputationstore (SQLite and PostgreSQL).
type Store interface {
	// Publish stores a as its agent's published attestation, replacing the
	// one before, unless call's key already published one: then that
	// attestation is returned with created false, or
	// idempotency.ErrKeyReused when it was published for another request.
	Publish(ctx context.Context, a *reputationv1.Attestation, call idempotency.Call) (stored *reputationv1.Attestation, created bool, err error)
	// Replay returns the attestation the agent published under call's key,
	// ErrNotFound when the key published none, or idempotency.ErrKeyReused
	// when it published one for another request.
	Replay(ctx context.Context, agentID string, call idempotency.Call) (*reputationv1.Attestation, error)
	// Get returns the agent's published attestation, or ErrNotFound.
	Get(ctx context.Context, agentID string) (*reputationv1.Attestation, error)
	// List returns one page of the published attestations, most recently
	// issued first, and their total.
	List(ctx context.Context, offset, limit int) ([]*reputationv1.Attestation, int, error)
}
