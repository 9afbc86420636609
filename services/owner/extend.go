package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// MaxAskLife is how long an ask may wait for its answer in all, from when
// it was asked, extensions included (the longest timeout an ask may have).
const MaxAskLife = 7 * 24 * time.Hour

// ToolExtendAsk is the tool that extends asks, as the audit trail names it.
const ToolExtendAsk = "owner_extend_ask"

// ExtendAsk implements OwnerService.ExtendAsk: the new expire time goes to
// the ask's workflow as the extend update, whose validator refuses it when
// the ask no longer waits; the workflow's timer then runs to the new time,
// and the workflow records the extension in the audit trail. Only the agent
// that asked may extend an ask: not another agent, not the owner.
func (s *Service) ExtendAsk(ctx context.Context, req *ownerv1.ExtendAskRequest) (*ownerv1.ExtendAskResponse, error) {
	call := mesh.FromContext(ctx)
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.store.GetAsk(ctx, req.GetAskId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("ask %s not found", req.GetAskId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get ask: %w", err))
	}
	if a.GetAgentId() != agent {
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("ask %s was made by another agent; only the agent that asked may extend it", a.GetAskId()))
	}
	if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
		return nil, notPending(a)
	}
	if s.wf == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("asks are unavailable: the owner service runs without Temporal"))
	}
	expire := a.GetExpireTime().AsTime().Add(time.Duration(req.GetExtendSeconds()) * time.Second)
	if latest := a.GetCreateTime().AsTime().Add(MaxAskLife); expire.After(latest) {
		return nil, invalidExtension(fmt.Sprintf("an ask waits at most %s from when it was asked: ask %s can expire at %s at the latest, and expires at %s now",
			"7 days", a.GetAskId(), latest.UTC().Format(time.RFC3339), a.GetExpireTime().AsTime().UTC().Format(time.RFC3339)))
	}
	// A retried call (the same key) is the same update and the same audit
	// record.
	key := call.IdempotencyKey
	if key == "" {
		key = ids.New("key")
	}
	st, err := s.wf.ExtendAsk(ctx, a.GetWorkflowId(), "extend/"+key, &ownerv1.ExtendUpdate{
		ExpireTime:  timestamppb.New(expire),
		Reason:      req.GetReason(),
		RequestedBy: call.Caller.Subject,
		CallId:      ids.Derive("ext", "owner.extend_ask", agent, key),
		Request:     req,
	})
	if rej, ok := errors.AsType[*AnswerRejectedError](err); ok {
		if rej.Reason == ownerv1.AskRejection_ASK_REJECTION_INVALID_EXPIRY {
			return nil, invalidExtension(rej.Message)
		}
		err = ErrNoWorkflow
	}
	if errors.Is(err, ErrNoWorkflow) {
		if cur, gerr := s.store.GetAsk(ctx, a.GetAskId()); gerr == nil && cur.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
			return nil, notPending(cur)
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("ask %s is no longer waiting for an answer", a.GetAskId()))
	}
	if err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not extend the ask; try again", fmt.Errorf("extend ask %s: %w", a.GetAskId(), err))
	}
	// The workflow's answer is the expire time it now keeps (the first
	// one, for a retried call).
	extended, err := s.store.ExtendAsk(ctx, a.GetAskId(), st)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record extension: %w", err))
	}
	s.log.InfoContext(ctx, "owner.ask_extended", "ask_id", a.GetAskId(), "agent", agent, "subject", call.Caller.Subject,
		"expire_time", st.UTC().Format(time.RFC3339))
	return &ownerv1.ExtendAskResponse{Ask: extended}, nil
}

func invalidExtension(msg string) error {
	return boundary.InvalidArgument(boundary.Violation{Field: "extend_seconds", Rule: "owner.max_ask_life", Message: msg})
}
