// Package schedules holds the workflows and activities of the "schedules"
// task queue:
//
//   - ApprovalWorkflow (schedule-approval/<schedule>/<spec hash>) notifies the
//     owner about a new schedule and waits for the approve or deny update,
//     or for its timeout; the decision is carried out by the schedules
//     service (ApplyDecision), which checks the spec hash and unpauses or
//     deletes the Temporal Schedule.
//   - RunWorkflow (schedule-run/<schedule>-<time due>) is one run of an
//     approved schedule: one tool call through the mesh as the schedule's
//     agent at depth + 1, with the run's workflow id as idempotency key, and
//     its result recorded in the schedules service.
//
// Names, inputs and handler arguments are the protobuf contracts in
// proto/toolmesh/schedules/v1/workflows.proto.
package schedules

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// The contracts this package implements.
var (
	approvalContract = workflowcontract.WorkflowOf(&schedulesv1.ApprovalInput{})
	runContract      = workflowcontract.WorkflowOf(&schedulesv1.RunInput{})
	approveHandler   = workflowcontract.HandlerOf(&schedulesv1.ApproveUpdate{})
	denyHandler      = workflowcontract.HandlerOf(&schedulesv1.DenyUpdate{})
	stateHandler     = workflowcontract.HandlerOf(&schedulesv1.StateQuery{})
)

// Values of the ToolmeshStatus search attribute and of ApprovalState.status.
const (
	StatusWaiting   = "waiting"
	StatusDeciding  = "deciding"
	StatusApproved  = "approved"
	StatusDenied    = "denied"
	StatusExpired   = "expired"
	StatusWithdrawn = "withdrawn"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// DecidedByTemporal is who decided when the update carries no name: an
// operator in the Temporal UI or CLI.
const DecidedByTemporal = "temporal"

// CallAttempts is how many times a run tries its tool call when the
// service is unavailable or slow. Every attempt carries the same
// idempotency key, so the call takes effect once.
const CallAttempts = 5

var (
	saStatus        = temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus)
	saScheduledTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")
)

// An update or the workflow fails with a non-retryable application error
// when a decision is refused (trying again will not help) and with a
// retryable one when it could not be carried out now.
func refused(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), "DecisionRefused", nil)
}

