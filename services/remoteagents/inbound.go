package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/untrusted"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Inbound task statuses.
const (
	inboundWorking   = remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING
	inboundCompleted = remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED
	inboundCancelled = remoteagentsv1.InboundStatus_INBOUND_STATUS_CANCELLED
)

// sender is the remote sender an inbound call acts for: the A2A endpoint
// calls as the sender's mesh identity (an "a2a-..." agent) with the mesh's
// service role, at the sender's invocation depth.
func sender(ctx context.Context) (mesh.Caller, error) {
	c, err := mesh.RequireRole(ctx, mesh.RoleService)
	if err != nil {
		return mesh.Caller{}, err
	}
	return c, nil
}

func (s *Service) needMessages() error {
	if s.messages == nil {
		return connect.NewError(connect.CodeUnavailable, errors.New("inbound A2A is unavailable: the remoteagents service has no messages service"))
	}
	return nil
}

// DeliverInbound implements RemoteAgentsService.DeliverInbound: the
// message goes to the agent's inbox as a message from the sender, sent at
// the sender's depth, so the messages service refuses it from depth 3 on
// and stores it one deeper; then the task is recorded.
func (s *Service) DeliverInbound(ctx context.Context, req *remoteagentsv1.DeliverInboundRequest) (*remoteagentsv1.DeliverInboundResponse, error) {
	from, err := sender(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.needMessages(); err != nil {
		return nil, err
	}
	if prev, err := s.store.InboundByMessage(ctx, from.Agent, req.GetA2AMessageId()); err == nil {
		if prev.GetAgentId() != req.GetAgentId() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("message %s was delivered to another agent", req.GetA2AMessageId()))
		}
		return &remoteagentsv1.DeliverInboundResponse{Inbound: prev}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("look up inbound task: %w", err))
	}
	// The message's idempotency key is the A2A message id (scoped by the
	// sender): a redelivery stores no second message.
	sent, err := s.messages.Send(withIdempotencyKey(ctx, "a2a:"+req.GetA2AMessageId()),
		&messagesv1.SendRequest{ToAgent: req.GetAgentId(), Message: req.GetText()})
	if err != nil {
		return nil, messagesError(err, "could not deliver the message; try again")
	}
	m := sent.GetMessage()
	now := s.nowMillis()
	contextID := req.GetContextId()
	if contextID == "" {
		contextID = ids.NewAt("ctx", now)
	}
	in := &remoteagentsv1.Inbound{
		TaskId:       ids.NewAt("tsk", now),
		ContextId:    contextID,
		AgentId:      req.GetAgentId(),
		Sender:       from.Agent,
		A2AMessageId: req.GetA2AMessageId(),
		MessageId:    m.GetId(),
		ThreadId:     m.GetThreadId(),
		Text:         req.GetText(),
		Depth:        m.GetDepth(),
		Status:       inboundWorking,
		CreateTime:   timestamppb.New(now),
		UpdateTime:   timestamppb.New(now),
	}
	stored, created, err := s.store.CreateInbound(ctx, in)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record inbound task: %w", err))
	}
	if created {
		s.log.InfoContext(ctx, "remoteagents.inbound_delivered", "task_id", stored.GetTaskId(), "agent", stored.GetAgentId(),
			"sender", stored.GetSender(), "message_id", stored.GetMessageId(), "depth", stored.GetDepth())
	}
	return &remoteagentsv1.DeliverInboundResponse{Inbound: stored}, nil
}

// GetInbound implements RemoteAgentsService.GetInbound.
func (s *Service) GetInbound(ctx context.Context, req *remoteagentsv1.GetInboundRequest) (*remoteagentsv1.GetInboundResponse, error) {
	in, err := s.currentInbound(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return &remoteagentsv1.GetInboundResponse{Inbound: in}, nil
}

// CancelInbound implements RemoteAgentsService.CancelInbound: a task the
// recipient has answered cannot be cancelled.
func (s *Service) CancelInbound(ctx context.Context, req *remoteagentsv1.CancelInboundRequest) (*remoteagentsv1.CancelInboundResponse, error) {
	in, err := s.currentInbound(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if in.GetStatus() == inboundCompleted {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("task %s is completed: %s answered it", in.GetTaskId(), in.GetAgentId()))
	}
	if in.GetStatus() == inboundWorking {
		ended, changed, err := s.store.EndInbound(ctx, in.GetTaskId(), inboundCancelled, "", "", s.nowMillis())
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("cancel inbound task: %w", err))
		}
		if ended.GetStatus() == inboundCompleted {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("task %s is completed: %s answered it", in.GetTaskId(), in.GetAgentId()))
		}
		if changed {
			s.log.InfoContext(ctx, "remoteagents.inbound_cancelled", "task_id", in.GetTaskId(), "agent", in.GetAgentId(), "sender", in.GetSender())
			s.notifyInbound(ctx, ended)
		}
		in = ended
	}
	return &remoteagentsv1.CancelInboundResponse{Inbound: in}, nil
}

