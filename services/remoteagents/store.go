package remoteagents

import (
	"context"
	"errors"
	"time"

	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Store keeps invocations (messages this mesh's agents sent to remote
// agents) and inbound tasks (messages remote agents sent to this mesh's
// agents). Implementations live in remoteagentsstore (SQLite and
// PostgreSQL); who may see what is decided here, in the service.
type Store interface {
	// CreateInvocation stores inv. When one with its id exists already (a
	// retried call with the same idempotency key), it stores nothing and
	// returns the existing one with created false.
	CreateInvocation(ctx context.Context, inv *remoteagentsv1.Invocation) (stored *remoteagentsv1.Invocation, created bool, err error)
	// GetInvocation returns the invocation with that id, or ErrNotFound.
	GetInvocation(ctx context.Context, id string) (*remoteagentsv1.Invocation, error)
	// ResolveInvocation records how a working invocation ended. One that
	// has ended already is left as it is (the first outcome wins) and
	// returned with changed false; ErrNotFound when there is none.
	ResolveInvocation(ctx context.Context, id string, o *remoteagentsv1.InvokeOutcome) (inv *remoteagentsv1.Invocation, changed bool, err error)
	// DeleteInvocation removes a working invocation whose workflow could
	// not be started, so that a retry starts afresh.
	DeleteInvocation(ctx context.Context, id string) error

	// CreateInbound stores in. When the same sender delivered the same A2A
	// message before, it stores nothing and returns that task with created
	// false.
	CreateInbound(ctx context.Context, in *remoteagentsv1.Inbound) (stored *remoteagentsv1.Inbound, created bool, err error)
	// InboundByMessage returns the task sender's A2A message opened, or
	// ErrNotFound.
	InboundByMessage(ctx context.Context, sender, a2aMessageID string) (*remoteagentsv1.Inbound, error)
	// GetInbound returns the task with that id, or ErrNotFound.
	GetInbound(ctx context.Context, taskID string) (*remoteagentsv1.Inbound, error)
	// EndInbound moves a working task to status (completed with the
	// answer, or cancelled). One that has ended is left as it is and
	// returned with changed false.
	EndInbound(ctx context.Context, taskID string, status remoteagentsv1.InboundStatus, answer, answerMessageID string, at time.Time) (in *remoteagentsv1.Inbound, changed bool, err error)
}

// ErrNotFound is returned by stores when a record does not exist.
var ErrNotFound = errors.New("not found")