// ApprovalWorkflow asks the owner about a schedule and carries out the
// decision.
func ApprovalWorkflow(ctx workflow.Context, in *schedulesv1.ApprovalInput) (*schedulesv1.ApprovalResult, error) {
	log := workflow.GetLogger(ctx)
	state := &schedulesv1.ApprovalState{Status: StatusWaiting, ScheduleId: in.GetScheduleId(), SpecHash: in.GetSpecHash()}
	var result *schedulesv1.ApprovalResult
	deciding := false

	setStatus := func(s string) {
		state.Status = s
		if err := workflow.UpsertTypedSearchAttributes(ctx, saStatus.ValueSet(s)); err != nil {
			log.Warn("schedules.approval.status_not_set", "status", s, "error", err)
		}
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, stateHandler.Name, func() (*schedulesv1.ApprovalState, error) {
		return proto.Clone(state).(*schedulesv1.ApprovalState), nil
	}, workflow.QueryHandlerOptions{Description: stateHandler.Description}); err != nil {
		return nil, err
	}

	// decide carries a decision out through the schedules service and says
	// what was done. A refusal leaves the workflow waiting for another
	// decision.
	decide := func(ctx workflow.Context, kind schedulesv1.DecisionKind, by, note string) (string, error) {
		deciding = true
		defer func() { deciding = false }()
		setStatus(StatusDeciding)
		opts := workflow.ActivityOptions{
			StartToCloseTimeout:    30 * time.Second,
			ScheduleToCloseTimeout: 2 * time.Minute,
			RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second},
			Summary:                "carry out the decision: " + kind.String(),
		}
		if kind == schedulesv1.DecisionKind_DECISION_KIND_EXPIRE {
			opts.ScheduleToCloseTimeout = 24 * time.Hour // nobody waits on it: keep trying
		}
		var res schedulesv1.ApplyDecisionResponse
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), ActivityApplyDecision, &schedulesv1.ApplyDecisionRequest{
			ScheduleId: in.GetScheduleId(), SpecHash: in.GetSpecHash(), Kind: kind, DecidedBy: by, Note: note,
		}).Get(ctx, &res)
		if err != nil {
			msg, nonRetryable := applicationMessage(err)
			state.LastRefusal = msg
			setStatus(StatusWaiting)
			if nonRetryable {
				return "", refused("%s", msg)
			}
			return "", temporal.NewApplicationError("the decision could not be carried out now, try again: "+msg, "DecisionFailed")
		}
		outcome, status := schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_APPROVED, StatusApproved
		switch kind {
		case schedulesv1.DecisionKind_DECISION_KIND_DENY:
			outcome, status = schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_DENIED, StatusDenied
		case schedulesv1.DecisionKind_DECISION_KIND_EXPIRE:
			outcome, status = schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_EXPIRED, StatusExpired
		}
		result = &schedulesv1.ApprovalResult{Outcome: outcome, Decision: res.GetSchedule().GetDecision(), Schedule: res.GetSchedule()}
		state.Decision = res.GetSchedule().GetDecision()
		setStatus(status)
		return fmt.Sprintf("schedule %s %s by %s: it is %s", in.GetScheduleId(), status, by,
			protoenum.Word(res.GetSchedule().GetStatus())), nil
	}
	canDecide := func() error {
		switch {
		case result != nil:
			return refused("schedule %s was already decided on: %s", in.GetScheduleId(), state.GetStatus())
		case deciding:
			return refused("a decision on schedule %s is being carried out", in.GetScheduleId())
		}
		return nil
	}

	if err := workflow.SetUpdateHandlerWithOptions(ctx, approveHandler.Name,
		func(ctx workflow.Context, u *schedulesv1.ApproveUpdate) (string, error) {
			return decide(ctx, schedulesv1.DecisionKind_DECISION_KIND_APPROVE, decidedBy(u.GetDecidedBy()), u.GetNote())
		},
		workflow.UpdateHandlerOptions{
			Description: approveHandler.Description,
			Validator: func(ctx workflow.Context, u *schedulesv1.ApproveUpdate) error {
				if err := canDecide(); err != nil {
					return err
				}
				if h := u.GetSpecHash(); h != "" && h != in.GetSpecHash() {
					return refused("the owner was asked to approve spec hash %s, not %s", in.GetSpecHash(), h)
				}
				return nil
			},
		}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, denyHandler.Name,
		func(ctx workflow.Context, u *schedulesv1.DenyUpdate) (string, error) {
			return decide(ctx, schedulesv1.DecisionKind_DECISION_KIND_DENY, decidedBy(u.GetDecidedBy()), u.GetNote())
		},
		workflow.UpdateHandlerOptions{
			Description: denyHandler.Description,
			Validator:   func(ctx workflow.Context, _ *schedulesv1.DenyUpdate) error { return canDecide() },
		}); err != nil {
		return nil, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Waiting for the owner to approve or deny schedule %s (%s %s).",
		in.GetScheduleId(), in.GetAction().GetTool(), in.GetSpecSummary()))

	// Tell the owner. A notification that cannot be delivered does not stop
	// the approval: the request stays visible here and in schedules_list.
	nctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 5},
		Summary:             "notify the owner",
	})
	if err := workflow.ExecuteActivity(nctx, ActivityNotifyOwner, in).Get(ctx, nil); err != nil {
		log.Warn("schedules.approval.notify_failed", "schedule", in.GetScheduleId(), "error", err)
	}

	timeout := in.GetTimeout().AsDuration()
	decided, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      timeout,
		TimerOptions: workflow.TimerOptions{Summary: "the owner has " + timeout.String() + " to decide"},
	}, func() bool { return result != nil })
	if err != nil {
		if temporal.IsCanceledError(err) {
			// The schedule was deleted while waiting (schedules_delete).
			state.Status = StatusWithdrawn
			dctx, cancel := workflow.NewDisconnectedContext(ctx)
			defer cancel()
			if uerr := workflow.UpsertTypedSearchAttributes(dctx, saStatus.ValueSet(StatusWithdrawn)); uerr != nil {
				log.Warn("schedules.approval.status_not_set", "status", StatusWithdrawn, "error", uerr)
			}
		}
		return nil, err
	}
	if !decided {
		// A decision in flight when the time ran out still counts.
		if err := workflow.Await(ctx, func() bool { return !deciding }); err != nil {
			return nil, err
		}
		if result == nil {
			if _, err := decide(ctx, schedulesv1.DecisionKind_DECISION_KIND_EXPIRE, "timeout", "nobody decided within "+timeout.String()); err != nil {
				return nil, err
			}
		}
	}
	// Let a handler that is still answering its caller finish.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return nil, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Schedule %s: %s.", in.GetScheduleId(), state.GetStatus()))
	return result, nil
}

// errorType names the error class of a domain code a run makes up itself
// (the envelope's error_type, as internal/toolcall names it).
func errorType(code string) string {
	if code == "conflict" {
		return "ConflictError"
	}
	return "UnavailableError"
}

