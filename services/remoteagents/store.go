package remoteagents

import (
	"context"
	"errors"
	"time"

	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
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
	// ListInvocations returns one page of invocations, newest first, and
	// the total count: every agent's when agent is "", and any status when
	// status is INVOCATION_STATUS_UNSPECIFIED.
	ListInvocations(ctx context.Context, agent string, status remoteagentsv1.InvocationStatus, offset, limit int) ([]*remoteagentsv1.Invocation, int, error)
	// ResolveInvocation records how a working invocation ended. One that
	// has ended already is left as it is (the first outcome wins) and
	// returned with changed false; ErrNotFound when there is none.
	ResolveInvocation(ctx context.Context, id string, o *remoteagentsv1.InvokeOutcome) (inv *remoteagentsv1.Invocation, changed bool, err error)
	// ExtendInvocation moves a working invocation's expiry to expire when
	// that is later; changed is false when it was not (it ended, or its
	// expiry is as late already). ErrNotFound when there is none.
	ExtendInvocation(ctx context.Context, id string, expire time.Time) (inv *remoteagentsv1.Invocation, changed bool, err error)
	// DeleteInvocation removes a working invocation whose workflow could
	// not be started, so that a retry starts afresh.
	DeleteInvocation(ctx context.Context, id string) error
	// AppendInvocationEvent records what the remote agent reported while
	// the invocation worked, once per key: a key recorded before returns
	// that event with appended false. A working invocation's progress,
	// remote state and task move to the event's (where it has them).
	// ErrNotFound when there is no such invocation.
	AppendInvocationEvent(ctx context.Context, e InvocationEventIn) (ev *remoteagentsv1.InvocationEvent, appended bool, err error)
	// InvocationEvents returns at most limit events of the invocation
	// after seq after, in order.
	InvocationEvents(ctx context.Context, invocationID string, after int64, limit int) ([]*remoteagentsv1.InvocationEvent, error)

	// CreateInbound stores in, with its first event (seq 1: delivered,
	// working). When the same sender delivered the same A2A message before,
	// it stores nothing and returns that task with created false.
	CreateInbound(ctx context.Context, in *remoteagentsv1.Inbound) (stored *remoteagentsv1.Inbound, created bool, err error)
	// InboundByMessage returns the task sender's A2A message opened, or
	// ErrNotFound.
	InboundByMessage(ctx context.Context, sender, a2aMessageID string) (*remoteagentsv1.Inbound, error)
	// GetInbound returns the task with that id, or ErrNotFound.
	GetInbound(ctx context.Context, taskID string) (*remoteagentsv1.Inbound, error)
	// EndInbound moves a working task to status (completed with the
	// answer, or cancelled) and appends the events that say so to its log
	// (the answer, then the status), in one transaction. One that has ended
	// is left as it is and returned with changed false.
	EndInbound(ctx context.Context, taskID string, status remoteagentsv1.InboundStatus, answer, answerMessageID string, at time.Time) (in *remoteagentsv1.Inbound, changed bool, err error)
	// ListInbound returns a page of the tasks f selects, the most recently
	// changed first, and how many it selects in all.
	ListInbound(ctx context.Context, f InboundFilter) (page []*remoteagentsv1.Inbound, total int, err error)
	// InboundEvents returns at most limit events of the task after seq
	// after, in order.
	InboundEvents(ctx context.Context, taskID string, after int64, limit int) ([]*inboundv1.InboundEvent, error)

	// SavePushConfig stores c, replacing the task's config with its id;
	// its delivered_seq is the task's version when it is saved (it is sent
	// the later events).
	SavePushConfig(ctx context.Context, c *inboundv1.PushConfig) (*inboundv1.PushConfig, error)
	// PushConfig returns one config of a task, or ErrNotFound.
	PushConfig(ctx context.Context, taskID, configID string) (*inboundv1.PushConfig, error)
	// PushConfigs returns a task's configs, oldest first.
	PushConfigs(ctx context.Context, taskID string) ([]*inboundv1.PushConfig, error)
	// DeletePushConfig removes a config; one that is gone changes nothing.
	DeletePushConfig(ctx context.Context, taskID, configID string) error
	// RecordPushDelivered moves a config's delivered_seq up to seq (never
	// down).
	RecordPushDelivered(ctx context.Context, taskID, configID string, seq int64) error
}

// InvocationEventIn is an invocation's event before it is recorded.
type InvocationEventIn struct {
	InvocationID, Key string
	RemoteState, Text string
	TaskID, ContextID string
	At                time.Time
}

// InboundFilter selects inbound tasks: a sender's tasks to one agent,
// optionally of one context, in one status, changed at or after a time,
// a page at a time.
type InboundFilter struct {
	Sender, AgentID string
	ContextID       string
	Status          remoteagentsv1.InboundStatus
	UpdatedAfter    time.Time
	// After is where the page starts: the last task of the page before
	// (nil for the first page).
	After *InboundCursor
	// Limit is the page size.
	Limit int
}

// InboundCursor is a place in the order tasks are listed in.
type InboundCursor struct {
	UpdateMillis int64
	TaskID       string
}

// ErrNotFound is returned by stores when a record does not exist.
var ErrNotFound = errors.New("not found")
