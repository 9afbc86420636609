package remoteagents_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

var start = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

const endpoint = "https://agents.example.com/a2a/agents/travel"

// wfEnv is one invoke workflow under the Temporal test suite: the remote
// agent is a script of task states, one per poll; what the workflow asked
// of it and recorded is kept.
type wfEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu        sync.Mutex
	polls     []time.Time // when GetTask ran (workflow time)
	cancelled []remoteagents.TaskRef
	recorded  []*remoteagentsv1.RecordInvocationOutcomeRequest
	statuses  []string
	// stream is StreamMessage when the agent streams.
	stream func(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) (remoteagents.Remote, error)
}

// newWfEnv runs the workflow against a remote agent whose send answers
// sent (or fails with sendErr) and whose polls answer the states in turn
// (the last one repeating), each with answer once it is completed.
func newWfEnv(t *testing.T, sent remoteagents.Remote, sendErr error, states ...string) *wfEnv {
	t.Helper()
	env := &wfEnv{TestWorkflowEnvironment: workflowtest.NewEnv()}
	env.SetStartTime(start)
	remoteagents.Register(env, &remoteagents.Activities{})
	// Unless the test sets env.stream (an agent that streams),
	// StreamMessage (the send of today's workflows) sends as SendMessage
	// (that of older histories) does.
	for _, name := range []string{remoteagents.ActivitySendMessage, remoteagents.ActivityStreamMessage} {
		env.OnActivity(name, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) (remoteagents.Remote, error) {
				if env.stream != nil && name == remoteagents.ActivityStreamMessage {
					return env.stream(ctx, in)
				}
				return sent, sendErr
			})
	}
	env.OnActivity(remoteagents.ActivityGetTask, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref remoteagents.TaskRef) (remoteagents.Remote, error) {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.polls = append(env.polls, env.Now())
			st := states[min(len(env.polls), len(states))-1]
			r := remoteagents.Remote{Endpoint: ref.Endpoint, TaskID: ref.TaskID, ContextID: "ctx-1", State: st}
			if st == "completed" {
				r.Answer = "Booked: flight LH 400."
			}
			return r, nil
		})
	env.OnActivity(remoteagents.ActivityCancelTask, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref remoteagents.TaskRef) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.cancelled = append(env.cancelled, ref)
			return nil
		})
	env.OnActivity(remoteagents.ActivityRecordOutcome, mock.Anything, mock.Anything).Return(
		func(_ context.Context, req *remoteagentsv1.RecordInvocationOutcomeRequest) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.recorded = append(env.recorded, req)
			return nil
		})
	workflowtest.OnStatus(env.TestWorkflowEnvironment, func(status string) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.statuses = append(env.statuses, status)
	})
	return env
}

func input() *remoteagentsv1.InvokeWorkflowInput {
	return &remoteagentsv1.InvokeWorkflowInput{
		InvocationId: "inv_01jd8xw0000000000000000000",
		AgentId:      "planner",
		Depth:        1,
		Url:          "https://agents.example.com/a2a/agents/travel/",
		Message:      "Book a flight to Berlin.",
		MessageId:    "inv_01jd8xw0000000000000000000",
		ExpireTime:   timestamppb.New(start.Add(time.Hour)),
		Tool:         "remoteagents_invoke",
	}
}

