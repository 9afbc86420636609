package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// maxArgumentsBytes bounds a schedule's arguments as JSON.
const maxArgumentsBytes = 16 << 10

// Schedulable reports whether a tool may be scheduled and, if not, why. A
// run calls the tool unattended, as the schedule's agent and with no roles,
// long after the owner approved it, so only tools an agent may call on its
// own, and that answer within one call, qualify:
//   - not ADMIN: each admin call needs its own confirmation and reason;
//   - not privileged: those need an explicit grant, checked per call;
//   - not long-running: a run is one call with a deadline;
//   - no schedules_ tool: a schedule may not create or steer schedules.
func Schedulable(t *toolcatalog.Tool) (bool, string) {
	switch {
	case strings.HasPrefix(t.Name, "schedules_"):
		return false, "a schedule cannot call schedules tools"
	case t.Kind == toolv1.Kind_KIND_ADMIN:
		return false, "admin tools need a confirmation and a reason for every call"
	case t.Privileged:
		return false, "privileged tools need an explicit grant for every call"
	case t.LongRunning:
		return false, "long-running tools do not answer within one call"
	}
	return true, ""
}

// Create implements SchedulesService.Create.
func (s *Service) Create(ctx context.Context, req *schedulesv1.CreateRequest) (*schedulesv1.CreateResponse, error) {
	call := mesh.FromContext(ctx)
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	spec, err := s.parseSpec(req.GetCron(), req.GetIntervalSeconds(), req.GetTimezone(), now)
	if err != nil {
		return nil, err
	}
	args, err := s.checkAction(ctx, req.GetAction())
	if err != nil {
		return nil, err
	}
	id := ids.NewAt("sch", now)
	sch := &schedulesv1.Schedule{
		Id:                 id,
		AgentId:            call.Caller.Agent,
		Description:        req.GetDescription(),
		Cron:               spec.Cron,
		IntervalSeconds:    req.GetIntervalSeconds(),
		Timezone:           spec.Location.String(),
		Action:             &schedulesv1.Action{Tool: req.GetAction().GetTool(), Arguments: args},
		Status:             schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL,
		TemporalScheduleId: TemporalID(id),
		Depth:              int32(call.Caller.Depth),
		CreateTime:         timestamppb.New(now),
		UpdateTime:         timestamppb.New(now),
	}
	key := idempotency.CallOf(ctx, req)
	stored, created, err := s.store.Create(ctx, sch, key)
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(key.Key)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create schedule: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, key.Key)
	}
	if !created && stored.GetSpecHash() != "" {
		// A retry of a create that completed.
		return &schedulesv1.CreateResponse{Schedule: s.withNextRuns(stored)}, nil
	}
	if !created {
		// A retry of a create that did not get as far as asking the owner:
		// finish it with what was stored.
		if sch = stored; sch.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			return &schedulesv1.CreateResponse{Schedule: s.withNextRuns(sch)}, nil
		}
		if spec, err = ParseSpec(sch.GetCron(), sch.GetIntervalSeconds(), sch.GetTimezone()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read stored spec: %w", err))
		}
	}
	done, err := s.provision(ctx, sch, spec)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.created", "schedule", done.GetId(), "agent", done.GetAgentId(),
		"tool", done.GetAction().GetTool(), "spec", spec.Summary(), "approval_workflow", done.GetApprovalWorkflowId())
	return &schedulesv1.CreateResponse{Schedule: s.withNextRuns(done)}, nil
}

