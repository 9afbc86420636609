package calls

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// run calls the tool's service once, with the gathered arguments, and ends
// the call with its result — or, when the service asks the person to visit
// a page first and the client can send them there, asks that.
func (c *call) run(ctx workflow.Context) *callsv1.RoundResult {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Running `%s` after %d round(s) of questions.", c.in.GetTool(), c.round))
	env := c.activity(ctx, ActivityInvoke, &callsv1.InvokeInput{
		Tool:           c.in.GetTool(),
		Arguments:      c.arguments(),
		Caller:         c.in.GetCaller(),
		IdempotencyKey: c.key(ctx),
		Audit:          c.in.GetAdmin(),
		Timeout:        durationpb.New(callTimeout(c.in.GetCallTimeout())),
	})
	if env.Visit != nil && c.in.GetUrl() {
		return c.askVisit(ctx, env.Visit)
	}
	// The service answered: no visit is pending any more (a link in a
	// capability_gap is the person's to follow after the call).
	c.visit = nil
	status := StatusSucceeded
	if env.IsError() {
		status = StatusFailed
	}
	c.callID = c.key(ctx)
	res := c.finish(ctx, env, status)
	res.CallId = c.callID
	if c.in.GetAdmin() && !env.IsError() {
		// The edge reports the call executed with the reason the audit
		// record holds.
		res.Reason = c.reason()
	}
	return res // also c.current
}

// reason is the reason the user gave an ADMIN call, as the audit trail
// records it.
func (c *call) reason() string {
	var r string
	_ = json.Unmarshal(c.args[toolcall.AdminReason], &r)
	return strings.TrimSpace(r)
}

// activity runs a tool-calling activity and returns its envelope; an
// activity that fails after its retries becomes an unavailable envelope.
//
// It is a local activity: it runs on this worker inside the workflow task
// that took the round, so a round costs one workflow task, not three (the
// schedule, the activity task, the task that reads its result). Its result
// is recorded in the history like any activity's. A worker that dies after
// the service call but before the task completes makes another worker run
// it again, with the same idempotency key, which the service applies once.
//
// How it is tried is toolcall.RetryOf the call's timeout, which the edge
// asks too, to know how long the final round may take.
func (c *call) activity(ctx workflow.Context, name string, in *callsv1.InvokeInput) *toolcall.Envelope {
	retry := toolcall.RetryOf(callTimeout(in.GetTimeout()))
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    retry.Attempt,
		ScheduleToCloseTimeout: retry.Budget(),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    retry.Interval,
			BackoffCoefficient: retry.Backoff,
			MaximumAttempts:    retry.Attempts,
		},
		Summary: in.GetTool(),
	})
	var out callsv1.InvokeOutput
	if err := workflow.ExecuteLocalActivity(actx, name, in).Get(actx, &out); err != nil {
		return failedAttempts(in.GetTool(), err)
	}
	return envelopeOf(in.GetTool(), &out)
}

// envelopeOf is the envelope an invoke activity answered, with the visit
// the service asked for, if any.
func envelopeOf(tool string, out *callsv1.InvokeOutput) *toolcall.Envelope {
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(out.GetEnvelope()), &env); err != nil || env.Status == "" {
		return toolcall.Fail(tool, toolcall.CodeInternal, "the call returned no result envelope")
	}
	env.Visit = out.GetVisit()
	return &env
}

// key is the idempotency key the call's side effect runs under: the one
// the edge's own service call used, for a call the service refused pending
// a visit, else one derived from the workflow id.
func (c *call) key(ctx workflow.Context) string {
	if k := c.in.GetIdempotencyKey(); k != "" {
		return k
	}
	return IdempotencyKey(workflow.GetInfo(ctx).WorkflowExecution.ID)
}

// askVisit asks the person to visit the page the service named, as a URL
// question of a round of its own (a task's input request): accepting it
// makes the call again; declining or cancelling ends it, nothing done. The
// same visit may be asked again while it is not done; such rounds do not
// count against the call's most rounds (the state's expiry bounds them).
func (c *call) askVisit(ctx workflow.Context, v *toolv1.VisitRequired) *callsv1.RoundResult {
	c.visitRounds++
	c.visit = v
	return c.askAll(ctx, []*pending{{name: "visit", kind: callsv1.StepKind_STEP_KIND_QUESTIONS,
		input: callsv1.InputKind_INPUT_KIND_URL, message: v.GetMessage(), url: v.GetUrl(), visitID: v.GetVisitId()}})
}

// failedAttempts is the envelope of a tool-calling activity whose every
// attempt failed: the last attempt's unavailable envelope (error id
// included), or, when the activity itself failed (a timeout, a crash), a
// fixed message. Nothing of the failure's text goes into the result. Only
// the result changes, not the commands: runs in flight replay as before.
func failedAttempts(tool string, err error) *toolcall.Envelope {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == errUnavailable {
		var raw string
		var env toolcall.Envelope
		if ae.HasDetails() && ae.Details(&raw) == nil && json.Unmarshal([]byte(raw), &env) == nil && env.Status != "" {
			return &env
		}
	}
	return toolcall.Fail(tool, toolcall.CodeUnavailable, rpcerror.MessageUnreachable)
}

// ChangeEndVisit is the change (workflow.GetVersion) that tells the tool's
// service when a call ends while a visit it asked for is not done: runs
// that ended a visit call before it keep ending without the activity on
// replay. Version 1 told it in a local activity, which holds the
// workflow task while it retries (up to endVisitBudget while the service
// is down), so the call's task state could not be queried meanwhile;
// version 2 tells it in an activity of its own.
const ChangeEndVisit = "end-visit"

// endVisit tells the tool's service, when the call ends (declined,
// cancelled, abandoned) while the visit it asked for is not done, that the
// visit must not act for the call any more (toolmesh.tool.v1.VisitService).
// Best effort beyond its retries: the link's own expiry bounds it too.
func (c *call) endVisit(ctx workflow.Context) {
	v := c.visit
	if v == nil {
		return
	}
	c.visit = nil
	version := workflow.GetVersion(ctx, ChangeEndVisit, workflow.DefaultVersion, 2)
	if version == workflow.DefaultVersion {
		return
	}
	in := &callsv1.EndVisitInput{Tool: c.in.GetTool(), Caller: c.in.GetCaller(), IdempotencyKey: c.key(ctx), VisitId: v.GetVisitId()}
	retry := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second}
	summary := "end visit " + v.GetVisitId()
	var err error
	if version == 1 {
		actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: endVisitAttempt, ScheduleToCloseTimeout: endVisitBudget, RetryPolicy: retry, Summary: summary,
		})
		err = workflow.ExecuteLocalActivity(actx, ActivityEndVisit, in).Get(actx, nil)
	} else {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: endVisitAttempt, ScheduleToCloseTimeout: endVisitBudget, RetryPolicy: retry, Summary: summary,
		})
		err = workflow.ExecuteActivity(actx, ActivityEndVisit, in).Get(actx, nil)
	}
	if err != nil {
		workflow.GetLogger(ctx).Warn("calls.end_visit_failed", "tool", c.in.GetTool(), "visit", v.GetVisitId(), "error", err.Error())
	}
}

// How long telling a service that a visit ended may take: per attempt, and
// in all.
const (
	endVisitAttempt = 10 * time.Second
	endVisitBudget  = 2 * time.Minute
)
