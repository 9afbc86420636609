package toolcall

import (
	"time"

	"github.com/toolmesh/toolmesh/internal/mesh"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// The budget of a call that the calls worker carries (toolmesh.calls.v1:
// an elicited call, an MCP task). The edge (edge/elicit) fills the call's
// input from it and the worker (workers/calls) falls back on it for an
// input that leaves a field out: one definition, read by both.
const (
	// DefaultMaxRounds bounds the rounds of questions of one call.
	DefaultMaxRounds = 8
	// DefaultStateTTL is how long the requestState of a round is
	// accepted: how long a user has to answer one round.
	DefaultStateTTL = 10 * time.Minute
	// DefaultTaskCallTimeout bounds the service call of a call that is an
	// MCP task (docs/tasks.md), instead of the call timeout.
	DefaultTaskCallTimeout = time.Hour
	// MaxTaskLifetime bounds how long an MCP task's side effect may run,
	// from when it starts, however often its agent extends its deadline
	// (calls_extend_task): its service call is given this long, and the
	// task's deadline, a timer beside it, ends it sooner.
	MaxTaskLifetime = 24 * time.Hour
	// MaxRoundWait bounds how long the edge waits for a call's workflow
	// to answer one request (a round, a task's answer), whatever is
	// restarting: past it the client gets a retryable unavailable, and
	// the same request sent again attaches to the work already under way
	// rather than doing it twice. With the rest of the request's path it
	// keeps every answer within 30 seconds.
	MaxRoundWait = 25 * time.Second
)

// stateGrace is how much longer than a state's lifetime the workflow of a
// call waits for its round, so that a state is never valid for a workflow
// that already gave up.
const stateGrace = time.Minute

// RoundTimeout is how long the workflow of a call waits for the answers of
// a round whose requestState is accepted for stateTTL, before it gives the
// call up as abandoned.
func RoundTimeout(stateTTL time.Duration) time.Duration { return stateTTL + stateGrace }

// CallerProto is c as the calls contract carries it.
func CallerProto(c mesh.Caller) *callsv1.Caller {
	return &callsv1.Caller{Subject: c.Subject, Agent: c.Agent, Roles: c.Roles, Depth: int32(c.Depth), Grants: c.Grants}
}

// CallerOf is the caller the calls contract's c stands for (the zero
// Caller for nil).
func CallerOf(c *callsv1.Caller) mesh.Caller {
	return mesh.Caller{Subject: c.GetSubject(), Agent: c.GetAgent(), Roles: c.GetRoles(), Depth: int(c.GetDepth()), Grants: c.GetGrants()}
}
