package a2adoor

import (
	"context"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// A stream of a task is read from the task's log in the store, not from a
// channel of the replica that delivered the message: the door asks the
// contract for the events after the last it sent (ListInboundEvents, a
// long poll), sends them in order, and asks again, until the task's last
// event. Each event carries its id (EventsExtension); a subscriber that
// lost its stream resubscribes — to this replica or another, now or after
// a restart — naming the last id it has, and gets every later event, none
// twice.

// followWait is how long one ask for the next events waits when there is
// none: short enough that a stream whose client left is given up soon
// after, long enough to cost little.
const followWait = 20 * time.Second

// follow sends the task's events after seq after to yield, until the
// task's last event, the client leaving or a failure (sent as an error).
func (h *handler) follow(ctx context.Context, in *inboundv1.Inbound, after int64, yield func(a2a.Event, error) bool) {
	if a2alink.Ended(in) && in.GetVersion() <= after {
		return
	}
	// Each ask is one call, within the edge's call timeout; the stream
	// lasts as long as its client stays.
	wait := followWait
	if t := h.g.cfg.Clients.Timeout; t > 0 && t-2*time.Second < wait {
		wait = max(t-2*time.Second, 0)
	}
	for ctx.Err() == nil {
		res, err := h.g.inbound.ListInboundEvents(as(ctx, 0), &inboundv1.ListInboundEventsRequest{
			TaskId: in.GetTaskId(), AfterSeq: after, WaitSeconds: int32(wait / time.Second)})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			yield(nil, h.fault(ctx, "SubscribeToTask", err))
			return
		}
		if wait < time.Second && len(res.GetEvents()) == 0 {
			// A call timeout too short to wait in: ask again a little later.
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		cur := res.GetInbound()
		for _, ev := range res.GetEvents() {
			if !yield(a2alink.Event(cur, ev), nil) {
				return
			}
			after = ev.GetSeq()
			if a2alink.Final(ev) {
				return
			}
		}
		if a2alink.Ended(cur) && cur.GetVersion() <= after {
			return
		}
	}
}
