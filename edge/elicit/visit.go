package elicit

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolmesh/toolmesh/edge/port"
)

// A service that cannot make a call until the person behind it visits a
// page answers toolmesh.tool.v1.VisitRequired (before any side effect); the
// pipeline hands such a call to Visit when its client can be sent to a
// page. The call's workflow asks the visit as a URL question and makes the
// call again once the user accepted: a 2026-07-28 client retries with its
// accept (and is asked again while the visit is not done), a task waits
// for tasks/update, and a session call waits for the visit itself (see
// converse), within Options.VisitWait.

// DefaultVisitWait is the default, and the longest, Options.VisitWait.
const DefaultVisitWait = 20 * time.Second

// visitRetry is the first pause before a service that asked for a visit
// the user accepted is called again; it doubles up to maxVisitRetry.
const (
	visitRetry    = 250 * time.Millisecond
	maxVisitRetry = 2 * time.Second
)

// Visit carries a call its service refused pending a visit (e.Visit): its
// workflow asks the person to visit the page, then makes the call again,
// under e.Key, and again while the visit is not done.
func (x *Elicitor) Visit(ctx context.Context, e *port.Elicited) port.Outcome {
	c := newCall(e)
	var args map[string]json.RawMessage
	if err := json.Unmarshal(e.Arguments, &args); err != nil || args == nil {
		args = map[string]json.RawMessage{}
	}
	return x.start(ctx, c, args, nil, e.ClientKey)
}

// visitPending ends a session call whose accepted visit was still not done
// when the call could wait no longer.
type visitPending struct{ q port.Question }

func (v *visitPending) Error() string { return "the visit " + v.q.ElicitationID + " is not done yet" }

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
