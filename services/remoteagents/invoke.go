package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// ToolInvoke is the tool that starts invocations (the ToolmeshTool search
// attribute).
const ToolInvoke = "remoteagents_invoke"

// ToolExtendInvocation is the tool that extends invocations; the extension's
// audit record names it.
const ToolExtendInvocation = "remoteagents_extend_invocation"

// working is the status of an invocation the remote agent works on.
const working = remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING

// InvocationID is the id of the invocation an agent's call makes: derived
// from the call's idempotency key, so that a retried call names the
// invocation (its workflow, and the A2A message the remote agent gets) its
// first attempt made; random when the call has no key.
func InvocationID(agent, idempotencyKey string, now time.Time) string {
	if idempotencyKey == "" {
		return ids.NewAt("inv", now)
	}
	return ids.Derive("inv", "remoteagents.invoke", agent, idempotencyKey)
}

// DepthError is the refusal of a call already MaxDepth invocations deep,
// in the words messages_send uses.
func DepthError(depth int) error {
	return connect.NewError(connect.CodeFailedPrecondition,
		//lint:ignore ST1005 the contract fixes this user-facing sentence, capital and full stop included
		fmt.Errorf("Cannot send message: invocation depth %d exceeds maximum of %d.", depth, MaxDepth))
}

// Invoke implements RemoteAgentsService.Invoke: it records the
// invocation, starts its workflow and waits for the outcome as long as the
// request (and its deadline) allow.
func (s *Service) Invoke(ctx context.Context, req *remoteagentsv1.InvokeRequest) (*remoteagentsv1.InvokeResponse, error) {
	inv, err := s.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	if inv.GetStatus() != working {
		return &remoteagentsv1.InvokeResponse{Invocation: inv}, nil
	}
	return &remoteagentsv1.InvokeResponse{Invocation: s.await(ctx, inv, workflowrun.WaitBudget(req.WaitSeconds, s.cfg.DefaultWait))}, nil
}

// begin records the invocation req asks for and starts its workflow; a
// retried call (the same idempotency key) returns the invocation the first
// made, and starts its workflow when that did not.
func (s *Service) begin(ctx context.Context, req *remoteagentsv1.InvokeRequest) (*remoteagentsv1.Invocation, error) {
	call := mesh.FromContext(ctx)
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if call.Caller.Depth >= MaxDepth {
		return nil, DepthError(call.Caller.Depth)
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("invocations are unavailable: the remoteagents service runs without Temporal"))
	}
	if err := s.checkURL(ctx, req.GetUrl()); err != nil {
		return nil, err
	}
	now := s.nowMillis()
	timeout := s.cfg.DefaultTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = time.Duration(max(t, 10)) * time.Second
	}
	id := InvocationID(agent, call.IdempotencyKey, now)
	inv := &remoteagentsv1.Invocation{
		InvocationId: id,
		AgentId:      agent,
		Url:          req.GetUrl(),
		Message:      req.GetMessage(),
		Status:       working,
		TaskId:       req.GetTaskId(),
		ContextId:    req.GetContextId(),
		Depth:        int32(call.Caller.Depth) + 1,
		WorkflowId:   WorkflowID(agent, id),
		CreateTime:   timestamppb.New(now),
		ExpireTime:   timestamppb.New(now.Add(timeout)),
	}
	stored, created, err := s.store.CreateInvocation(ctx, inv)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record invocation: %w", err))
	}
	if stored.GetAgentId() != agent {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("invocation id %s is taken", id))
	}
	if stored.GetStatus() != working {
		return stored, nil
	}
	// Started on a retry too: the first attempt may have stored the
	// invocation and failed before its workflow started.
	if err := s.invocationCall(id).Start(ctx, created, func(ctx context.Context) error {
		return s.wf.StartInvoke(ctx, &remoteagentsv1.InvokeWorkflowInput{
			InvocationId: id,
			AgentId:      agent,
			Subject:      call.Caller.Subject,
			Depth:        int32(call.Caller.Depth),
			Url:          stored.GetUrl(),
			Message:      stored.GetMessage(),
			MessageId:    id,
			TaskId:       stored.GetTaskId(),
			ContextId:    stored.GetContextId(),
			ExpireTime:   stored.GetExpireTime(),
			Tool:         ToolInvoke,
		})
	}, func(ctx context.Context) error { return s.store.DeleteInvocation(ctx, id) }); err != nil {
		return nil, err
	}
	if created {
		s.log.InfoContext(ctx, "remoteagents.invoked", "invocation_id", id, "agent", agent, "depth", stored.GetDepth(), "workflow_id", stored.GetWorkflowId())
	}
	return stored, nil
}

