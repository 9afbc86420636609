package calls

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// run calls the tool's service once, with the gathered arguments, and ends
// the call with its result.
func (c *call) run(ctx workflow.Context) *callsv1.RoundResult {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Running `%s` after %d round(s) of questions.", c.in.GetTool(), c.round))
	env := c.activity(ctx, ActivityInvoke, &callsv1.InvokeInput{
		Tool:           c.in.GetTool(),
		Arguments:      c.arguments(),
		Caller:         c.in.GetCaller(),
		IdempotencyKey: IdempotencyKey(workflow.GetInfo(ctx).WorkflowExecution.ID),
		Audit:          c.in.GetAdmin(),
		Timeout:        durationpb.New(callTimeout(c.in.GetCallTimeout())),
	})
	status := StatusSucceeded
	if env.IsError() {
		status = StatusFailed
	}
	c.callID = IdempotencyKey(workflow.GetInfo(ctx).WorkflowExecution.ID)
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
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(out.GetEnvelope()), &env); err != nil || env.Status == "" {
		return toolcall.Fail(in.GetTool(), toolcall.CodeInternal, "the call returned no result envelope")
	}
	return &env
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