// ownInbound returns the caller's task: to any other sender it does not
// exist.
func (s *Service) ownInbound(ctx context.Context, taskID string) (*remoteagentsv1.Inbound, error) {
	from, err := sender(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.needMessages(); err != nil {
		return nil, err
	}
	in, err := s.store.GetInbound(ctx, taskID)
	if errors.Is(err, ErrNotFound) || (err == nil && in.GetSender() != from.Agent) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", taskID))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get inbound task: %w", err))
	}
	return in, nil
}

// currentInbound returns the sender's task as it is now: a working task
// whose recipient has answered in the thread is completed with the answer
// first.
func (s *Service) currentInbound(ctx context.Context, taskID string) (*remoteagentsv1.Inbound, error) {
	in, err := s.ownInbound(ctx, taskID)
	if err != nil {
		return nil, err
	}
	return s.refresh(ctx, in, true)
}

// refresh completes a working task whose recipient has answered in its
// thread, and returns the task as it is; notify tells the task's push
// workflow when it changed.
func (s *Service) refresh(ctx context.Context, in *remoteagentsv1.Inbound, notify bool) (*remoteagentsv1.Inbound, error) {
	if in.GetStatus() != inboundWorking {
		return in, nil
	}
	reply, err := s.reply(ctx, in)
	if err != nil {
		return nil, messagesError(err, "could not read the task's thread; try again")
	}
	if reply == nil {
		return in, nil
	}
	answer, err := s.screenAnswer(ctx, in, reply.GetText())
	if err != nil {
		return nil, err
	}
	ended, changed, err := s.store.EndInbound(ctx, in.GetTaskId(), inboundCompleted, answer, reply.GetId(), s.nowMillis())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("complete inbound task: %w", err))
	}
	if changed {
		s.log.InfoContext(ctx, "remoteagents.inbound_answered", "task_id", in.GetTaskId(), "agent", in.GetAgentId(), "answer_message_id", reply.GetId())
		if notify {
			s.notifyInbound(ctx, ended)
		}
	}
	return ended, nil
}

// screenAnswer is the recipient's answer as it leaves the mesh: every
// secret in it (a token, a private key: gitleaks' rules, internal/untrusted)
// replaced by "[REDACTED:<rule>]", with one guardrail event naming the
// rules, never the secret. The task stores, shows, streams and pushes only
// this text, so an agent that pastes a credential into its answer to
// another mesh leaks nothing.
func (s *Service) screenAnswer(ctx context.Context, in *remoteagentsv1.Inbound, text string) (string, error) {
	scanner, err := untrusted.Default()
	if err != nil {
		return "", rpcerror.WithCause(connect.CodeInternal, "could not screen the answer for secrets", err)
	}
	clean, rules := scanner.Redact(text)
	if len(rules) > 0 {
		s.log.WarnContext(ctx, toolcall.EventGuardrail, "guardrail", "secret_redacted", "task_id", in.GetTaskId(),
			"agent", in.GetAgentId(), "sender", in.GetSender(), "redacted", len(rules), "rules", slices.Compact(slices.Sorted(slices.Values(rules))))
	}
	return clean, nil
}

// replyWindow is how many of a thread's newest messages are searched for
// the recipient's answer.
const replyWindow = 50

// reply is the recipient's first answer to the sender in the task's
// thread, or nil.
func (s *Service) reply(ctx context.Context, in *remoteagentsv1.Inbound) (*messagesv1.Message, error) {
	res, err := s.messages.List(ctx, &messagesv1.ListRequest{ThreadId: in.GetThreadId(), Limit: replyWindow})
	if err != nil {
		return nil, err
	}
	var first *messagesv1.Message
	for _, m := range res.GetMessages() { // newest first
		if m.GetId() != in.GetMessageId() && m.GetFromAgent() == in.GetAgentId() && m.GetToAgent() == in.GetSender() {
			first = m
		}
	}
	return first, nil
}

// messagesError is what the caller gets when the messages service refused
// or failed: its refusal (the depth limit) in its words, anything else as
// unavailable, the cause logged under an error id.
func messagesError(err error, unavailable string) error {
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New(ce.Message()))
		}
	}
	return rpcerror.WithCause(connect.CodeUnavailable, unavailable, fmt.Errorf("messages service: %w", err))
}

type idempotencyKeyCtx struct{}

// withIdempotencyKey makes the messages client send key as the call's
// Idempotency-Key (NewIdempotencyInterceptor).
func withIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// NewIdempotencyInterceptor sends the idempotency key a call's context
// carries (withIdempotencyKey), beside the forwarded mesh token.
func NewIdempotencyInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if key, ok := ctx.Value(idempotencyKeyCtx{}).(string); ok && req.Spec().IsClient {
				req.Header().Set(mesh.HeaderIdempotencyKey, key)
			}
			return next(ctx, req)
		}
	})
}
