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
	"github.com/toolmesh/toolmesh/internal/workflowaudit"
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

// ExtendRefused is the failure type of an extension the extend update's
// validator refused: the message says why. It leaves no trace in the
// history.
const ExtendRefused = "ExtendRefused"

// ChangeTaskDeadline is the change (workflow.GetVersion) from a task's
// service call bounded by its own timeout to one bounded by the task's
// deadline, a timer beside it that an extension moves: runs that started
// their side effect before it keep the old bound on replay.
const ChangeTaskDeadline = "task-deadline"

// ToolExtendTask is the tool an extension's audit record names (the edge's
// meta-tool that sends the extend update).
const ToolExtendTask = "calls_extend_task"

// executionMargin is how long before the workflow's own execution timeout
// the latest deadline of a task is, so that the task, not Temporal, ends
// it.
const executionMargin = time.Minute

// handleTask registers the answer update and the task query.
func (c *call) handleTask(ctx workflow.Context) error {
	answer := AnswerUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, answer.Name, c.onAnswer, workflow.UpdateHandlerOptions{
		Validator:   c.validateAnswer,
		Description: answer.Description,
	}); err != nil {
		return err
	}
	extend := ExtendUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, extend.Name, c.onExtend, workflow.UpdateHandlerOptions{
		Validator:   c.validateExtend,
		Description: extend.Description,
	}); err != nil {
		return err
	}
	view := TaskQuery()
	return workflow.SetQueryHandlerWithOptions(ctx, view.Name, c.view, workflow.QueryHandlerOptions{Description: view.Description})
}

