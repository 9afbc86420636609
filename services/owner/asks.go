package owner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// ToolAsk is the tool that starts asks (the ToolmeshTool search attribute).
const ToolAsk = "owner_ask"

// AskID is the id of the ask an agent's call makes: derived from the call's
// idempotency key, so that a retried call names the ask (and the workflow)
// its first attempt made; random when the call has no key.
func AskID(agent, idempotencyKey string, now time.Time) string {
	if idempotencyKey == "" {
		return ids.NewAt("ask", now)
	}
	return ids.Derive("ask", "owner.ask", agent, idempotencyKey)
}

// Ask implements OwnerService.Ask: it records the ask, starts its workflow
// and waits for the outcome as long as the request (and its deadline)
// allow.
func (s *Service) Ask(ctx context.Context, req *ownerv1.AskRequest) (*ownerv1.AskResponse, error) {
	call := mesh.FromContext(ctx)
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("asks are unavailable: the owner service runs without Temporal"))
	}
	now := s.nowMillis()
	timeout := s.cfg.DefaultTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	id := AskID(agent, call.IdempotencyKey, now)
	a := &ownerv1.Ask{
		AskId:      id,
		AgentId:    agent,
		Question:   req.GetQuestion(),
		Options:    req.GetOptions(),
		Context:    req.GetContext(),
		Status:     ownerv1.AskStatus_ASK_STATUS_PENDING,
		CreateTime: timestamppb.New(now),
		ExpireTime: timestamppb.New(now.Add(timeout)),
		WorkflowId: WorkflowID(agent, id),
		Run:        req.GetRun(),
	}
	// How long this call waits for the answer is not part of the ask.
	digested := proto.Clone(req).(*ownerv1.AskRequest)
	digested.WaitSeconds = nil
	stored, created, err := s.store.CreateAsk(ctx, a, idempotency.Digest(digested))
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(call.IdempotencyKey)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record ask: %w", err))
	}
	if stored.GetAgentId() != agent {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("ask id %s is taken", id))
	}
	if !created {
		idempotency.MarkReplay(ctx, call.IdempotencyKey)
	}
	if stored.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
		return &ownerv1.AskResponse{Ask: stored}, nil
	}
	// Started on a retry too: the first attempt may have stored the ask and
	// failed before its workflow started. Starting is idempotent by id.
	if err := s.askCall(id).Start(ctx, created, func(ctx context.Context) error {
		return s.wf.StartAsk(ctx, &ownerv1.AskWorkflowInput{
			AskId:      stored.GetAskId(),
			AgentId:    agent,
			Subject:    call.Caller.Subject,
			Depth:      int32(call.Caller.Depth),
			Question:   stored.GetQuestion(),
			Options:    stored.GetOptions(),
			Context:    stored.GetContext(),
			ExpireTime: stored.GetExpireTime(),
			Tool:       ToolAsk,
		})
	}, func(ctx context.Context) error { return s.store.DeleteAsk(ctx, id) }); err != nil {
		return nil, err
	}
	if created {
		s.log.InfoContext(ctx, "owner.ask_created", "ask_id", id, "agent", agent, "workflow_id", stored.GetWorkflowId(),
			"options", len(stored.GetOptions()), "timeout_s", int(timeout.Seconds()))
	}
	return &ownerv1.AskResponse{Ask: s.await(ctx, stored, workflowrun.WaitBudget(req.WaitSeconds, s.cfg.DefaultWait))}, nil
}

// askCall is the long-running call of ask id.
func (s *Service) askCall(id string) workflowrun.Call {
	return workflowrun.Call{Event: "owner.ask", What: "ask", IDKey: "ask_id", ID: id, Log: s.log}
}

// await waits up to wait (and never past ctx's deadline less a margin to
// reply) for the ask's workflow to end, and returns the ask with its
// outcome, or as it is when the wait runs out.
func (s *Service) await(ctx context.Context, a *ownerv1.Ask, wait time.Duration) *ownerv1.Ask {
	return workflowrun.Await(ctx, s.askCall(a.GetAskId()), a, wait, func(ctx context.Context) (*ownerv1.AskOutcome, error) {
		return s.wf.WaitAsk(ctx, a.GetWorkflowId())
	}, s.ended)
}

