package schedules

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Pause implements SchedulesService.Pause.
func (s *Service) Pause(ctx context.Context, req *schedulesv1.PauseRequest) (*schedulesv1.PauseResponse, error) {
	sch, caller, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	switch sch.GetStatus() {
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED:
		return &schedulesv1.PauseResponse{Schedule: sch}, nil
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE:
	default:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is %s; only an active schedule can be paused", sch.GetId(), protoenum.Word(sch.GetStatus())))
	}
	note := "paused by " + caller.Agent
	if req.GetReason() != "" {
		note += ": " + req.GetReason()
	}
	if err := s.engine.SetPaused(ctx, sch.GetTemporalScheduleId(), true, note); err != nil {
		return nil, temporalUnavailable("pause", sch.GetTemporalScheduleId(), err)
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.Status = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED
	next.PausedBy = caller.Agent
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	done, err := s.save(ctx, next, sch)
	if err != nil {
		return nil, err
	}
	return &schedulesv1.PauseResponse{Schedule: done}, nil
}

// Resume implements SchedulesService.Resume.
func (s *Service) Resume(ctx context.Context, req *schedulesv1.ResumeRequest) (*schedulesv1.ResumeResponse, error) {
	sch, caller, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	switch sch.GetStatus() {
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE:
		return &schedulesv1.ResumeResponse{Schedule: s.withNextRuns(sch)}, nil
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED:
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is waiting for approval; only the owner's approval starts it", sch.GetId()))
	default:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"schedule %s is %s; only a paused schedule can be resumed", sch.GetId(), protoenum.Word(sch.GetStatus())))
	}
	// Whoever paused it may resume it; what the owner paused, only the
	// owner resumes.
	if sch.GetPausedBy() != caller.Agent && !caller.HasRole(mesh.RoleOwner) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"schedule %s was paused by %s; only they or the owner may resume it", sch.GetId(), sch.GetPausedBy()))
	}
	if err := s.engine.SetPaused(ctx, sch.GetTemporalScheduleId(), false, "resumed by "+caller.Agent); err != nil {
		return nil, temporalUnavailable("unpause", sch.GetTemporalScheduleId(), err)
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.Status = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE
	next.PausedBy = ""
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	done, err := s.save(ctx, next, sch)
	if err != nil {
		return nil, err
	}
	return &schedulesv1.ResumeResponse{Schedule: s.withNextRuns(done)}, nil
}

// Delete implements SchedulesService.Delete.
func (s *Service) Delete(ctx context.Context, req *schedulesv1.DeleteRequest) (*schedulesv1.DeleteResponse, error) {
	sch, caller, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	from := sch.GetStatus()
	switch from {
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL,
		schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE,
		schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED:
	default:
		return &schedulesv1.DeleteResponse{Schedule: sch}, nil // already ended
	}
	if err := s.engine.DeleteSchedule(ctx, sch.GetTemporalScheduleId()); err != nil {
		return nil, temporalUnavailable("delete", sch.GetTemporalScheduleId(), err)
	}
	if from == schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL && sch.GetApprovalWorkflowId() != "" {
		if err := s.engine.WithdrawApproval(ctx, sch.GetApprovalWorkflowId()); err != nil {
			// The schedule is gone either way; an approval that still
			// arrives finds no Temporal Schedule and is refused.
			s.log.WarnContext(ctx, "schedules.withdraw_failed", "schedule", sch.GetId(), "error", err)
		}
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.Status = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DELETED
	next.PausedBy = ""
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	done, err := s.save(ctx, next, sch)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.deleted", "schedule", done.GetId(), "by", caller.Agent)
	return &schedulesv1.DeleteResponse{Schedule: done}, nil
}