func (e *wfEnv) result(t *testing.T) *remoteagentsv1.InvokeOutcome {
	t.Helper()
	if !e.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var out remoteagentsv1.InvokeOutcome
	if err := e.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func (e *wfEnv) status(t *testing.T) *remoteagentsv1.InvokeOutcome {
	t.Helper()
	v, err := e.QueryWorkflow("status")
	if err != nil {
		t.Fatalf("status query: %v", err)
	}
	var out remoteagentsv1.InvokeOutcome
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func (e *wfEnv) recordedOnce(t *testing.T, want remoteagentsv1.InvocationStatus) *remoteagentsv1.RecordInvocationOutcomeRequest {
	t.Helper()
	if len(e.recorded) != 1 || e.recorded[0].GetStatus() != want {
		t.Fatalf("recorded %v, want one %v", e.recorded, want)
	}
	return e.recorded[0]
}

func TestAnswerByMessageEndsAtOnce(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, ContextID: "ctx-1", State: "completed", Answer: "Hello from the agent."}, nil)
	env.ExecuteWorkflow("remoteagents.invoke", input())
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || got.GetAnswer() != "Hello from the agent." || got.GetTaskId() != "" {
		t.Errorf("result = %v, want completed with the message's answer", got)
	}
	if len(env.polls) != 0 {
		t.Errorf("polled %d times after a message answer", len(env.polls))
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED)
	if len(env.statuses) != 1 || env.statuses[0] != remoteagents.StatusCompleted {
		t.Errorf("ToolmeshStatus upserts %q, want [completed]", env.statuses)
	}
}

func TestWorkingTaskIsPolledUntilItEnds(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, TaskID: "task-1", ContextID: "ctx-1", State: "submitted"}, nil,
		"working", "working", "working", "completed")
	var during *remoteagentsv1.InvokeOutcome
	env.RegisterDelayedCallback(func() { during = env.status(t) }, 2*time.Second)
	env.ExecuteWorkflow("remoteagents.invoke", input())
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || got.GetAnswer() != "Booked: flight LH 400." ||
		got.GetTaskId() != "task-1" || got.GetRemoteState() != "completed" {
		t.Errorf("result = %v, want completed with the task's answer", got)
	}
	if during.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING || during.GetTaskId() != "task-1" || during.GetRemoteState() != "working" {
		t.Errorf("status query while working = %v, want working on task-1", during)
	}
	// Polled at 1, 3, 7 and 15 seconds: each wait twice the last.
	var at []time.Duration
	for _, p := range env.polls {
		at = append(at, p.Sub(start))
	}
	if want := []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}; len(at) != len(want) || at[0] != want[0] || at[3] != want[3] {
		t.Errorf("polled at %v, want %v", at, want)
	}
	rec := env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED)
	if rec.GetAnswer() != "Booked: flight LH 400." || rec.GetTaskId() != "task-1" {
		t.Errorf("recorded %v, want the answer and the task", rec)
	}
}

func TestPollsSpreadOutToTheMaximum(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, TaskID: "task-1", State: "working"}, nil, "working")
	in := input()
	in.ExpireTime = timestamppb.New(start.Add(10 * time.Minute))
	env.ExecuteWorkflow("remoteagents.invoke", in)
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED || got.GetError() == "" {
		t.Errorf("result = %v, want failed: the remote agent did not finish in time", got)
	}
	// 1+2+4+8 s, then every 10 s up to the ten minutes: about 63 polls,
	// never more than 10 s apart.
	if n := len(env.polls); n < 60 || n > 64 {
		t.Errorf("polled %d times in ten minutes, want about 63", n)
	}
	for i := 1; i < len(env.polls); i++ {
		if gap := env.polls[i].Sub(env.polls[i-1]); gap > remoteagents.MaxPoll {
			t.Errorf("poll %d came %v after the one before, more than %v", i, gap, remoteagents.MaxPoll)
		}
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED)
}

func TestCancelCancelsTheRemoteTask(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, TaskID: "task-1", State: "working"}, nil, "working")
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Minute)
	env.ExecuteWorkflow("remoteagents.invoke", input())
	if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
		t.Fatalf("workflow error = %v, want cancelled", env.GetWorkflowError())
	}
	if len(env.cancelled) != 1 || env.cancelled[0] != (remoteagents.TaskRef{Endpoint: endpoint, TaskID: "task-1"}) {
		t.Errorf("remote cancels %v, want task-1 once", env.cancelled)
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED)
}