// invocationCall is the long-running call of invocation id.
func (s *Service) invocationCall(id string) workflowrun.Call {
	return workflowrun.Call{Event: "remoteagents.invoke", What: "invocation", IDKey: "invocation_id", ID: id, Log: s.log}
}

// await waits up to wait (and never past ctx's deadline less a margin to
// reply) for the invocation's workflow to end, and returns the invocation
// with its outcome, or as it is when the wait runs out.
func (s *Service) await(ctx context.Context, inv *remoteagentsv1.Invocation, wait time.Duration) *remoteagentsv1.Invocation {
	return workflowrun.Await(ctx, s.invocationCall(inv.GetInvocationId()), inv, wait, func(ctx context.Context) (*remoteagentsv1.InvokeOutcome, error) {
		return s.wf.WaitInvoke(ctx, inv.GetWorkflowId())
	}, s.ended)
}

// ended returns the invocation as the workflow says it is; an outcome
// (not WORKING) is recorded, which changes nothing when the workflow
// recorded it already.
func (s *Service) ended(ctx context.Context, inv *remoteagentsv1.Invocation, o *remoteagentsv1.InvokeOutcome) *remoteagentsv1.Invocation {
	if o.GetStatus() == working || o.GetStatus() == remoteagentsv1.InvocationStatus_INVOCATION_STATUS_UNSPECIFIED {
		// Still working: show how far it got, with the progress recorded
		// meanwhile.
		if cur, err := s.store.GetInvocation(ctx, inv.GetInvocationId()); err == nil {
			inv = cur
		}
		out := proto.Clone(inv).(*remoteagentsv1.Invocation)
		if o.GetTaskId() != "" {
			out.TaskId, out.ContextId, out.RemoteState = o.GetTaskId(), o.GetContextId(), o.GetRemoteState()
		}
		if o.GetProtocolVersion() != "" {
			out.ProtocolVersion, out.ProtocolBinding = o.GetProtocolVersion(), o.GetProtocolBinding()
		}
		return out
	}
	if o.GetResolveTime() == nil {
		o.ResolveTime = timestamppb.New(s.nowMillis())
	}
	out, _, err := s.store.ResolveInvocation(ctx, inv.GetInvocationId(), o)
	if err != nil {
		s.log.WarnContext(ctx, "remoteagents.record_failed", "invocation_id", inv.GetInvocationId(), "error", err)
		return inv
	}
	return out
}

// queryTimeout bounds GetInvocation's question to a working invocation's
// workflow.
const queryTimeout = time.Second

// GetInvocation implements RemoteAgentsService.GetInvocation: the record,
// and for a working invocation the workflow's own word (its status query).
func (s *Service) GetInvocation(ctx context.Context, req *remoteagentsv1.GetInvocationRequest) (*remoteagentsv1.GetInvocationResponse, error) {
	inv, err := s.visibleInvocation(ctx, req.GetInvocationId())
	if err != nil {
		return nil, err
	}
	if inv.GetStatus() == working && s.wf != nil {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		o, err := s.wf.QueryInvoke(qctx, inv.GetWorkflowId())
		cancel()
		if errIsNoWorkflow(err) {
			// It has ended: its result says how.
			wctx, cancel := context.WithTimeout(ctx, queryTimeout)
			o, err = s.wf.WaitInvoke(wctx, inv.GetWorkflowId())
			cancel()
		}
		if err != nil {
			s.log.DebugContext(ctx, "remoteagents.query_failed", "invocation_id", inv.GetInvocationId(), "error", err)
		} else {
			inv = s.ended(ctx, inv, o)
		}
	}
	return &remoteagentsv1.GetInvocationResponse{Invocation: inv}, nil
}

