package calls

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// A call that is an MCP task: its questions are answered with the answer
// update, the task query shows where it is, and its side effect runs in the
// main loop, in an activity that heartbeats so that cancelling the workflow
// cancels the service call.

// TaskHeartbeat is how long a task's side effect may go without a heartbeat
// before its attempt is given up; the activity beats more often than that,
// and learns at a beat that the workflow was cancelled.
const TaskHeartbeat = 10 * time.Second

// Refusals of the answer validator; each leaves no trace in the history.
var (
	errNotTask    = errors.New("the call is not an MCP task")
	errNotWaiting = errors.New("the task is not waiting for answers")
	errCaller     = errors.New("the task is another caller's")
)

// AnswerRefused is the failure type of an answer that does not fit its
// question's form: the update is refused, with the key and the fault.
const AnswerRefused = "AnswerRefused"

// handleTask registers the answer update and the task query.
func (c *call) handleTask(ctx workflow.Context) error {
	answer := AnswerUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, answer.Name, c.onAnswer, workflow.UpdateHandlerOptions{
		Validator:   c.validateAnswer,
		Description: answer.Description,
	}); err != nil {
		return err
	}
	view := TaskQuery()
	return workflow.SetQueryHandlerWithOptions(ctx, view.Name, c.view, workflow.QueryHandlerOptions{Description: view.Description})
}

// validateAnswer refuses answers that cannot apply: to a call that is not a
// task, is over, is busy, is not waiting, or is another caller's, and any
// answer to a question out that does not fit its form (in full: a task's
// question is not asked again for what an answer lacks). Answers to other
// keys are let through, to be ignored.
func (c *call) validateAnswer(req *callsv1.AnswerRequest) error {
	caller := c.in.GetCaller()
	switch {
	case !c.task:
		return errNotTask
	case c.done:
		return errOver
	case c.busy:
		return errBusy
	case req.GetCaller().GetSubject() != caller.GetSubject() || req.GetCaller().GetAgent() != caller.GetAgent():
		return errCaller
	case len(c.pending) == 0:
		return errNotWaiting
	}
	for _, q := range c.pending {
		a, ok := req.GetAnswers()[q.key]
		if !ok {
			continue
		}
		if err := fits(q, a); err != nil {
			return temporal.NewApplicationError(fmt.Sprintf("%s: %v", q.key, err), AnswerRefused)
		}
	}
	return nil
}

// fits checks an answer against its question's form.
func fits(q *pending, a *callsv1.Answer) error {
	switch a.GetAction() {
	case callsv1.Action_ACTION_DECLINE, callsv1.Action_ACTION_CANCEL:
		return nil
	case callsv1.Action_ACTION_ACCEPT:
	default:
		return errors.New("the answer has no action (accept, decline or cancel)")
	}
	if q.input == callsv1.InputKind_INPUT_KIND_URL {
		// A visit's answer is the action alone.
		return nil
	}
	if q.fromClient() && q.fallback != "" {
		// An answer that does not fit is dropped for the fallback.
		return nil
	}
	content, err := q.contentOf(a)
	if err != nil {
		return err
	}
	if missing := toolschema.Missing(q.schema, content); len(missing) > 0 {
		return fmt.Errorf("still needed: %s", strings.Join(toolschema.Titles(q.schema, missing), ", "))
	}
	return toolschema.ValidateAnswer(q.schema, content)
}

