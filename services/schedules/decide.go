package schedules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Approve implements SchedulesService.Approve: it sends the approve update to
// the schedule's approval workflow, which carries it out (ApplyDecision).
func (s *Service) Approve(ctx context.Context, req *schedulesv1.ApproveRequest) (*schedulesv1.ApproveResponse, error) {
	caller, sch, err := s.pendingForOwner(ctx, req.GetScheduleId(), "approved")
	if err != nil {
		return nil, err
	}
	if h := req.GetSpecHash(); h != "" && h != sch.GetSpecHash() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s's approval request is about spec hash %s, not %s: it was not approved", sch.GetId(), sch.GetSpecHash(), h))
	}
	_, err = s.engine.Approve(ctx, sch.GetApprovalWorkflowId(), &schedulesv1.ApproveUpdate{
		Note: req.GetReason(), DecidedBy: decider(caller), SpecHash: sch.GetSpecHash(),
	})
	if err != nil {
		return nil, decisionError(sch.GetId(), "approve", err)
	}
	done, err := s.load(ctx, sch.GetId())
	if err != nil {
		return nil, err
	}
	return &schedulesv1.ApproveResponse{Schedule: s.withNextRuns(done)}, nil
}

// Deny implements SchedulesService.Deny through the approval workflow.
func (s *Service) Deny(ctx context.Context, req *schedulesv1.DenyRequest) (*schedulesv1.DenyResponse, error) {
	caller, sch, err := s.pendingForOwner(ctx, req.GetScheduleId(), "denied")
	if err != nil {
		return nil, err
	}
	if _, err := s.engine.Deny(ctx, sch.GetApprovalWorkflowId(), &schedulesv1.DenyUpdate{Note: req.GetReason(), DecidedBy: decider(caller)}); err != nil {
		return nil, decisionError(sch.GetId(), "deny", err)
	}
	done, err := s.load(ctx, sch.GetId())
	if err != nil {
		return nil, err
	}
	return &schedulesv1.DenyResponse{Schedule: done}, nil
}

// pendingForOwner checks that the caller is the owner and that the schedule
// waits for approval.
func (s *Service) pendingForOwner(ctx context.Context, id, verb string) (mesh.Caller, *schedulesv1.Schedule, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleOwner)
	if err != nil {
		return mesh.Caller{}, nil, err
	}
	sch, err := s.load(ctx, id)
	if err != nil {
		return mesh.Caller{}, nil, err
	}
	if sch.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL || sch.GetApprovalWorkflowId() == "" {
		return mesh.Caller{}, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is %s; only a schedule waiting for approval can be %s", id, protoenum.Word(sch.GetStatus()), verb))
	}
	if sch.GetSpecHash() == "" {
		// Changed, and the owner is not asked about the change yet.
		return mesh.Caller{}, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s was just changed and its approval request is not ready yet; try again shortly", id))
	}
	return caller, sch, nil
}

func decider(c mesh.Caller) string {
	if c.Subject != "" {
		return c.Subject
	}
	return c.Agent
}

// temporalUnavailable is the answer when Temporal did not carry out verb on
// the Temporal Schedule tid; the error is logged, not sent.
func temporalUnavailable(verb, tid string, err error) error {
	return rpcerror.WithCause(connect.CodeUnavailable, fmt.Sprintf("could not %s Temporal Schedule %s now; try again", verb, tid),
		fmt.Errorf("%s Temporal Schedule %s: %w", verb, tid, err))
}

// decisionError maps an approval workflow's refusal to the caller's error.
func decisionError(id, verb string, err error) error {
	if errors.Is(err, ErrDecisionRefused) {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cannot %s schedule %s: %w", verb, id, err))
	}
	return rpcerror.WithCause(connect.CodeUnavailable, fmt.Sprintf("could not %s schedule %s now; try again", verb, id), err)
}

// ApplyDecision implements SchedulesService.ApplyDecision.
func (s *Service) ApplyDecision(ctx context.Context, req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	sch, err := s.load(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	if req.GetSpecHash() != sch.GetSpecHash() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"this decision is about spec hash %s, but schedule %s's approval request is about %s", req.GetSpecHash(), sch.GetId(), sch.GetSpecHash()))
	}
	pending := schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL
	var to schedulesv1.ScheduleStatus
	switch req.GetKind() {
	case schedulesv1.DecisionKind_DECISION_KIND_APPROVE:
		to = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE
	case schedulesv1.DecisionKind_DECISION_KIND_DENY:
		to = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DENIED
	default:
		to = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_EXPIRED
	}
	if sch.GetStatus() == to && sch.GetDecision() != nil {
		// Applied already: the workflow's activity was retried.
		return &schedulesv1.ApplyDecisionResponse{Schedule: s.withNextRuns(sch)}, nil
	}
	if sch.GetStatus() != pending {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is %s; only a schedule waiting for approval can be decided on", sch.GetId(), protoenum.Word(sch.GetStatus())))
	}
	tid := sch.GetTemporalScheduleId()
	if to == schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE {
		hash, err := s.engine.SpecHash(ctx, tid)
		if errors.Is(err, ErrNotFound) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"schedule %s's Temporal Schedule %s no longer exists: it was not approved", sch.GetId(), tid))
		}
		if err != nil {
			return nil, temporalUnavailable("read", tid, err)
		}
		if hash != req.GetSpecHash() {
			s.log.WarnContext(ctx, "schedules.spec_changed", "schedule", sch.GetId(), "asked", req.GetSpecHash(), "now", hash)
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"schedule %s changed since the owner was asked (spec hash %s, now %s): it was not approved; deny it, or change it with schedules_update, to ask anew",
				sch.GetId(), req.GetSpecHash(), hash))
		}
		note := "approved by " + orDefault(req.GetDecidedBy(), "the owner")
		if req.GetNote() != "" {
			note += ": " + req.GetNote()
		}
		if err := s.engine.SetPaused(ctx, tid, false, note); err != nil {
			return nil, temporalUnavailable("unpause", tid, err)
		}
	} else if err := s.engine.DeleteSchedule(ctx, tid); err != nil {
		return nil, temporalUnavailable("delete", tid, err)
	}
	now := timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.Status = to
	next.Decision = &schedulesv1.Decision{DecidedBy: req.GetDecidedBy(), Note: req.GetNote(), DecideTime: now}
	next.UpdateTime = now
	done, err := s.save(ctx, next, sch)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.decided", "schedule", done.GetId(), "status", protoenum.Word(to), "decided_by", req.GetDecidedBy())
	return &schedulesv1.ApplyDecisionResponse{Schedule: s.withNextRuns(done)}, nil
}