// validateExtend refuses an extension that cannot apply: to a call that is
// not a task whose side effect runs (under a deadline: ChangeTaskDeadline),
// from another caller, without a reason, or to a deadline that is not
// later than the current one or later than the task's latest.
func (c *call) validateExtend(req *callsv1.ExtendTaskUpdate) error {
	caller := c.in.GetCaller()
	refuse := func(format string, args ...any) error {
		return temporal.NewApplicationError(fmt.Sprintf(format, args...), ExtendRefused)
	}
	deadline := req.GetDeadline().AsTime()
	switch {
	case !c.task:
		return errNotTask
	case req.GetCaller().GetSubject() != caller.GetSubject() || req.GetCaller().GetAgent() != caller.GetAgent():
		return errCaller
	case c.done:
		return errOver
	case !c.running:
		return refuse("the task is not running its side effect (it waits for answers, or it is over)")
	case strings.TrimSpace(req.GetReason()) == "":
		return refuse("an extension needs a reason")
	case req.GetDeadline() == nil || !deadline.After(c.taskDeadline):
		return refuse("the new deadline %s is not later than the task's %s", stamp(deadline), stamp(c.taskDeadline))
	case deadline.After(c.taskMax):
		return refuse("the new deadline %s is later than the task's latest, %s (a task runs at most %s)", stamp(deadline), stamp(c.taskMax), toolcall.MaxTaskLifetime)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// onExtend moves the running task's deadline (the wait in runTask re-arms
// its timer) and records the extension in the audit trail beside it.
func (c *call) onExtend(ctx workflow.Context, req *callsv1.ExtendTaskUpdate) (*callsv1.ExtendTaskResult, error) {
	// Guards an extension delivered before a handler that was validated
	// with it ran.
	if !c.running || c.done {
		return nil, temporal.NewNonRetryableApplicationError("the task is not running its side effect", ExtendRefused, nil)
	}
	c.taskDeadline = req.GetDeadline().AsTime()
	if req.GetCallId() == "" { // sent from the Temporal UI or CLI
		req.CallId = "calls-extend:" + workflow.GetCurrentUpdateInfo(ctx).ID
	}
	c.changed(ctx, fmt.Sprintf("Running %s (extended until %s: %s).", c.in.GetTool(), stamp(c.taskDeadline), strings.TrimSpace(req.GetReason())))
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Running `%s` (an MCP task), extended by %s until %s.", c.in.GetTool(), req.GetCaller().GetSubject(), stamp(c.taskDeadline)))
	c.auditing++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { c.auditing-- }()
		workflowaudit.Record(ctx, ActivityRecordExtension, req, req.GetCallId(), "calls.task.extension_not_audited")
	})
	return &callsv1.ExtendTaskResult{Deadline: timestamppb.New(c.taskDeadline), MaxDeadline: timestamppb.New(c.taskMax)}, nil
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
	var env *toolcall.Envelope
	if workflow.GetVersion(ctx, ChangeTaskDeadline, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		env = c.invokeTask(ctx, timeout, toolcall.RetryOf(timeout).Budget(), nil)
	} else {
		env = c.invokeUntilDeadline(ctx, timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
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

// invokeUntilDeadline runs the task's side effect under its deadline: the
// service call is given the task's longest life (toolcall.MaxTaskLifetime),
// and a timer beside it, to the deadline, cancels it when the deadline
// passes first. An extension (onExtend) moves the deadline while it runs.
func (c *call) invokeUntilDeadline(ctx workflow.Context, timeout time.Duration) *toolcall.Envelope {
	now := workflow.Now(ctx)
	c.taskDeadline = now.Add(timeout)
	c.taskMax = now.Add(max(toolcall.MaxTaskLifetime, timeout))
	if info := workflow.GetInfo(ctx); info.WorkflowExecutionTimeout > 0 {
		// The workflow ends by itself then: no deadline goes past it.
		c.taskMax = minTime(c.taskMax, info.WorkflowStartTime.Add(info.WorkflowExecutionTimeout-executionMargin))
	}
	c.taskMax = maxTime(c.taskMax, c.taskDeadline)
	rctx, cancelRun := workflow.WithCancel(ctx)
	defer cancelRun()
	var passed bool
	life := c.taskMax.Sub(now)
	env := c.invokeTask(rctx, life, toolcall.RetryOf(life).Attempt, func(f workflow.Future) {
		c.running = true
		defer func() { c.running = false }()
		for !f.IsReady() {
			armed := c.taskDeadline
			wait := armed.Sub(workflow.Now(ctx))
			if wait <= 0 {
				passed = true
				cancelRun()
				return
			}
			if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return f.IsReady() || !c.taskDeadline.Equal(armed) }); err != nil {
				return // cancelled: runTask returns the cancellation
			}
		}
	})
	if passed && ctx.Err() == nil {
		return toolcall.Fail(c.in.GetTool(), toolcall.CodeDeadlineExceeded, fmt.Sprintf(
			"the task did not finish by its deadline, %s: its service call was cancelled (an agent extends its running task with %s)", stamp(c.taskDeadline), ToolExtendTask))
	}
	return env
}

// invokeTask runs the task's side effect, an activity that heartbeats,
// tried as toolcall.RetryOf(attempt) within budget, with a service call
// deadline of attempt; watch, when not nil, runs while it does.
func (c *call) invokeTask(ctx workflow.Context, attempt, budget time.Duration, watch func(workflow.Future)) *toolcall.Envelope {
	retry := toolcall.RetryOf(attempt)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    retry.Attempt,
		ScheduleToCloseTimeout: budget,
		HeartbeatTimeout:       TaskHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    retry.Interval,
			BackoffCoefficient: retry.Backoff,
			MaximumAttempts:    retry.Attempts,
		},
		Summary: c.in.GetTool(),
	})
	f := workflow.ExecuteActivity(actx, ActivityInvoke, &callsv1.InvokeInput{
		Tool:           c.in.GetTool(),
		Arguments:      c.arguments(),
		Caller:         c.in.GetCaller(),
		IdempotencyKey: c.key(ctx),
		Audit:          c.in.GetAdmin(),
		Timeout:        durationpb.New(attempt),
	})
	if watch != nil {
		watch(f)
	}
	var out callsv1.InvokeOutput
	if err := f.Get(actx, &out); err != nil {
		return failedAttempts(c.in.GetTool(), err)
	}
	return envelopeOf(c.in.GetTool(), &out)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// view is where the call is, as an MCP task.
func (c *call) view() (*callsv1.TaskView, error) {
	v := &callsv1.TaskView{Task: c.task, Message: c.message, UpdateTime: timestamppb.New(c.updated)}
	if c.task && !c.done {
		v.Questions = questionsOf(c.pending)
	}
	if c.running {
		v.Deadline, v.MaxDeadline = timestamppb.New(c.taskDeadline), timestamppb.New(c.taskMax)
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