// provision creates the paused Temporal Schedule and the approval workflow
// of a stored schedule and records the approval request. On failure it
// undoes what it can, so that a retry (with the same idempotency key)
// starts afresh rather than finding half a schedule.
func (s *Service) provision(ctx context.Context, sch *schedulesv1.Schedule, spec Spec) (*schedulesv1.Schedule, error) {
	var approvalID string
	fail := func(what string, err error) error {
		// Undo without the caller's cancellation: the caller may be gone.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		// But undo in Temporal only within the caller's deadline: when
		// Temporal does not answer, the answer (unavailable) must still
		// reach the caller in time; what could not be undone stays paused
		// and unapproved, and never runs.
		tctx := uctx
		if dl, ok := ctx.Deadline(); ok {
			var tcancel context.CancelFunc
			tctx, tcancel = context.WithDeadline(uctx, dl)
			defer tcancel()
		}
		if approvalID != "" {
			if uerr := s.engine.WithdrawApproval(tctx, approvalID); uerr != nil {
				s.log.WarnContext(ctx, "schedules.undo_failed", "schedule", sch.GetId(), "step", "withdraw approval", "error", uerr)
			}
		}
		if uerr := s.engine.DeleteSchedule(tctx, sch.GetTemporalScheduleId()); uerr != nil {
			s.log.WarnContext(ctx, "schedules.undo_failed", "schedule", sch.GetId(), "step", "delete temporal schedule", "error", uerr)
		}
		if uerr := s.store.Delete(uctx, sch.GetId()); uerr != nil {
			s.log.WarnContext(ctx, "schedules.undo_failed", "schedule", sch.GetId(), "step", "delete stored schedule", "error", uerr)
		}
		return rpcerror.WithCause(connect.CodeUnavailable, fmt.Sprintf("could not create the schedule (%s); nothing was created, try again", what),
			fmt.Errorf("create schedule %s: %s: %w", sch.GetId(), what, err))
	}
	hash, err := s.engine.CreateSchedule(ctx, sch, spec, runInput(sch))
	if err != nil {
		return nil, fail("create the Temporal Schedule", err)
	}
	approvalID = ApprovalWorkflowID(sch.GetId(), hash)
	if err := s.engine.StartApproval(ctx, approvalID, s.approvalInput(sch, hash, spec)); err != nil {
		return nil, fail("ask the owner (start the approval workflow)", err)
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.SpecHash = hash
	next.ApprovalWorkflowId = approvalID
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	done, err := s.store.Update(ctx, next, sch)
	if err != nil {
		return nil, fail("record the approval request", err)
	}
	return done, nil
}

// runInput is what each run of sch calls, as its Temporal Schedule holds it.
func runInput(sch *schedulesv1.Schedule) *schedulesv1.RunInput {
	return &schedulesv1.RunInput{
		ScheduleId: sch.GetId(),
		AgentId:    sch.GetAgentId(),
		Tool:       sch.GetAction().GetTool(),
		Arguments:  sch.GetAction().GetArguments(),
		Depth:      sch.GetDepth() + 1,
		Revision:   sch.GetRevision(),
	}
}

// approvalInput is the approval request of sch, whose Temporal Schedule
// hashes to hash.
func (s *Service) approvalInput(sch *schedulesv1.Schedule, hash string, spec Spec) *schedulesv1.ApprovalInput {
	return &schedulesv1.ApprovalInput{
		ScheduleId:         sch.GetId(),
		AgentId:            sch.GetAgentId(),
		SpecHash:           hash,
		TemporalScheduleId: sch.GetTemporalScheduleId(),
		Description:        sch.GetDescription(),
		Cron:               sch.GetCron(),
		IntervalSeconds:    sch.GetIntervalSeconds(),
		Timezone:           sch.GetTimezone(),
		Action:             sch.GetAction(),
		NextRunTimes:       stamps(spec.Next(s.now(), nextRunCount)),
		Timeout:            durationpb.New(s.approvalTimeout),
		SpecSummary:        spec.Summary(),
		Depth:              sch.GetDepth(),
		Revision:           sch.GetRevision(),
	}
}

// parseSpec parses a spec and checks it against the minimum interval.
func (s *Service) parseSpec(cron string, interval int32, tz string, now time.Time) (Spec, error) {
	spec, err := ParseSpec(cron, interval, tz)
	if se, ok := errors.AsType[*SpecError](err); ok {
		return Spec{}, invalid(boundary.Violation{Field: se.Field, Rule: se.Rule, Message: se.Message})
	}
	if err != nil {
		return Spec{}, connect.NewError(connect.CodeInternal, err)
	}
	if gap := spec.MinGap(now, s.minInterval); gap < s.minInterval {
		field := "cron"
		if interval > 0 {
			field = "interval_seconds"
		}
		return Spec{}, invalid(boundary.Violation{Field: field, Rule: "schedules.min_interval",
			Message: fmt.Sprintf("runs would be %s apart; runs must be at least %s apart", Words(gap), Words(s.minInterval))})
	}
	return spec, nil
}

// checkAction checks that the action's tool may be scheduled and that its
// arguments satisfy the tool's contract, and returns the arguments to store.
func (s *Service) checkAction(ctx context.Context, a *schedulesv1.Action) (*structpb.Struct, error) {
	b, ok := s.tools[a.GetTool()]
	if !ok {
		return nil, invalid(boundary.Violation{Field: "action.tool", Rule: "schedules.tool",
			Message: fmt.Sprintf("unknown tool %q; tools that may be scheduled: %s", a.GetTool(), strings.Join(s.schedulable, ", "))})
	}
	if ok, why := Schedulable(b.Tool()); !ok {
		return nil, invalid(boundary.Violation{Field: "action.tool", Rule: "schedules.tool",
			Message: fmt.Sprintf("%s cannot be scheduled: %s", a.GetTool(), why)})
	}
	args := a.GetArguments()
	if args == nil {
		args = &structpb.Struct{}
	}
	raw, err := protojson.Marshal(args)
	if err != nil {
		return nil, invalid(boundary.Violation{Field: "action.arguments", Rule: "schedules.arguments", Message: err.Error()})
	}
	if len(raw) > maxArgumentsBytes {
		return nil, invalid(boundary.Violation{Field: "action.arguments", Rule: "schedules.arguments",
			Message: fmt.Sprintf("the arguments are %d bytes as JSON; at most %d", len(raw), maxArgumentsBytes)})
	}
	if _, vs := b.Decode(ctx, json.RawMessage(raw)); vs != nil {
		for i := range vs {
			vs[i].Field = strings.TrimSuffix("action.arguments."+vs[i].Field, ".")
			vs[i].Message = a.GetTool() + ": " + vs[i].Message
		}
		return nil, invalid(vs...)
	}
	return args, nil
}

// Preview implements SchedulesService.Preview.
func (s *Service) Preview(ctx context.Context, req *schedulesv1.PreviewRequest) (*schedulesv1.PreviewResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	spec, err := s.parseSpec(req.GetCron(), req.GetIntervalSeconds(), req.GetTimezone(), now)
	if err != nil {
		return nil, err
	}
	after := now
	if req.GetAfter() != nil {
		after = req.GetAfter().AsTime()
	}
	n := int(req.GetCount())
	if n == 0 {
		n = nextRunCount
	}
	return &schedulesv1.PreviewResponse{
		RunTimes: stamps(spec.Next(after, n)),
		Timezone: spec.Location.String(),
		Summary:  spec.Summary(),
	}, nil
}
