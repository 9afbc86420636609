package schedules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Update implements SchedulesService.Update. A change is a new revision of
// the schedule, approved anew, in three steps:
//
//  1. the store takes the change (Revise): the schedule is pending approval
//     with no spec hash, so from here on no run calls anything (a run's
//     start report finds it not active) and no decision on the old spec
//     applies (ApplyDecision finds another hash);
//  2. its Temporal Schedule is changed and paused in one update, and the
//     approval request about the old spec is withdrawn;
//  3. the approval workflow of the new spec hash is started and recorded.
//
// When step 2 or 3 fails, the change stays taken and the schedule runs
// nothing; a retry with the same idempotency key (or another change)
// finishes it.
func (s *Service) Update(ctx context.Context, req *schedulesv1.UpdateRequest) (*schedulesv1.UpdateResponse, error) {
	sch, caller, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	switch sch.GetStatus() {
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL,
		schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE,
		schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED:
	default:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is %s; only a pending, active or paused schedule can be changed", sch.GetId(), protoenum.Word(sch.GetStatus())))
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	next, err := s.changed(ctx, sch, req, now)
	if err != nil {
		return nil, err
	}
	if sameSchedule(sch, next) {
		if sch.GetSpecHash() == "" && sch.GetStatus() == schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			// This change was taken but the owner is not asked yet (an
			// earlier call failed half way): finish it.
			done, err := s.reask(ctx, sch)
			if err != nil {
				return nil, err
			}
			return &schedulesv1.UpdateResponse{Schedule: s.withNextRuns(done)}, nil
		}
		return &schedulesv1.UpdateResponse{Schedule: s.withNextRuns(sch)}, nil
	}
	// The change is defined by this call: its runs go no shallower than
	// either call that shaped them.
	next.Depth = max(sch.GetDepth(), int32(caller.Depth))
	next.Status = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL
	next.SpecHash = ""
	next.Decision = nil
	next.PausedBy = ""
	next.Revision = sch.GetRevision() + 1
	next.UpdateTime = timestamppb.New(now)
	if sch.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
		next.ApprovalWorkflowId = "" // decided: nothing to withdraw
	}

	key := idempotency.CallOf(ctx, req)
	stored, revision, created, err := s.store.Revise(ctx, next, sch, caller.Agent, key)
	switch {
	case errors.Is(err, idempotency.ErrKeyReused):
		return nil, idempotency.KeyConflict(key.Key)
	case errors.Is(err, ErrStale):
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("schedule %s changed while it was being changed; read it and try again", sch.GetId()))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("change schedule: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, key.Key)
		if stored.GetRevision() != revision || stored.GetSpecHash() != "" {
			// That change was asked about already, or a later one overtook it.
			return &schedulesv1.UpdateResponse{Schedule: s.withNextRuns(stored)}, nil
		}
	}
	done, err := s.reask(ctx, stored)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.changed", "schedule", done.GetId(), "by", caller.Agent, "revision", done.GetRevision(),
		"tool", done.GetAction().GetTool(), "approval_workflow", done.GetApprovalWorkflowId())
	return &schedulesv1.UpdateResponse{Schedule: s.withNextRuns(done)}, nil
}

// changed is sch with the changes req asks for, checked as a create checks
// them.
func (s *Service) changed(ctx context.Context, sch *schedulesv1.Schedule, req *schedulesv1.UpdateRequest, now time.Time) (*schedulesv1.Schedule, error) {
	cron, interval, tz := sch.GetCron(), sch.GetIntervalSeconds(), sch.GetTimezone()
	switch {
	case req.GetCron() != "":
		cron, interval = req.GetCron(), 0
	case req.GetIntervalSeconds() != 0:
		cron, interval = "", req.GetIntervalSeconds()
	}
	if req.Timezone != nil {
		tz = req.GetTimezone()
	}
	spec, err := s.parseSpec(cron, interval, tz, now)
	if err != nil {
		return nil, err
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.Cron, next.IntervalSeconds, next.Timezone = spec.Cron, interval, spec.Location.String()
	if req.GetAction() != nil {
		args, err := s.checkAction(ctx, req.GetAction())
		if err != nil {
			return nil, err
		}
		next.Action = &schedulesv1.Action{Tool: req.GetAction().GetTool(), Arguments: args}
	}
	if req.Description != nil {
		next.Description = req.GetDescription()
	}
	return next, nil
}

// sameSchedule reports whether a and b run the same call at the same times
// and say the same about it.
func sameSchedule(a, b *schedulesv1.Schedule) bool {
	return a.GetCron() == b.GetCron() && a.GetIntervalSeconds() == b.GetIntervalSeconds() && a.GetTimezone() == b.GetTimezone() &&
		a.GetDescription() == b.GetDescription() && a.GetAction().GetTool() == b.GetAction().GetTool() &&
		proto.Equal(orEmpty(a.GetAction().GetArguments()), orEmpty(b.GetAction().GetArguments()))
}

// reask asks the owner about a changed schedule: pending approval, with no
// spec hash yet, and the approval workflow of the spec before the change,
// if that one was still waiting.
func (s *Service) reask(ctx context.Context, sch *schedulesv1.Schedule) (*schedulesv1.Schedule, error) {
	spec, err := ParseSpec(sch.GetCron(), sch.GetIntervalSeconds(), sch.GetTimezone())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read stored spec: %w", err))
	}
	unfinished := func(what string, err error) error {
		return rpcerror.WithCause(connect.CodeUnavailable,
			fmt.Sprintf("schedule %s is changed and runs nothing until the owner approves the change, but could not %s now; "+
				"retry with the same idempotency key, or change it again, to finish", sch.GetId(), what),
			fmt.Errorf("change schedule %s: %s: %w", sch.GetId(), what, err))
	}
	if old := sch.GetApprovalWorkflowId(); old != "" {
		// A decision that still arrives is refused anyway (another hash);
		// withdrawing it ends the request in the Temporal UI too.
		if err := s.engine.WithdrawApproval(ctx, old); err != nil {
			s.log.WarnContext(ctx, "schedules.withdraw_failed", "schedule", sch.GetId(), "approval_workflow", old, "error", err)
		}
	}
	run := runInput(sch)
	note := fmt.Sprintf("changed (revision %d): paused until the owner approves the change (the schedule-approval workflow of %s)",
		sch.GetRevision(), sch.GetId())
	hash, err := s.engine.UpdateSchedule(ctx, sch, spec, run, note)
	if errors.Is(err, ErrNotFound) {
		// Gone from Temporal (deleted behind the service's back): the
		// change is a new one, created paused.
		hash, err = s.engine.CreateSchedule(ctx, sch, spec, run)
	}
	if errors.Is(err, ErrSuperseded) {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("another change of schedule %s overtook this one; read it and try again", sch.GetId()))
	}
	if err != nil {
		return nil, unfinished("change its Temporal Schedule", err)
	}
	approvalID := ApprovalWorkflowID(sch.GetId(), hash)
	if err := s.engine.StartApproval(ctx, approvalID, s.approvalInput(sch, hash, spec)); err != nil {
		return nil, unfinished("ask the owner (start the approval workflow)", err)
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.SpecHash = hash
	next.ApprovalWorkflowId = approvalID
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	return s.save(ctx, next, sch)
}