func decidedBy(by string) string {
	if by == "" {
		return DecidedByTemporal
	}
	return by
}

// applicationMessage returns the message of the application error under an
// activity error, and whether it was non-retryable. The activities make
// those messages fit for a run's result; any other failure (a timeout, a
// crash) gets a fixed message, as its text is Temporal's or Go's.
func applicationMessage(err error) (string, bool) {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Message(), ae.NonRetryable()
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return "no answer in time", false
	}
	return "the attempt failed", false
}

// RunWorkflow is one run of an approved schedule.
func RunWorkflow(ctx workflow.Context, in *schedulesv1.RunInput) (*schedulesv1.Execution, error) {
	log := workflow.GetLogger(ctx)
	info := workflow.GetInfo(ctx)
	runID := info.WorkflowExecution.ID
	due, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(saScheduledTime)
	if !ok {
		due = info.WorkflowStartTime // started by hand, not by the schedule
	}
	setStatus := func(s string) {
		if err := workflow.UpsertTypedSearchAttributes(ctx, saStatus.ValueSet(s)); err != nil {
			log.Warn("schedules.run.status_not_set", "status", s, "error", err)
		}
	}
	setStatus(StatusRunning)
	exec := &schedulesv1.Execution{
		RunId:         runID,
		ScheduleId:    in.GetScheduleId(),
		ScheduledTime: timestamppb.New(due),
		StartTime:     timestamppb.New(workflow.Now(ctx)),
		Status:        schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
	}
	record := func(what string, within time.Duration, req *schedulesv1.RecordExecutionRequest) error {
		rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout:    10 * time.Second,
			ScheduleToCloseTimeout: within,
			RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: time.Minute},
			Summary:                "record the run " + what,
		})
		return workflow.ExecuteActivity(rctx, ActivityRecordExecution, req).Get(ctx, nil)
	}
	failed := func(code, msg string) *schedulesv1.CallToolResult {
		return &schedulesv1.CallToolResult{DomainCode: code, Envelope: &structpb.Struct{Fields: map[string]*structpb.Value{
			"status": structpb.NewStringValue("error"), "tool": structpb.NewStringValue(in.GetTool()),
			"error_type": structpb.NewStringValue(errorType(code)), "domain_code": structpb.NewStringValue(code),
			"message": structpb.NewStringValue(msg),
		}}}
	}

	// The start report is also the check that this run makes the call the
	// owner approved, on a schedule that is still active: Temporal holds
	// what a run calls, the schedules service what was approved. No call
	// without it.
	res := &schedulesv1.CallToolResult{}
	err := record("start", time.Minute, &schedulesv1.RecordExecutionRequest{
		Execution: exec, Action: &schedulesv1.Action{Tool: in.GetTool(), Arguments: in.GetArguments()},
		AgentId: in.GetAgentId(), Depth: in.GetDepth(),
	})
	if err != nil {
		msg, refusedRun := applicationMessage(err)
		if refusedRun {
			// The service recorded the refusal.
			log.Warn("schedules.run.refused", "run", runID, "why", msg)
			setStatus(StatusFailed)
			exec.EndTime, exec.Status, exec.DomainCode = exec.GetStartTime(), schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED, "conflict"
			exec.Result = failed("conflict", msg).GetEnvelope()
			return exec, nil
		}
		res = failed("unavailable", "the run could not be checked against its schedule, so it made no call: "+msg)
	} else {
		cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: CallAttempts,
			},
			Summary: "call " + in.GetTool(),
		})
		if err := workflow.ExecuteActivity(cctx, ActivityCallTool, &schedulesv1.CallToolInput{Run: in, IdempotencyKey: runID}).Get(ctx, res); err != nil {
			// Every attempt failed or timed out without an answer.
			msg, _ := applicationMessage(err)
			res = failed("unavailable", "the tool call did not complete: "+msg)
			res.Attempts = CallAttempts
		}
	}
	exec.EndTime = timestamppb.New(workflow.Now(ctx))
	exec.Result = res.GetEnvelope()
	exec.Attempts = res.GetAttempts()
	exec.Status, exec.DomainCode = schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ""
	if !res.GetOk() {
		exec.Status, exec.DomainCode = schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED, res.GetDomainCode()
	}
	if err := record("result", time.Hour, &schedulesv1.RecordExecutionRequest{Execution: exec}); err != nil {
		log.Warn("schedules.run.record_failed", "run", runID, "error", err)
	}
	if res.GetOk() {
		setStatus(StatusSucceeded)
	} else {
		setStatus(StatusFailed)
	}
	return exec, nil
}
