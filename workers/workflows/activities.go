package workflows

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
)

// ToolExtendRun names the tool of an extension in the audit trail.
const ToolExtendRun = "workflows_extend_run"

// DefaultAnswerPoll is how long one look for an approval's answer waits.
const DefaultAnswerPoll = 25 * time.Second

// Activities are the run workflow's calls to OwnerService (approvals) and
// WorkflowsService (the run's record), made through generated clients that
// send the identity in each call's context as a mesh token
// (mesh.NewClientInterceptor), and to the audit trail.
type Activities struct {
	// Owner reaches OwnerService (nil: approval nodes fail).
	Owner ownerv1connect.OwnerServiceClient
	// Workflows reaches WorkflowsService (nil: the run is not recorded).
	Workflows workflowsv1connect.WorkflowsServiceClient
	// Self is the worker's own identity (mesh.RoleService).
	Self mesh.Caller
	// Audit records extensions; without it they are only logged.
	Audit *audittrail.Recorder
	// AnswerPoll bounds one wait for an approval's answer
	// (DefaultAnswerPoll).
	AnswerPoll time.Duration
	// Log receives the activities' events (discarded when nil).
	Log *slog.Logger
}

func (a *Activities) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// errNoOwner fails approvals on a worker without an owner service.
var errNoOwner = temporal.NewNonRetryableApplicationError("this worker has no owner service: approvals cannot be asked", toolcall.CodeNotSupported, nil)

// Ask asks the owner the approval's question through OwnerService.Ask, as
// the run's starter, with the node's idempotency key: a retried or
// replayed node finds the ask it made. It does not wait for the answer.
func (a *Activities) Ask(ctx context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
	return a.ask(ctx, in, 0)
}

// AwaitAnswer waits for the approval's answer: it asks again with the same
// key (which finds the ask and waits on it) until the ask is no longer
// pending, heartbeating between waits, so a worker that dies is replaced
// within the heartbeat timeout and a cancelled run stops waiting.
func (a *Activities) AwaitAnswer(ctx context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
	poll := a.AnswerPoll
	if poll <= 0 {
		poll = DefaultAnswerPoll
	}
	for {
		activity.RecordHeartbeat(ctx, in.GetAskId())
		out, err := a.ask(ctx, in, poll)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			var app *temporal.ApplicationError
			if errors.As(err, &app) && app.NonRetryable() {
				return nil, err
			}
			a.log().WarnContext(ctx, "workflows.approval_wait_failed", "run_id", in.GetRunId(), "node", in.GetNodeId(), "error", err)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		case out.GetStatus() != "pending":
			return out, nil
		}
	}
}

func (a *Activities) ask(ctx context.Context, in *workflowsv1.ApprovalInput, wait time.Duration) (*workflowsv1.ApprovalOutcome, error) {
	if a.Owner == nil {
		return nil, errNoOwner
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: toolcall.CallerOf(in.GetCaller()), IdempotencyKey: in.GetIdempotencyKey()})
	seconds := int32(wait / time.Second)
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+10*time.Second)
		defer cancel()
	}
	res, err := a.Owner.Ask(ctx, &ownerv1.AskRequest{
		Question:       in.GetQuestion(),
		Options:        []string{AnswerApprove, AnswerReject},
		Context:        in.GetContext(),
		TimeoutSeconds: in.GetTimeoutSeconds(),
		WaitSeconds:    &seconds,
		Run:            in.GetRunId(),
	})
	if err != nil {
		return nil, refused(err)
	}
	return outcomeOf(res.GetAsk()), nil
}

func outcomeOf(ask *ownerv1.Ask) *workflowsv1.ApprovalOutcome {
	status := "pending"
	switch ask.GetStatus() {
	case ownerv1.AskStatus_ASK_STATUS_ANSWERED:
		status = "answered"
	case ownerv1.AskStatus_ASK_STATUS_EXPIRED:
		status = "expired"
	case ownerv1.AskStatus_ASK_STATUS_CANCELLED:
		status = "cancelled"
	}
	return &workflowsv1.ApprovalOutcome{AskId: ask.GetAskId(), Status: status, Answer: ask.GetAnswer(), AnsweredBy: ask.GetAnsweredBy()}
}

// WithdrawAsk cancels the approval's ask of a run that stopped waiting.
func (a *Activities) WithdrawAsk(ctx context.Context, in *workflowsv1.ApprovalInput) error {
	if a.Owner == nil || in.GetAskId() == "" {
		return nil
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: toolcall.CallerOf(in.GetCaller())})
	_, err := a.Owner.CancelAsk(ctx, &ownerv1.CancelAskRequest{AskId: in.GetAskId()})
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil
	}
	return refused(err)
}

// RecordRun records the run's state with WorkflowsService, as the worker.
func (a *Activities) RecordRun(ctx context.Context, req *workflowsv1.RecordRunRequest) error {
	if a.Workflows == nil {
		return nil
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a.Self})
	_, err := a.Workflows.RecordRun(ctx, req)
	return refused(err)
}

// RecordExtension records a run's extension in the audit trail under its
// call id, so a retried attempt writes one record.
func (a *Activities) RecordExtension(ctx context.Context, up *workflowsv1.ExtendUpdate) error {
	if a.Audit == nil {
		a.log().WarnContext(ctx, "workflows.run_extension_unaudited", "call_id", up.GetCallId(), "subject", up.GetRequestedBy(),
			"run_id", up.GetRequest().GetRunId(), "message", "no audit service configured")
		return nil
	}
	_, err := a.Audit.Record(ctx, audittrail.Entry{CallID: up.GetCallId(), Actor: up.GetRequestedBy(), Tool: ToolExtendRun,
		Reason: up.GetReason(), Arguments: up.GetRequest()})
	return err
}

// refused marks the failures no retry can fix as non-retryable, typed by
// their domain code: the service refused the request itself.
func refused(err error) error {
	if err == nil {
		return nil
	}
	switch code := connect.CodeOf(err); code {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated,
		connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeResourceExhausted:
		env := toolcall.FromError(context.Background(), slog.New(slog.DiscardHandler), "", connect.NewWireError(code, errors.New(connectMessage(err))))
		return temporal.NewNonRetryableApplicationError(env.Message, env.DomainCode, err)
	}
	return err
}

func connectMessage(err error) string {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce.Message()
	}
	return err.Error()
}