// ListInvocations implements RemoteAgentsService.ListInvocations: an
// agent's own invocations, or for the owner every agent's.
func (s *Service) ListInvocations(ctx context.Context, req *remoteagentsv1.ListInvocationsRequest) (*remoteagentsv1.ListInvocationsResponse, error) {
	filter, err := mesh.ListedAgent(ctx, req.GetAgentId(), "invocations")
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListInvocations(ctx, filter, req.GetStatus(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list invocations: %w", err))
	}
	return &remoteagentsv1.ListInvocationsResponse{Invocations: list, Page: paging.New(offset, limit, total)}, nil
}

// visibleInvocation returns the invocation when the caller made it; to
// any other agent it does not exist.
func (s *Service) visibleInvocation(ctx context.Context, id string) (*remoteagentsv1.Invocation, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	inv, err := s.store.GetInvocation(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && inv.GetAgentId() != agent) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("invocation %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get invocation: %w", err))
	}
	return inv, nil
}

// cancelWait bounds how long CancelInvocation waits for the workflow to
// end (it asks the remote agent to cancel first).
const cancelWait = 10 * time.Second

// CancelInvocation implements RemoteAgentsService.CancelInvocation.
func (s *Service) CancelInvocation(ctx context.Context, req *remoteagentsv1.CancelInvocationRequest) (*remoteagentsv1.CancelInvocationResponse, error) {
	inv, err := s.visibleInvocation(ctx, req.GetInvocationId())
	if err != nil {
		return nil, err
	}
	if inv.GetStatus() != working {
		return &remoteagentsv1.CancelInvocationResponse{Invocation: inv}, nil
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("invocations are unavailable: the remoteagents service runs without Temporal"))
	}
	if err := s.wf.CancelInvoke(ctx, inv.GetWorkflowId()); err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not cancel the invocation; try again", fmt.Errorf("cancel invocation %s: %w", inv.GetInvocationId(), err))
	}
	s.log.InfoContext(ctx, "remoteagents.cancel_requested", "invocation_id", inv.GetInvocationId(), "agent", inv.GetAgentId())
	return &remoteagentsv1.CancelInvocationResponse{Invocation: s.await(ctx, inv, cancelWait)}, nil
}

// MaxInvocationLifetime is how long after it started an invocation may be
// followed at most, extensions included.
const MaxInvocationLifetime = 7 * 24 * time.Hour

