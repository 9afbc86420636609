package agents

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
)

// Store keeps the agent directory. Implementations live in agentsstore
// (SQLite and PostgreSQL); the rules about which changes are legal live here.
type Store interface {
	// Create stores a, or returns ErrExists when an agent with a's id is
	// already stored. A call with an idempotency key that a.RegisteredBy
	// used before stores nothing: when the key's agent was registered by the
	// same request (call.Digest) Create returns it with created false, and
	// otherwise idempotency.ErrKeyReused.
	Create(ctx context.Context, a *agentsv1.Agent, call idempotency.Call) (stored *agentsv1.Agent, created bool, err error)
	// Get returns the agent with that id, or ErrNotFound.
	Get(ctx context.Context, id string) (*agentsv1.Agent, error)
	// List returns one page of agents in id order and the total count;
	// status AGENT_STATUS_UNSPECIFIED means any status.
	List(ctx context.Context, status agentsv1.AgentStatus, offset, limit int) ([]*agentsv1.Agent, int, error)
	// Summary counts all agents per status.
	Summary(ctx context.Context) (*agentsv1.StatusSummary, error)
	// Update writes a's status, status reason and update time if the stored
	// status is still from; otherwise ErrStale (or ErrNotFound).
	Update(ctx context.Context, a *agentsv1.Agent, from agentsv1.AgentStatus) (*agentsv1.Agent, error)
}

// Store errors.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrStale    = errors.New("agent changed concurrently")
)
