package schedules

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Executions implements SchedulesService.Executions.
func (s *Service) Executions(ctx context.Context, req *schedulesv1.ExecutionsRequest) (*schedulesv1.ExecutionsResponse, error) {
	sch, _, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListExecutions(ctx, sch.GetId(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list executions: %w", err))
	}
	return &schedulesv1.ExecutionsResponse{Executions: list, Page: paging.New(offset, limit, total)}, nil
}

// RecordExecution implements SchedulesService.RecordExecution.
func (s *Service) RecordExecution(ctx context.Context, req *schedulesv1.RecordExecutionRequest) (*schedulesv1.RecordExecutionResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	e := req.GetExecution()
	sch, err := s.load(ctx, e.GetScheduleId())
	if err != nil {
		return nil, err
	}
	var refusal error
	if e.GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		if why := runMismatch(sch, req); why != "" {
			// Recorded, so the agent and the owner see the refused run.
			s.log.WarnContext(ctx, "schedules.run_refused", "schedule", sch.GetId(), "run", e.GetRunId(), "why", why)
			msg := fmt.Sprintf("run %s refused: %s", e.GetRunId(), why)
			refusal = connect.NewError(connect.CodeFailedPrecondition, errors.New(msg))
			e = proto.Clone(e).(*schedulesv1.Execution)
			e.Status, e.DomainCode, e.EndTime = schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED, toolcall.CodeConflict, e.GetStartTime()
			if e.Result, err = structpb.NewStruct(map[string]any{
				"status": "error", "tool": req.GetAction().GetTool(), "error_type": "ConflictError",
				"domain_code": toolcall.CodeConflict, "message": msg,
			}); err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
		}
	}
	got, err := s.store.RecordExecution(ctx, e)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record execution: %w", err))
	}
	if refusal != nil {
		return nil, refusal
	}
	return &schedulesv1.RecordExecutionResponse{Execution: got}, nil
}

// runMismatch says why a run about to start may not make its call: the
// schedule is not active, or the call is not the one the owner approved.
// Temporal holds the call a run makes; the service holds what was approved.
func runMismatch(sch *schedulesv1.Schedule, req *schedulesv1.RecordExecutionRequest) string {
	switch {
	case sch.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE:
		return fmt.Sprintf("schedule %s is %s", sch.GetId(), protoenum.Word(sch.GetStatus()))
	case req.GetAgentId() != sch.GetAgentId():
		return fmt.Sprintf("it would act as %s, the schedule as %s", req.GetAgentId(), sch.GetAgentId())
	case req.GetDepth() != sch.GetDepth()+1:
		return fmt.Sprintf("it would call at depth %d, the schedule at %d", req.GetDepth(), sch.GetDepth()+1)
	case req.GetAction().GetTool() != sch.GetAction().GetTool():
		return fmt.Sprintf("it would call %s, the approved schedule calls %s", req.GetAction().GetTool(), sch.GetAction().GetTool())
	case !proto.Equal(orEmpty(req.GetAction().GetArguments()), orEmpty(sch.GetAction().GetArguments())):
		return "its arguments are not the approved ones"
	}
	return ""
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}