// ExtendInvocation implements RemoteAgentsService.ExtendInvocation: the
// invoking agent moves its working invocation's expiry later, up to
// MaxInvocationLifetime after it started. The workflow takes the new
// expiry (and records the extension in the audit trail) first, then the
// store; a retried call (the same idempotency key) is the same update.
func (s *Service) ExtendInvocation(ctx context.Context, req *remoteagentsv1.ExtendInvocationRequest) (*remoteagentsv1.ExtendInvocationResponse, error) {
	call := mesh.FromContext(ctx)
	inv, err := s.visibleInvocation(ctx, req.GetInvocationId())
	if err != nil {
		return nil, err
	}
	if inv.GetStatus() != working {
		return nil, invocationEnded(inv)
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("invocations are unavailable: the remoteagents service runs without Temporal"))
	}
	key := call.IdempotencyKey
	if key == "" {
		key = ids.New("key")
	}
	expire := inv.GetExpireTime().AsTime().Add(time.Duration(req.GetExtendSeconds()) * time.Second)
	if latest := inv.GetCreateTime().AsTime().Add(MaxInvocationLifetime); expire.After(latest) {
		return nil, boundary.InvalidArgument(boundary.Violation{Field: "extend_seconds", Rule: "remoteagents.max_lifetime", Message: fmt.Sprintf("an invocation is followed at most %s from its start: %s may be followed until %s at the latest, and expires at %s now",
			MaxInvocationLifetime, inv.GetInvocationId(), latest.UTC().Format(time.RFC3339), inv.GetExpireTime().AsTime().UTC().Format(time.RFC3339))})
	}
	// The workflow's answer names the expiry it took: a retry (the same
	// update id) answers the first extension's, which the store records.
	o, err := s.wf.ExtendInvoke(ctx, inv.GetWorkflowId(), "extend/"+key, &remoteagentsv1.ExtendInvocationUpdate{
		ExpireTime:  timestamppb.New(expire),
		Reason:      req.GetReason(),
		RequestedBy: call.Caller.Subject,
		CallId:      ids.Derive("ext", ToolExtendInvocation, inv.GetAgentId(), key),
		Request:     req,
	})
	if rej, ok := errors.AsType[*ExtendRefusedError](err); ok {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("invocation %s cannot be extended: %s", inv.GetInvocationId(), rej.Message))
	}
	if errors.Is(err, ErrNoWorkflow) {
		if cur, gerr := s.store.GetInvocation(ctx, inv.GetInvocationId()); gerr == nil && cur.GetStatus() != working {
			return nil, invocationEnded(cur)
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("invocation %s is no longer followed", inv.GetInvocationId()))
	}
	if err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not extend the invocation; try again", fmt.Errorf("extend invocation %s: %w", inv.GetInvocationId(), err))
	}
	if o.GetExpireTime() != nil {
		expire = o.GetExpireTime().AsTime()
	}
	ext, _, err := s.store.ExtendInvocation(ctx, inv.GetInvocationId(), expire)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record extension: %w", err))
	}
	s.log.InfoContext(ctx, "remoteagents.invocation_extended", "invocation_id", inv.GetInvocationId(), "agent", inv.GetAgentId(),
		"subject", call.Caller.Subject, "expire_time", expire.UTC().Format(time.RFC3339))
	return &remoteagentsv1.ExtendInvocationResponse{Invocation: ext}, nil
}

func invocationEnded(inv *remoteagentsv1.Invocation) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("invocation %s has ended: it is %s", inv.GetInvocationId(), protoenum.Word(inv.GetStatus())))
}

// RecordInvocationOutcome implements
// RemoteAgentsService.RecordInvocationOutcome, for the invoke workflow
// (mesh service role).
func (s *Service) RecordInvocationOutcome(ctx context.Context, req *remoteagentsv1.RecordInvocationOutcomeRequest) (*remoteagentsv1.RecordInvocationOutcomeResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	inv, changed, err := s.store.ResolveInvocation(ctx, req.GetInvocationId(), &remoteagentsv1.InvokeOutcome{
		InvocationId: req.GetInvocationId(), Status: req.GetStatus(), Answer: req.GetAnswer(), TaskId: req.GetTaskId(),
		ContextId: req.GetContextId(), RemoteState: req.GetRemoteState(), Error: req.GetError(), ResolveTime: req.GetResolveTime(),
		ProtocolVersion: req.GetProtocolVersion(), ProtocolBinding: req.GetProtocolBinding(),
	})
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("invocation %s not found", req.GetInvocationId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record invocation outcome: %w", err))
	}
	if changed {
		s.log.InfoContext(ctx, "remoteagents.invocation_ended", "invocation_id", inv.GetInvocationId(), "agent", inv.GetAgentId(), "status", inv.GetStatus().String())
	}
	return &remoteagentsv1.RecordInvocationOutcomeResponse{Invocation: inv}, nil
}
