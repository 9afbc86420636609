package calls_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// extendOutcome is what one extend update got.
type extendOutcome struct {
	rejected error
	result   *callsv1.ExtendTaskResult
	err      error
	// done, when not nil, is closed once the update is over.
	done chan struct{}
}

// extend sends an extend update after delay that moves the task's deadline
// to by(now), recording its outcome.
func (h *harness) extend(delay time.Duration, id string, caller *callsv1.Caller, reason string, by func(now time.Time) time.Time, out *extendOutcome) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(calls.ExtendUpdate().Name, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				out.rejected = err
				if out.done != nil {
					close(out.done)
				}
			},
			OnComplete: func(v any, err error) {
				out.err = err
				if err == nil {
					out.result = v.(*callsv1.ExtendTaskResult)
				}
				if out.done != nil {
					close(out.done)
				}
			},
		}, &callsv1.ExtendTaskUpdate{Caller: caller, Deadline: timestamppb.New(by(h.env.Now())), Reason: reason,
			CallId: "ext-" + id, Request: &callsv1.ExtendTaskRequest{TaskId: testStartOptions().ID, ExtendSeconds: 3600, Reason: reason}})
	}, delay)
}

// runningTask is a task that asks nothing, whose side effect runs at once
// with a deadline of timeout.
func runningTask(t *testing.T, timeout time.Duration) *callsv1.ElicitedCallInput {
	in := purgeInput(t)
	in.Task, in.Steps = true, nil
	in.Arguments = `{"agent_id":"agent-9","confirm":true,"reason":"r"}`
	in.TaskCallTimeout = durationpb.New(timeout)
	return in
}

// While a task's side effect runs the test environment's clock follows the
// wall clock, so these tests give the task a deadline of a few seconds.
const shortDeadline = 2 * time.Second

// A running task extended by its own caller outlives its first deadline:
// its service call goes on past it and the task completes with its result;
// the extension is recorded in the audit trail once, with its reason.
// Another caller's extension, one without a reason, one not later than the
// deadline and one past the task's longest life are refused and change
// nothing.
func TestExtendedTaskOutlivesItsFirstDeadline(t *testing.T) {
	h := newHarness(t)
	good := extendOutcome{done: make(chan struct{})}
	extended := good.done
	var firstDeadline time.Time
	h.invokeActivity = func(ctx context.Context, _ *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		firstDeadline = time.Now().Add(shortDeadline)
		// The call runs until it was extended and its first deadline has
		// passed, beating as Invoke does; a cancellation stops it.
		for ctx.Err() == nil {
			select {
			case <-extended:
				if time.Now().After(firstDeadline.Add(500 * time.Millisecond)) {
					return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{"removed":2}}`}, nil
				}
			default:
			}
			activity.RecordHeartbeat(ctx)
			time.Sleep(20 * time.Millisecond)
		}
		return nil, ctx.Err()
	}
	var o0 outcome
	var stranger, noReason, earlier, tooLate extendOutcome
	h.round(0, 0, digest, nil, &o0)
	later := func(now time.Time) time.Time { return now.Add(time.Hour) }
	h.extend(200*time.Millisecond, "x-stranger", &callsv1.Caller{Subject: "mallory", Agent: "agent-1"}, "mine now", later, &stranger)
	h.extend(300*time.Millisecond, "x-noreason", alice, "  ", later, &noReason)
	h.extend(400*time.Millisecond, "x-earlier", alice, "sooner", func(now time.Time) time.Time { return now.Add(time.Second) }, &earlier)
	h.extend(500*time.Millisecond, "x-toolate", alice, "forever", func(now time.Time) time.Time { return now.Add(toolcall.MaxTaskLifetime + time.Hour) }, &tooLate)
	h.extend(600*time.Millisecond, "x-good", alice, "the import is bigger than planned", later, &good)
	h.run(runningTask(t, shortDeadline))

	for name, o := range map[string]extendOutcome{"another caller's": stranger, "one without a reason": noReason, "one not later": earlier, "one past the longest life": tooLate} {
		if o.rejected == nil {
			t.Errorf("%s extension was accepted: %v", name, o.result)
		}
	}
	var refused *temporal.ApplicationError
	if !errors.As(tooLate.rejected, &refused) || refused.Type() != calls.ExtendRefused || !strings.Contains(refused.Error(), "later than the task's latest") {
		t.Errorf("an extension past the longest life: %v; want refused, saying so", tooLate.rejected)
	}
	if good.result == nil || !good.result.GetDeadline().AsTime().After(good.result.GetMaxDeadline().AsTime().Add(-toolcall.MaxTaskLifetime)) {
		t.Fatalf("the caller's extension = %v (rejected %v, err %v); want the new deadline", good.result, good.rejected, good.err)
	}
	var res callsv1.RoundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || !strings.Contains(res.GetEnvelope(), `"removed":2`) {
		t.Fatalf("workflow result = %v, %v; want the side effect's result, after the first deadline", &res, err)
	}
	if len(h.invokes) != 1 {
		t.Errorf("the side effect ran %d times, want once", len(h.invokes))
	}
	if len(h.extensions) != 1 || h.extensions[0].GetReason() != "the import is bigger than planned" || h.extensions[0].GetCaller().GetSubject() != "alice" || h.extensions[0].GetCallId() != "ext-x-good" {
		t.Errorf("audited extensions = %v; want the caller's one, with its reason and call id", h.extensions)
	}
	if want := []string{"running", "succeeded"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// A task whose deadline passes while its side effect runs is given up: its
// service call is cancelled and the task completes with deadline_exceeded
// naming the tool that extends it.
func TestTaskPastItsDeadlineIsGivenUp(t *testing.T) {
	h := newHarness(t)
	stopped := make(chan error, 1)
	h.invokeActivity = func(ctx context.Context, _ *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		for ctx.Err() == nil {
			activity.RecordHeartbeat(ctx)
			time.Sleep(20 * time.Millisecond)
		}
		stopped <- ctx.Err()
		return nil, ctx.Err()
	}
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.run(runningTask(t, shortDeadline))
	var res callsv1.RoundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || !strings.Contains(res.GetEnvelope(), toolcall.CodeDeadlineExceeded) || !strings.Contains(res.GetEnvelope(), calls.ToolExtendTask) {
		t.Fatalf("workflow result = %v, %v; want deadline_exceeded naming %s", &res, err, calls.ToolExtendTask)
	}
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the service call ended with %v, want cancelled", err)
		}
	case <-time.After(time.Minute):
		t.Error("the service call was not cancelled")
	}
	if want := []string{"running", "failed"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// A task that waits for answers has no running side effect to extend: the
// extension is refused.
func TestWaitingTaskIsNotExtended(t *testing.T) {
	h := newHarness(t)
	var o0 outcome
	var waiting extendOutcome
	h.round(0, 0, digest, nil, &o0)
	h.extend(time.Minute, "x-waiting", alice, "more time", func(now time.Time) time.Time { return now.Add(time.Hour) }, &waiting)
	h.run(twoQuestions(t))
	if waiting.rejected == nil || !strings.Contains(waiting.rejected.Error(), "not running") {
		t.Errorf("extension of a waiting task: %v (%v); want refused", waiting.rejected, waiting.result)
	}
	if len(h.extensions) != 0 {
		t.Errorf("audited extensions = %v; want none", h.extensions)
	}
}