// onAnswer applies the answers to questions out and, once none is out, goes
// on: the next question, or the side effect. Answers to other keys are
// ignored and named in the result.
func (c *call) onAnswer(ctx workflow.Context, req *callsv1.AnswerRequest) (*callsv1.AnswerResult, error) {
	// Guards an answer delivered before a handler that was validated with
	// it ran: the validator refused it in every other case.
	if c.busy || c.done || len(c.pending) == 0 {
		return nil, temporal.NewNonRetryableApplicationError(errNotWaiting.Error(), "NotWaiting", nil)
	}
	c.busy = true
	defer func() { c.busy = false }()
	res := &callsv1.AnswerResult{}
	// Sorted right after.
	//workflowcheck:ignore
	for key := range req.GetAnswers() {
		if !slices.ContainsFunc(c.pending, func(q *pending) bool { return q.key == key }) {
			res.Ignored = append(res.Ignored, key)
		}
	}
	slices.Sort(res.Ignored)
	var left []*pending
	for _, q := range c.pending {
		a, ok := req.GetAnswers()[q.key]
		if !ok {
			left = append(left, q)
			continue
		}
		end, again := c.applyOne(ctx, q, a)
		if end != nil {
			return res, nil // declined: the call is over
		}
		if again != "" {
			// Not for an answer the validator let through; kept out.
			left = append(left, q)
		}
	}
	c.pending = left
	if len(left) > 0 {
		c.changed(ctx, fmt.Sprintf("Waiting for the answers to %d question(s).", len(left)))
		c.current = &callsv1.RoundResult{Round: c.round, Task: true, Questions: questionsOf(left)}
		return res, nil
	}
	c.step++
	c.next(ctx)
	return res, nil
}

// readyToRun makes the call, a task that asks nothing more, run its side
// effect in the main loop.
func (c *call) readyToRun(ctx workflow.Context) *callsv1.RoundResult {
	c.task, c.ready = true, true
	c.pending = nil
	c.changed(ctx, fmt.Sprintf("Running %s.", c.in.GetTool()))
	c.status(ctx, StatusRunning)
	c.current = &callsv1.RoundResult{Round: c.round, Task: true}
	return c.current
}

// runTask runs a task's side effect once and ends the call with its result;
// it returns the cancellation when the workflow was cancelled meanwhile.
func (c *call) runTask(ctx workflow.Context) error {
	c.ready = false
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Running `%s` (an MCP task) after %d round(s) of questions.", c.in.GetTool(), c.round))
	timeout := durationOr(c.in.GetTaskCallTimeout(), toolcall.DefaultTaskCallTimeout)
	retry := toolcall.RetryOf(timeout)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    retry.Attempt,
		ScheduleToCloseTimeout: retry.Budget(),
		HeartbeatTimeout:       TaskHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    retry.Interval,
			BackoffCoefficient: retry.Backoff,
			MaximumAttempts:    retry.Attempts,
		},
		Summary: c.in.GetTool(),
	})
	var out callsv1.InvokeOutput
	err := workflow.ExecuteActivity(actx, ActivityInvoke, &callsv1.InvokeInput{
		Tool:           c.in.GetTool(),
		Arguments:      c.arguments(),
		Caller:         c.in.GetCaller(),
		IdempotencyKey: c.key(ctx),
		Audit:          c.in.GetAdmin(),
		Timeout:        durationpb.New(timeout),
	}).Get(actx, &out)
	var env *toolcall.Envelope
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		env = failedAttempts(c.in.GetTool(), err)
	default:
		env = envelopeOf(c.in.GetTool(), &out)
	}
	if env.Visit != nil && c.in.GetUrl() {
		// The service asks for a visit first: the task waits for it.
		c.askVisit(ctx, env.Visit)
		return nil
	}
	status := StatusSucceeded
	if env.IsError() {
		status = StatusFailed
	}
	c.callID = c.key(ctx)
	c.finish(ctx, env, status).CallId = c.callID
	return nil
}

// view is where the call is, as an MCP task.
func (c *call) view() (*callsv1.TaskView, error) {
	v := &callsv1.TaskView{Task: c.task, Message: c.message, UpdateTime: timestamppb.New(c.updated)}
	if c.task && !c.done {
		v.Questions = questionsOf(c.pending)
	}
	return v, nil
}

func questionsOf(qs []*pending) []*callsv1.Question {
	out := make([]*callsv1.Question, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.question())
	}
	return out
}
