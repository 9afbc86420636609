package workflowrun

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
)

// ReplyMargin is kept free before a call's deadline when it waits for its
// workflow, to answer with the call as it stands ("pending", "working")
// when the wait runs up to the deadline.
const ReplyMargin = 500 * time.Millisecond

// Call is the service side of one long-running call: the row a service
// stored for it (an owner ask, a remote agent invocation) and the workflow
// that carries it out. Start and Await are the steps every such call takes
// alike; what the row and the workflow are stays with the domain.
type Call struct {
	// Event prefixes the call's log events: "owner.ask" logs
	// owner.ask_rollback_failed and owner.ask_wait_failed.
	Event string
	// What names the call in the error its caller reads: "could not start
	// the <What>; try again".
	What string
	// IDKey and ID name the call in log events ("ask_id" and the ask's id).
	IDKey, ID string
	Log       *slog.Logger
}

// Start starts the call's workflow with start, which must be idempotent
// by workflow id (Once): a retry starts the workflow its first attempt may
// have stored the row for and failed to start. created is true when this
// attempt stored the row (false when it found the row a first attempt
// with the same idempotency key stored). When start fails, a row this
// attempt created is removed with remove, so that nothing is left half
// made and a retry starts afresh, and the caller gets Unavailable.
func (c Call) Start(ctx context.Context, created bool, start, remove func(context.Context) error) error {
	err := start(ctx)
	if err == nil {
		return nil
	}
	if created {
		if rerr := remove(context.WithoutCancel(ctx)); rerr != nil {
			c.Log.ErrorContext(ctx, c.Event+"_rollback_failed", c.IDKey, c.ID, "error", rerr)
		}
	}
	return rpcerror.WithCause(connect.CodeUnavailable, "could not start the "+c.What+"; try again",
		fmt.Errorf("start %s %s: %w", c.What, c.ID, err))
}

// WaitBudget is how long a call waits for its outcome: the seconds its
// request names, or def when it names none.
func WaitBudget(seconds *int32, def time.Duration) time.Duration {
	if seconds == nil {
		return def
	}
	return time.Duration(*seconds) * time.Second
}

// Await waits with wait for the call's outcome, for at most budget and
// never past ctx's deadline less ReplyMargin (Within). It returns row as
// ended makes it with the outcome, or row as it stands when the budget
// runs out or the wait fails (which is logged: the caller still gets an
// answer, and reads the outcome later).
func Await[R, O any](ctx context.Context, c Call, row R, budget time.Duration, wait func(context.Context) (O, error), ended func(context.Context, R, O) R) R {
	o, done, err := Within(ctx, budget, ReplyMargin, wait)
	if err != nil {
		c.Log.WarnContext(ctx, c.Event+"_wait_failed", c.IDKey, c.ID, "error", err)
	}
	if !done {
		return row
	}
	return ended(ctx, row, o)
}
