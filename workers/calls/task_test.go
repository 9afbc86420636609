package calls_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// alice is purgeInput's caller, as an answer names it.
var alice = &callsv1.Caller{Subject: "alice", Agent: "agent-1"}

// answerOutcome is what one answer update got.
type answerOutcome struct {
	rejected error
	result   *callsv1.AnswerResult
	err      error
}

// answer sends an answer update after delay, recording its outcome.
func (h *harness) answer(delay time.Duration, caller *callsv1.Caller, answers map[string]*callsv1.Answer, out *answerOutcome) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(calls.AnswerUpdate().Name, fmt.Sprintf("a-%s", delay), &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { out.rejected = err },
			OnComplete: func(v any, err error) {
				out.err = err
				if err == nil {
					out.result = v.(*callsv1.AnswerResult)
				}
			},
		}, &callsv1.AnswerRequest{Caller: caller, Answers: answers})
	}, delay)
}

// view queries the task view after delay.
func (h *harness) view(delay time.Duration, out **callsv1.TaskView) {
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(calls.TaskQuery().Name)
		if err != nil {
			h.t.Errorf("task query: %v", err)
			return
		}
		var tv callsv1.TaskView
		if err := v.Get(&tv); err != nil {
			h.t.Errorf("task query result: %v", err)
			return
		}
		*out = &tv
	}, delay)
}

// twoQuestions is testing_purge as a task that asks two questions at once:
// the agent and a note.
func twoQuestions(t *testing.T) *callsv1.ElicitedCallInput {
	in := purgeInput(t)
	in.Task, in.Admin = true, false
	in.Arguments = `{"scope":"notes"}`
	in.Steps = []*callsv1.Step{{Kind: callsv1.StepKind_STEP_KIND_QUESTIONS, Questions: []*callsv1.StepQuestion{
		{Name: "agent", Fields: []string{"agent_id"}, Message: "Purge which agent's {{.scope}}?", RequestedSchema: mustStruct(t, map[string]any{
			"type": "object", "properties": map[string]any{"agent_id": map[string]any{"type": "string", "minLength": 1}}, "required": []any{"agent_id"}})},
		{Name: "note", Fields: []string{"note"}, Message: "Why?", RequestedSchema: mustStruct(t, map[string]any{
			"type": "object", "properties": map[string]any{"note": map[string]any{"type": "string"}}, "required": []any{"note"}})},
	}}}
	return in
}