// ended returns the ask as the workflow says it is. An outcome the
// workflow reports is recorded: the workflow records it itself before it
// ends, so this changes nothing then, and covers a workflow that could not.
func (s *Service) ended(ctx context.Context, a *ownerv1.Ask, o *ownerv1.AskOutcome) *ownerv1.Ask {
	if o.GetStatus() == ownerv1.AskStatus_ASK_STATUS_PENDING || o.GetStatus() == ownerv1.AskStatus_ASK_STATUS_UNSPECIFIED {
		return a
	}
	ended, _, err := s.store.ResolveAsk(ctx, a.GetAskId(), outcome(o))
	if err != nil {
		s.log.WarnContext(ctx, "owner.ask_record_failed", "ask_id", a.GetAskId(), "error", err)
		return withOutcome(a, o)
	}
	return ended
}

// withOutcome returns a copy of a ended as o says.
func withOutcome(a *ownerv1.Ask, o *ownerv1.AskOutcome) *ownerv1.Ask {
	out := proto.Clone(a).(*ownerv1.Ask)
	if o.GetStatus() == ownerv1.AskStatus_ASK_STATUS_PENDING || o.GetStatus() == ownerv1.AskStatus_ASK_STATUS_UNSPECIFIED {
		return out
	}
	out.Status = o.GetStatus()
	out.Answer = o.GetAnswer()
	out.AnsweredBy = o.GetAnsweredBy()
	out.ResolveTime = o.GetResolveTime()
	return out
}

// queryTimeout bounds GetAsk's question to a pending ask's workflow.
const queryTimeout = time.Second

// GetAsk implements OwnerService.GetAsk: the record, and for a pending ask
// the workflow's own word (its status query), so an answer shows the moment
// the workflow has it. When the workflow cannot answer in time (no worker),
// the record stands.
func (s *Service) GetAsk(ctx context.Context, req *ownerv1.GetAskRequest) (*ownerv1.GetAskResponse, error) {
	a, err := s.visibleAsk(ctx, req.GetAskId())
	if err != nil {
		return nil, err
	}
	if a.GetStatus() == ownerv1.AskStatus_ASK_STATUS_PENDING && s.wf != nil {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		o, err := s.wf.QueryAsk(qctx, a.GetWorkflowId())
		cancel()
		if err != nil {
			s.log.DebugContext(ctx, "owner.ask_query_failed", "ask_id", a.GetAskId(), "error", err)
		} else {
			a = s.ended(ctx, a, o)
		}
	}
	return &ownerv1.GetAskResponse{Ask: a}, nil
}

// visibleAsk returns the ask when the caller may see it: its agent, or the
// owner. Another agent's ask is not found, as if it did not exist.
func (s *Service) visibleAsk(ctx context.Context, id string) (*ownerv1.Ask, error) {
	caller := mesh.FromContext(ctx).Caller
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	a, err := s.store.GetAsk(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && a.GetAgentId() != caller.Agent && !caller.HasRole(mesh.RoleOwner)) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("ask %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get ask: %w", err))
	}
	return a, nil
}

