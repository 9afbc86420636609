package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
)

// Notifier tells the owner something, on behalf of the caller in ctx
// (mesh.FromContext). OwnerNotifier is the real one; LogNotifier serves a
// mesh without the owner service.
type Notifier interface {
	Notify(ctx context.Context, n *schedulesv1.Notice) error
}

// OwnerNotifier sends notices through OwnerService.Notify, to the owner's
// notification channels. Its client must send the caller in ctx
// (mesh.NewClientInterceptor).
type OwnerNotifier struct {
	Owner ownerv1connect.OwnerServiceClient
}

// Notify implements Notifier. No channel configured, or a notice the owner
// service refuses, is a non-retryable error; an unavailable service is
// tried again.
func (o OwnerNotifier) Notify(ctx context.Context, n *schedulesv1.Notice) error {
	level := ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO
	switch n.GetLevel() {
	case "warning":
		level = ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING
	case "critical":
		level = ownerv1.NotificationLevel_NOTIFICATION_LEVEL_CRITICAL
	}
	_, err := o.Owner.Notify(ctx, &ownerv1.NotifyRequest{Title: clip(n.GetTitle(), 200), Message: clip(n.GetMessage(), 4000), Level: level})
	return serviceError(err)
}

// LogNotifier writes notices to a log as "schedules.owner_notice" events.
type LogNotifier struct{ Log *slog.Logger }

// Notify implements Notifier.
func (l LogNotifier) Notify(ctx context.Context, n *schedulesv1.Notice) error {
	l.Log.InfoContext(ctx, "schedules.owner_notice", "agent", mesh.FromContext(ctx).Caller.Agent,
		"title", n.GetTitle(), "message", n.GetMessage(), "level", n.GetLevel())
	return nil
}

// clip shortens s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Activities are the schedules activities; they hold the clients they call.
type Activities struct {
	// Schedules is the schedules service; calls carry the worker's own
	// identity (Identity).
	Schedules schedulesv1connect.SchedulesServiceClient
	// Identity is the worker's mesh identity for Schedules calls: a mesh
	// component (mesh.RoleService).
	Identity mesh.Caller
	// Notifier reaches the owner.
	Notifier Notifier
	// Tools are the tools a run may call, bound to their services
	// (toolcall.BindAll).
	Tools map[string]*toolcall.Binding
	// Mesh signs the mesh tokens of runs' tool calls.
	Mesh *mesh.Signer
	// Log receives the activities' events.
	Log *slog.Logger
}

// NotifyOwner asks the owner to approve or deny a schedule, on behalf of the
// schedule's agent (one level deeper than the call that created it), so the
// owner sees who asks.
func (a *Activities) NotifyOwner(ctx context.Context, in *schedulesv1.ApprovalInput) error {
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{
		Subject: "schedule/" + in.GetScheduleId(), Agent: in.GetAgentId(), Depth: int(in.GetDepth()) + 1,
	}})
	return a.Notifier.Notify(ctx, ApprovalNotice(in))
}

// ApprovalNotice is the message that asks the owner about a schedule, or
// about a change of one (revision > 0).
func ApprovalNotice(in *schedulesv1.ApprovalInput) *schedulesv1.Notice {
	var b strings.Builder
	title := fmt.Sprintf("Schedule %s needs your approval", in.GetScheduleId())
	if r := in.GetRevision(); r > 0 {
		title = fmt.Sprintf("Change %d of schedule %s needs your approval", r, in.GetScheduleId())
		fmt.Fprintf(&b, "Schedule %s was changed (change %d) and runs nothing until you approve the change. ", in.GetScheduleId(), r)
	}
	fmt.Fprintf(&b, "Agent %s asks to call %s %s", in.GetAgentId(), in.GetAction().GetTool(), in.GetSpecSummary())
	if d := in.GetDescription(); d != "" {
		fmt.Fprintf(&b, " (%q)", d)
	}
	args, _ := protojson.Marshal(in.GetAction().GetArguments())
	if len(args) > 1000 {
		args = append(args[:1000:1000], "…"...)
	}
	fmt.Fprintf(&b, " with arguments %s.", args)
	if len(in.GetNextRunTimes()) > 0 {
		b.WriteString(" First runs once approved:")
		for _, t := range in.GetNextRunTimes() {
			b.WriteString(" " + t.AsTime().UTC().Format(time.RFC3339))
		}
		b.WriteString(".")
	}
	wid := approvalContract.IDPrefix + "/" + in.GetScheduleId() + "/" + in.GetSpecHash()
	fmt.Fprintf(&b, " Approve with schedules_approve {\"schedule_id\": %q} or deny with schedules_deny;"+
		" or send the %s or %s update to workflow %s in the Temporal UI. It expires in %s.",
		in.GetScheduleId(), approveHandler.Name, denyHandler.Name, wid, in.GetTimeout().AsDuration())
	return &schedulesv1.Notice{
		Title:   title,
		Message: b.String(),
		Level:   "warning",
	}
}