func TestInputRequiredEndsTheInvocation(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, TaskID: "task-1", State: "working"}, nil, "input-required")
	env.ExecuteWorkflow("remoteagents.invoke", input())
	if got := env.result(t); got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_INPUT_REQUIRED || got.GetTaskId() != "task-1" {
		t.Errorf("result = %v, want input required on task-1", got)
	}
}

func TestRefusedSendFailsWithTheReason(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{}, temporal.NewNonRetryableApplicationError("the agent card could not be read: the agent answered 404 Not Found",
		remoteagents.ErrTypeRefused, nil))
	env.ExecuteWorkflow("remoteagents.invoke", input())
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED || got.GetError() != "the agent card could not be read: the agent answered 404 Not Found" {
		t.Errorf("result = %v, want failed with the reason", got)
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED)
}

// TestAStreamedTaskIsNotPolled: when the agent streams, StreamMessage
// follows the task to its end and the workflow records it without a poll.
func TestAStreamedTaskIsNotPolled(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{}, nil)
	env.stream = func(context.Context, *remoteagentsv1.InvokeWorkflowInput) (remoteagents.Remote, error) {
		return remoteagents.Remote{Endpoint: endpoint, Version: "1.0", Binding: "JSONRPC", Streaming: true, TaskID: "task-1", ContextID: "ctx-1",
			State: "completed", Answer: "LH 400, seat 12A"}, nil
	}
	env.ExecuteWorkflow("remoteagents.invoke", input())
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || got.GetAnswer() != "LH 400, seat 12A" || got.GetTaskId() != "task-1" {
		t.Errorf("result = %v, want completed with the streamed task's answer", got)
	}
	if len(env.polls) != 0 {
		t.Errorf("polled %d times a task the stream followed to its end", len(env.polls))
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED)
}

// TestCancelOfAStreamEndsTheInvocation: cancelling the workflow while
// StreamMessage follows the task cancels the activity and the invocation.
// (That the workflow then cancels the remote task the activity names in
// its cancellation's details is tested against a real Temporal server,
// TestRemoteAgentProgressReachesTheMCPCaller: the test environment drops
// a cancelled activity's details.)
func TestCancelOfAStreamEndsTheInvocation(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{}, nil)
	env.stream = func(ctx context.Context, _ *remoteagentsv1.InvokeWorkflowInput) (remoteagents.Remote, error) {
		// Cancelled while it follows the stream.
		go env.CancelWorkflow()
		<-ctx.Done()
		return remoteagents.Remote{}, temporal.NewCanceledError(remoteagents.Remote{Endpoint: endpoint, Version: "1.0", Binding: "JSONRPC",
			Streaming: true, TaskID: "task-1", State: "working"})
	}
	env.ExecuteWorkflow("remoteagents.invoke", input())
	if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
		t.Fatalf("workflow error = %v, want cancelled", env.GetWorkflowError())
	}
	env.recordedOnce(t, remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED)
}