// ListAsks implements OwnerService.ListAsks.
func (s *Service) ListAsks(ctx context.Context, req *ownerv1.ListAsksRequest) (*ownerv1.ListAsksResponse, error) {
	filter, err := mesh.ListedAgent(ctx, req.GetAgentId(), "asks")
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListAsks(ctx, filter, req.GetStatus(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list asks: %w", err))
	}
	return &ownerv1.ListAsksResponse{Asks: list, Page: paging.New(offset, limit, total)}, nil
}

// Answer implements OwnerService.Answer: the answer goes to the workflow as
// the answer update, whose validator decides whether it fits the ask.
func (s *Service) Answer(ctx context.Context, req *ownerv1.AnswerRequest) (*ownerv1.AnswerResponse, error) {
	owner, err := mesh.RequireRole(ctx, mesh.RoleOwner)
	if err != nil {
		return nil, err
	}
	a, err := s.visibleAsk(ctx, req.GetAskId())
	if err != nil {
		return nil, err
	}
	if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
		return nil, notPending(a)
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("asks are unavailable: the owner service runs without Temporal"))
	}
	answeredBy := owner.Subject
	if answeredBy == "" {
		answeredBy = owner.Agent
	}
	o, err := s.wf.AnswerAsk(ctx, a.GetWorkflowId(), updateID(mesh.FromContext(ctx).IdempotencyKey),
		&ownerv1.AnswerUpdate{Answer: req.GetAnswer(), AnsweredBy: answeredBy})
	if rej, ok := errors.AsType[*AnswerRejectedError](err); ok {
		if rej.Reason == ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(rej.Message))
		}
		err = ErrNoWorkflow
	}
	if errors.Is(err, ErrNoWorkflow) {
		// It ended meanwhile (expired, or answered by someone else), or
		// its workflow never started (an orphan: withdrawn now).
		if cur, gerr := s.store.GetAsk(ctx, a.GetAskId()); gerr == nil && cur.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
			return nil, notPending(cur)
		}
		if withdrawn, werr := s.orphans().Check(ctx, a); werr == nil && withdrawn {
			if cur, gerr := s.store.GetAsk(ctx, a.GetAskId()); gerr == nil {
				return nil, notPending(cur)
			}
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("ask %s is no longer waiting for an answer", a.GetAskId()))
	}
	if err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not deliver the answer; try again", fmt.Errorf("answer ask %s: %w", a.GetAskId(), err))
	}
	// The workflow records the outcome too before it ends; recording it here
	// as well makes every read after this call see it. The first wins.
	ended, _, err := s.store.ResolveAsk(ctx, a.GetAskId(), outcome(o))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record answer: %w", err))
	}
	s.log.InfoContext(ctx, "owner.ask_answered", "ask_id", a.GetAskId(), "agent", a.GetAgentId(), "answered_by", answeredBy)
	return &ownerv1.AnswerResponse{Ask: ended}, nil
}

// updateID names one answer: the call's idempotency key, so that a retried
// Answer is the same update (Temporal applies it once).
func updateID(key string) string {
	if key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key = hex.EncodeToString(b[:])
	}
	return "answer/" + key
}

func outcome(o *ownerv1.AskOutcome) Outcome {
	at := time.Now()
	if o.GetResolveTime() != nil {
		at = o.GetResolveTime().AsTime()
	}
	return Outcome{Status: o.GetStatus(), Answer: o.GetAnswer(), AnsweredBy: o.GetAnsweredBy(), At: at}
}

func notPending(a *ownerv1.Ask) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("ask %s is no longer pending: it is %s", a.GetAskId(), protoenum.Word(a.GetStatus())))
}

// cancelWait bounds how long CancelAsk waits for the workflow to end.
const cancelWait = 5 * time.Second

// CancelAsk implements OwnerService.CancelAsk.
func (s *Service) CancelAsk(ctx context.Context, req *ownerv1.CancelAskRequest) (*ownerv1.CancelAskResponse, error) {
	a, err := s.visibleAsk(ctx, req.GetAskId())
	if err != nil {
		return nil, err
	}
	if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
		return &ownerv1.CancelAskResponse{Ask: a}, nil
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("asks are unavailable: the owner service runs without Temporal"))
	}
	if err := s.wf.CancelAsk(ctx, a.GetWorkflowId()); err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not cancel the ask; try again", fmt.Errorf("cancel ask %s: %w", a.GetAskId(), err))
	}
	s.log.InfoContext(ctx, "owner.ask_cancel_requested", "ask_id", a.GetAskId(), "agent", a.GetAgentId())
	// Cancelling is cooperative: wait a little for the workflow to end (the
	// owner may have answered first).
	return &ownerv1.CancelAskResponse{Ask: s.await(ctx, a, cancelWait)}, nil
}

// RecordAskOutcome implements OwnerService.RecordAskOutcome, for the ask
// workflow (mesh service role).
func (s *Service) RecordAskOutcome(ctx context.Context, req *ownerv1.RecordAskOutcomeRequest) (*ownerv1.RecordAskOutcomeResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	a, changed, err := s.store.ResolveAsk(ctx, req.GetAskId(), Outcome{
		Status:     req.GetStatus(),
		Answer:     req.GetAnswer(),
		AnsweredBy: req.GetAnsweredBy(),
		At:         req.GetResolveTime().AsTime(),
	})
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("ask %s not found", req.GetAskId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record ask outcome: %w", err))
	}
	if changed {
		s.log.InfoContext(ctx, "owner.ask_ended", "ask_id", a.GetAskId(), "agent", a.GetAgentId(), "status", protoenum.Word(a.GetStatus()))
	}
	return &ownerv1.RecordAskOutcomeResponse{Ask: a}, nil
}