// ApplyDecision has the schedules service carry out a decision. A refusal
// (the schedule changed, it is no longer waiting) is a non-retryable error
// carrying the service's message; anything else is retried.
func (a *Activities) ApplyDecision(ctx context.Context, req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
	res, err := a.Schedules.ApplyDecision(a.asWorker(ctx), req)
	return res, serviceError(err)
}

// RecordExecution records a run in the schedules service. The start report
// is refused (non-retryable) when the run's call is not the approved one.
func (a *Activities) RecordExecution(ctx context.Context, req *schedulesv1.RecordExecutionRequest) error {
	_, err := a.Schedules.RecordExecution(a.asWorker(ctx), req)
	return serviceError(err)
}

func (a *Activities) asWorker(ctx context.Context) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: a.Identity})
}

// serviceError makes a service's refusal non-retryable: retrying a call the
// service refused for its content (or for lack of a capability, such as a
// notification channel) will not help.
func serviceError(err error) error {
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeInvalidArgument,
		connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeAlreadyExists:
		msg := err.Error()
		if ce, ok := errors.AsType[*connect.Error](err); ok {
			msg = ce.Message()
		}
		return temporal.NewNonRetryableApplicationError(msg, connect.CodeOf(err).String(), nil)
	}
	// Retried. The message may reach a run's result: only what the service
	// said, or a fixed message; the error itself stays in the history.
	return temporal.NewApplicationErrorWithCause(rpcerror.Public(err), connect.CodeOf(err).String(), err)
}

// retryableCodes are the error envelopes a run tries again: the call may
// not have reached the service, and the idempotency key makes a repeat
// harmless.
var retryableCodes = map[string]bool{toolcall.CodeUnavailable: true, toolcall.CodeDeadlineExceeded: true}

// CallTool makes a run's tool call through the mesh: as the schedule's
// agent, at the run's depth, with the run's idempotency key. The result is
// the tool's envelope, ok or not; an unavailable or slow service is tried
// again (CallAttempts in all) before its error envelope becomes the result.
func (a *Activities) CallTool(ctx context.Context, in *schedulesv1.CallToolInput) (*schedulesv1.CallToolResult, error) {
	run := in.GetRun()
	attempt := activity.GetInfo(ctx).Attempt
	env := a.call(ctx, in)
	if env.IsError() && retryableCodes[env.DomainCode] && attempt < CallAttempts {
		a.Log.WarnContext(ctx, "schedules.run.retry", "schedule", run.GetScheduleId(), "run", in.GetIdempotencyKey(),
			"tool", run.GetTool(), "domain_code", env.DomainCode, "attempt", attempt)
		return nil, temporal.NewApplicationError(env.Message, env.DomainCode)
	}
	envelope, err := asStruct(env)
	if err != nil {
		// The run's result says only that, with the id of the logged cause.
		failed := toolcall.Unexpected(ctx, a.Log, run.GetTool(), err)
		return nil, temporal.NewNonRetryableApplicationError(failed.Message, toolcall.CodeInternal, nil)
	}
	a.Log.InfoContext(ctx, "schedules.run.called", "schedule", run.GetScheduleId(), "run", in.GetIdempotencyKey(),
		"tool", run.GetTool(), "agent", run.GetAgentId(), "status", env.Status, "domain_code", env.DomainCode, "attempt", attempt)
	return &schedulesv1.CallToolResult{Envelope: envelope, Ok: !env.IsError(), DomainCode: env.DomainCode, Attempts: attempt}, nil
}

// asStruct is env as the Struct a run records.
func asStruct(env *toolcall.Envelope) (*structpb.Struct, error) {
	raw, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	out := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return out, nil
}

func (a *Activities) call(ctx context.Context, in *schedulesv1.CallToolInput) *toolcall.Envelope {
	run := in.GetRun()
	b, ok := a.Tools[run.GetTool()]
	if !ok {
		return toolcall.Fail(run.GetTool(), toolcall.CodeNotSupported, fmt.Sprintf("tool %s does not exist (any more)", run.GetTool()))
	}
	args, err := protojson.Marshal(run.GetArguments())
	if err != nil {
		return toolcall.Unexpected(ctx, a.Log, run.GetTool(), fmt.Errorf("encode arguments: %w", err))
	}
	// The arguments were checked when the schedule was created; the tool's
	// contract may have changed since.
	msg, vs := b.Decode(ctx, args)
	if vs != nil {
		return toolcall.Invalid(run.GetTool(), vs)
	}
	return b.Invoke(ctx, msg, a.Mesh, mesh.Call{
		Caller: mesh.Caller{
			// The schedule is the principal: no roles, only its agent.
			Subject: "schedule/" + run.GetScheduleId(),
			Agent:   run.GetAgentId(),
			Depth:   int(run.GetDepth()),
		},
		IdempotencyKey: in.GetIdempotencyKey(),
	})
}
