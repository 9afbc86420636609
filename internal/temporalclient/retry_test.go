package temporalclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
)

// invokerFailing answers WorkflowNotReady n times, then success, and counts
// the calls.
func invokerFailing(n int, calls *int) grpc.UnaryInvoker {
	return func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		*calls++
		if *calls <= n {
			return serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure.")
		}
		return nil
	}
}

// An update whose workflow task failed is sent again until it goes
// through; other calls, and other errors, are not retried; the caller's
// deadline ends the tries.
func TestUpdateNotReadyIsSentAgain(t *testing.T) {
	update := workflowservice.WorkflowService_UpdateWorkflowExecution_FullMethodName
	calls := 0
	if err := retryUpdateNotReady(t.Context(), update, nil, nil, nil, invokerFailing(3, &calls)); err != nil || calls != 4 {
		t.Errorf("update: %v after %d calls, want success on the 4th", err, calls)
	}
	calls = 0
	other := workflowservice.WorkflowService_SignalWorkflowExecution_FullMethodName
	if err := retryUpdateNotReady(t.Context(), other, nil, nil, nil, invokerFailing(1, &calls)); err == nil || calls != 1 {
		t.Errorf("signal: %v after %d calls, want the error after one", err, calls)
	}
	calls = 0
	failing := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return serviceerror.NewInvalidArgument("no")
	}
	if err := retryUpdateNotReady(t.Context(), update, nil, nil, nil, failing); err == nil || calls != 1 {
		t.Errorf("refused update: %v after %d calls, want the error after one", err, calls)
	}
	calls = 0
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := retryUpdateNotReady(ctx, update, nil, nil, nil, invokerFailing(1<<30, &calls))
	var notReady *serviceerror.WorkflowNotReady
	if !errors.As(err, &notReady) || ctx.Err() == nil {
		t.Errorf("update never ready: %v (ctx %v), want WorkflowNotReady once the deadline passed", err, ctx.Err())
	}
}
