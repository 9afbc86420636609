package agents

import (
	"context"
	"errors"
	"time"

	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
)

// Store keeps the agent directory. Implementations live in agentstore
// (SQLite and PostgreSQL); the rules about which changes are legal live here.
type Store interface {
	// Create stores a, or returns ErrExists when an agent with a's id is
	// already stored. With a non-empty idempotency key, a Create of an id
	// that was stored with the same key by the same registered_by is a retry:
	// it stores nothing and returns the stored agent.
	Create(ctx context.Context, a *agentsv1.Agent, idempotencyKey string) (*agentsv1.Agent, error)
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

// Clock returns the current time; tests inject a fixed one.
type Clock func() time.Time