// A task that asks nothing runs its side effect once, in the background:
// round 0 answers at once that it is a task, and its result is the
// workflow's.
func TestTaskRunsItsSideEffectOnceInTheBackground(t *testing.T) {
	h := newHarness(t)
	in := purgeInput(t)
	in.Task, in.Steps = true, nil
	in.Arguments = `{"agent_id":"agent-9","confirm":true,"reason":"r"}`
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.run(in)
	if o0.result == nil || !o0.result.GetTask() || len(o0.result.GetQuestions()) != 0 || o0.result.GetEnvelope() != "" {
		t.Fatalf("round 0 = %v (rejected %v, err %v); want a task with no questions and no result yet", o0.result, o0.rejected, o0.err)
	}
	var res callsv1.RoundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || !strings.Contains(res.GetEnvelope(), `"removed":2`) || res.GetCallId() != calls.IdempotencyKey(testStartOptions().ID) {
		t.Fatalf("workflow result = %v, %v; want the side effect's envelope under the call's key", &res, err)
	}
	// The service call is given the task's longest life; the task's
	// deadline (the task call timeout, unless extended) is a timer beside
	// it.
	if len(h.invokes) != 1 || !h.invokes[0].GetAudit() || h.invokes[0].GetTimeout().AsDuration() != toolcall.MaxTaskLifetime {
		t.Errorf("invokes = %v; want one, audited, with the task's longest life as its deadline", h.invokes)
	}
	if want := []string{"running", "succeeded"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// A task's questions are out at once and answered in any order, one update
// at a time: an answer for another key is ignored and named, one that does
// not fit its form or comes from another caller is refused and changes
// nothing, and the side effect runs once, with both answers, after the last.
func TestTaskQuestionsAreAnsweredInAnyOrder(t *testing.T) {
	h := newHarness(t)
	var o0 outcome
	var wrongType, partial, stranger, foreign, last answerOutcome
	var afterPartial *callsv1.TaskView
	h.round(0, 0, digest, nil, &o0)
	h.answer(1*time.Minute, alice, map[string]*callsv1.Answer{"r1.note": accept(t, map[string]any{"note": 42})}, &wrongType)
	h.answer(2*time.Minute, alice, map[string]*callsv1.Answer{"r1.note": accept(t, map[string]any{"note": "tidy"}), "r0.nope": accept(t, map[string]any{})}, &partial)
	h.view(3*time.Minute, &afterPartial)
	h.answer(4*time.Minute, &callsv1.Caller{Subject: "mallory", Agent: "agent-1"}, map[string]*callsv1.Answer{"r1.agent": accept(t, map[string]any{"agent_id": "agent-6"})}, &stranger)
	h.answer(5*time.Minute, alice, map[string]*callsv1.Answer{"r1.agent": accept(t, map[string]any{})}, &foreign)
	h.answer(6*time.Minute, alice, map[string]*callsv1.Answer{"r1.agent": accept(t, map[string]any{"agent_id": "agent-9"}), "r1.note": accept(t, map[string]any{"note": "again"})}, &last)
	h.run(twoQuestions(t))

	if o0.result == nil || !o0.result.GetTask() || len(o0.result.GetQuestions()) != 2 {
		t.Fatalf("round 0 = %v; want a task asking two questions", o0.result)
	}
	if q := o0.result.GetQuestions(); q[0].GetKey() != "r1.agent" || q[0].GetMessage() != "Purge which agent's notes?" || q[1].GetKey() != "r1.note" {
		t.Errorf("questions = %v; want r1.agent (its message rendered over the arguments) and r1.note", q)
	}
	var refused *temporal.ApplicationError
	if !errors.As(wrongType.rejected, &refused) || refused.Type() != calls.AnswerRefused || !strings.Contains(refused.Error(), "r1.note") {
		t.Errorf("an answer of the wrong type: %v; want refused naming r1.note", wrongType.rejected)
	}
	if partial.result == nil || !slices.Equal(partial.result.GetIgnored(), []string{"r0.nope"}) {
		t.Errorf("partial answer = %v (%v, %v); want acknowledged, r0.nope ignored", partial.result, partial.rejected, partial.err)
	}
	if afterPartial == nil || len(afterPartial.GetQuestions()) != 1 || afterPartial.GetQuestions()[0].GetKey() != "r1.agent" {
		t.Errorf("task view after the partial answer = %v; want only r1.agent out", afterPartial)
	}
	if stranger.rejected == nil || foreign.rejected == nil {
		t.Errorf("another caller's answer: %v; an answer missing its field: %v; want both refused", stranger.rejected, foreign.rejected)
	}
	if last.result == nil || !slices.Equal(last.result.GetIgnored(), []string{"r1.note"}) {
		t.Errorf("last answer = %v (%v, %v); want acknowledged, the answered r1.note ignored", last.result, last.rejected, last.err)
	}
	if len(h.invokes) != 1 || h.invokes[0].GetArguments() != `{"agent_id":"agent-9","note":"tidy","scope":"notes"}` {
		t.Fatalf("invokes = %v; want one with both first answers", h.invokes)
	}
}

// A task whose input is incomplete asks its FIELDS in rounds first, and is
// not a task until its next question (here the admin confirmation); from
// then on a round is refused and answers go through the answer update.
func TestTaskAfterItsFieldsRounds(t *testing.T) {
	h := newHarness(t)
	in := purgeInput(t)
	in.Task = true
	var o0, o1, roundAfter outcome
	var done answerOutcome
	h.round(0, 0, digest, nil, &o0)
	h.round(time.Minute, 1, digest, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}, &o1)
	h.round(2*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "r"})}, &roundAfter)
	h.answer(3*time.Minute, alice, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "cleanup"})}, &done)
	h.run(in)

	if q := question(t, o0, 1, "r1.fields"); o0.result.GetTask() || q == nil {
		t.Errorf("round 0 = %v; want the fields asked before the call is a task", o0.result)
	}
	if question(t, o1, 2, "r2.admin"); !o1.result.GetTask() {
		t.Errorf("round 1 = %v; want the confirmation asked by the task", o1.result)
	}
	if roundAfter.rejected == nil {
		t.Errorf("a round of a call that is a task was not refused")
	}
	if done.result == nil || len(h.invokes) != 1 || !strings.Contains(h.invokes[0].GetArguments(), `"reason":"cleanup"`) {
		t.Errorf("answer = %v (%v); invokes %v; want the side effect once with the answer", done.result, done.rejected, h.invokes)
	}
	if want := []string{"waiting", "running", "succeeded"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// Declining a task's question ends the task, completed with a declined
// result; nothing runs.
func TestDeclinedTaskQuestionEndsTheTask(t *testing.T) {
	h := newHarness(t)
	var o0 outcome
	var declined answerOutcome
	h.round(0, 0, digest, nil, &o0)
	h.answer(time.Minute, alice, map[string]*callsv1.Answer{"r1.note": {Action: callsv1.Action_ACTION_DECLINE}}, &declined)
	h.run(twoQuestions(t))
	var res callsv1.RoundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || !strings.Contains(res.GetEnvelope(), toolcall.CodeDeclined) || len(h.invokes) != 0 {
		t.Errorf("result = %v, %v after %d invocations; want declined, nothing run", &res, err, len(h.invokes))
	}
}

// Cancelling the workflow of a running task cancels its service call: the
// activity's context ends, and the workflow ends cancelled at once.
func TestCancelledTaskCancelsItsServiceCall(t *testing.T) {
	h := newHarness(t)
	in := purgeInput(t)
	in.Task, in.Steps = true, nil
	in.Arguments = `{"agent_id":"agent-9","confirm":true,"reason":"r"}`
	stopped := make(chan error, 1)
	h.invokeActivity = func(ctx context.Context, _ *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		// The test environment's clock stands still while an activity
		// runs: the running call's client cancels it (tasks/cancel).
		h.env.CancelWorkflow()
		// It learns of the cancellation at a heartbeat, as Invoke does.
		for ctx.Err() == nil {
			activity.RecordHeartbeat(ctx)
			time.Sleep(10 * time.Millisecond)
		}
		stopped <- ctx.Err()
		return nil, ctx.Err()
	}
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.run(in)
	var canceled *temporal.CanceledError
	if err := h.env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Errorf("workflow error = %v, want cancelled", err)
	}
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the service call ended with %v, want cancelled", err)
		}
	case <-time.After(time.Minute):
		t.Error("the service call was not cancelled")
	}
	if want := []string{"running", "cancelled"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// On a real server, with the real activities: cancelling a task's workflow
// while its service call runs cuts the call short — the activity learns of
// it at its next heartbeat — so the side effect is never applied, and the
// task ends cancelled at once.
func TestCancelledTaskCutsItsServiceCallShort(t *testing.T) {
	backend := testingsvc.NewWith(testingsvc.Options{Delays: map[string]time.Duration{"Purge": time.Hour}})
	srv := servertest.Start(t, backend.Server())
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")},
		Services:   map[string]string{testingv1connect.TestingServiceName: srv.URL},
		HTTPClient: srv.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t)
	queue := "calls-" + randomHex(4)
	workflowtest.StartWorker(t, c, queue, func(r worker.Registry) { calls.Register(r, acts) })
	in := purgeInput(t)
	in.Task, in.Steps = true, nil
	in.Arguments = `{"agent_id":"agent-1","confirm":true,"reason":"tidy up"}`
	id := callID(t)
	ctx := context.Background()
	run, first, err := startCall(ctx, c, queue, id, in)
	if err != nil || !first.GetTask() {
		t.Fatalf("start = %v, %v; want a task", first, err)
	}
	waitFor(t, "the purge to reach the service", func() bool { return backend.Calls("Purge") == 1 })
	if err := c.CancelWorkflow(ctx, id, run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	var canceled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Errorf("the task's workflow ended with %v, want cancelled", err)
	}
	waitFor(t, "the purge to be cut short", func() bool { return backend.Calls("Purge.cancelled") == 1 })
	if n := backend.Executions("Purge"); n != 0 {
		t.Errorf("the purge was applied %d times", n)
	}
}

// waitFor polls cond, generously bounded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}