// TestAnExtendedInvocationOutlivesItsFirstExpiry: an invocation that
// expires a minute after it started is extended to ten minutes at 30 s; the
// remote task, done after about 75 s of polling, is still followed and its
// answer kept. The extension is audited once; an expiry that is not later,
// and any extension once the invocation has ended, are refused.
func TestAnExtendedInvocationOutlivesItsFirstExpiry(t *testing.T) {
	states := []string{"working", "working", "working", "working", "working", "working", "working", "working", "working", "completed"}
	env := newWfEnv(t, remoteagents.Remote{Endpoint: endpoint, TaskID: "task-1", State: "submitted"}, nil, states...)
	var audited []*remoteagentsv1.ExtendInvocationUpdate
	env.OnActivity(remoteagents.ActivityRecordExtension, mock.Anything, mock.Anything).Return(
		func(_ context.Context, up *remoteagentsv1.ExtendInvocationUpdate) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			audited = append(audited, up)
			return nil
		})
	in := input()
	in.ExpireTime = timestamppb.New(start.Add(time.Minute))
	extend := func(id string, to time.Duration, accepted *bool, refused *error) {
		env.UpdateWorkflow("extend", id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { *refused = err }, OnAccept: func() { *accepted = true }, OnComplete: func(any, error) {}},
			&remoteagentsv1.ExtendInvocationUpdate{ExpireTime: timestamppb.New(start.Add(to)), Reason: "the agent books slowly", RequestedBy: "planner-subject",
				CallId: "ext_1", Request: &remoteagentsv1.ExtendInvocationRequest{InvocationId: in.GetInvocationId(), ExtendSeconds: 540, Reason: "the agent books slowly"}})
	}
	var earlier, later bool
	var earlierErr, laterErr error
	env.RegisterDelayedCallback(func() {
		extend("x0", 30*time.Second, &earlier, &earlierErr)
		extend("x1", 10*time.Minute, &later, &laterErr)
	}, 30*time.Second)
	env.ExecuteWorkflow("remoteagents.invoke", in)
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || got.GetAnswer() != "Booked: flight LH 400." {
		t.Fatalf("result = %v, want completed with the answer after the first expiry", got)
	}
	if last := env.polls[len(env.polls)-1].Sub(start); last <= time.Minute {
		t.Errorf("the last poll came %v after the start, want after the first expiry (1m)", last)
	}
	if !got.GetExpireTime().AsTime().Equal(start.Add(10 * time.Minute)) {
		t.Errorf("expire_time = %v, want the extension's", got.GetExpireTime().AsTime())
	}
	if earlier || earlierErr == nil || !later || laterErr != nil {
		t.Errorf("an expiry before the current one: accepted %v (%v); a later one: accepted %v (%v)", earlier, earlierErr, later, laterErr)
	}
	if len(audited) != 1 || audited[0].GetReason() != "the agent books slowly" || audited[0].GetRequestedBy() != "planner-subject" {
		t.Errorf("audited %v, want the one extension with its reason and actor", audited)
	}
}

// TestAStreamExtendedPastItsExpiryIsPolled: the stream of an invocation
// extended while it was followed runs out at the old expiry; the task is
// then polled from where the stream's heartbeat left it, to its answer.
func TestAStreamExtendedPastItsExpiryIsPolled(t *testing.T) {
	env := newWfEnv(t, remoteagents.Remote{}, nil, "working", "completed")
	env.OnActivity(remoteagents.ActivityRecordExtension, mock.Anything, mock.Anything).Return(nil)
	in := input()
	in.ExpireTime = timestamppb.New(start.Add(time.Minute))
	// Extended while the stream is followed (the update is sent by the
	// test environment's own loop, as the stream starts); the stream then
	// runs out at the old expiry.
	accepted := make(chan struct{})
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow("extend", "x1", &testsuite.TestUpdateCallback{OnReject: func(err error) { t.Errorf("extension refused: %v", err); close(accepted) },
			OnAccept: func() { close(accepted) }, OnComplete: func(any, error) {}},
			&remoteagentsv1.ExtendInvocationUpdate{ExpireTime: timestamppb.New(start.Add(time.Hour)), Reason: "slow", RequestedBy: "planner-subject"})
	}, 0)
	env.stream = func(context.Context, *remoteagentsv1.InvokeWorkflowInput) (remoteagents.Remote, error) {
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			return remoteagents.Remote{}, errors.New("the extension was not accepted while the stream was followed")
		}
		return remoteagents.Remote{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil,
			remoteagents.Mark{Remote: remoteagents.Remote{Endpoint: endpoint, Version: "1.0", Binding: "JSONRPC", Streaming: true, TaskID: "task-1", State: "working"}})
	}
	env.ExecuteWorkflow("remoteagents.invoke", in)
	got := env.result(t)
	if got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || got.GetTaskId() != "task-1" || len(env.polls) != 2 {
		t.Errorf("result = %v after %d polls, want completed by polling task-1 twice", got, len(env.polls))
	}
}
