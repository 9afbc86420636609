package temporalclient

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

func TestCallsToTemporalEndBeforeTheirCallersDeadline(t *testing.T) {
	var got time.Time
	var had bool
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		got, had = ctx.Deadline()
		return nil
	}
	dl := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	if err := leaveReplyMargin(ctx, "/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution", nil, nil, nil, invoker); err != nil {
		t.Fatal(err)
	}
	if !had || !got.Equal(dl.Add(-ReplyMargin)) {
		t.Errorf("the call to Temporal ends at %v (deadline %v), want %s before the caller's %v", got, had, ReplyMargin, dl)
	}
	// A short deadline (an SDK call's own, such as a heartbeat's) loses a
	// tenth of it.
	dl = time.Now().Add(time.Second)
	short, cancelShort := context.WithDeadline(context.Background(), dl)
	defer cancelShort()
	if err := leaveReplyMargin(short, "/m", nil, nil, nil, invoker); err != nil || !had || got.Before(dl.Add(-time.Second/10)) || !got.Before(dl) {
		t.Errorf("a call with 1s left ends at %v, want within a tenth of a second before %v", got, dl)
	}
	if err := leaveReplyMargin(context.Background(), "/m", nil, nil, nil, invoker); err != nil || had {
		t.Errorf("a call without a deadline got one: %v (%v)", got, err)
	}
}
