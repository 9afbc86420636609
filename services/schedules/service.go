// Package schedules is the schedules domain: an agent asks for a tool to be
// called on a recurring schedule; the owner approves or denies it.
//
// A schedule is a row in the service's store and a Temporal Schedule that is
// created paused. Creating one also starts an approval workflow
// (workers/schedules) with the id "schedule-approval/<schedule>/<spec hash>"
// that notifies the owner and waits for the approve or deny update, which
// comes from Approve/Deny here or from the Temporal UI or CLI. Either way the
// workflow carries the decision out through ApplyDecision, the one place
// that checks the spec hash and unpauses or deletes the Temporal Schedule.
// Each run of an approved schedule is a workflow that calls the tool through
// the mesh as the schedule's agent and reports through RecordExecution.
package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Defaults of Config.
const (
	// DefaultMinInterval is the shortest time allowed between two runs.
	DefaultMinInterval = 5 * time.Minute
	// DefaultApprovalTimeout is how long the owner has to decide before a
	// schedule expires.
	DefaultApprovalTimeout = 7 * 24 * time.Hour
)

// maxArgumentsBytes bounds a schedule's arguments as JSON.
const maxArgumentsBytes = 16 << 10

// nextRunCount is how many next run times a schedule shows.
const nextRunCount = 3

// Config tunes the service.
type Config struct {
	// MinInterval is the shortest time allowed between two runs of a
	// schedule (DefaultMinInterval when zero).
	MinInterval time.Duration
	// ApprovalTimeout is how long the owner has to decide
	// (DefaultApprovalTimeout when zero).
	ApprovalTimeout time.Duration
	// Contracts are the services whose tools may be scheduled
	// (toolcatalog.Contracts() when nil).
	Contracts []protoreflect.ServiceDescriptor
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events; discarded when nil.
	Log *slog.Logger
}

// Service implements toolmesh.schedules.v1.SchedulesService.
type Service struct {
	store           Store
	engine          Engine
	tools           map[string]*toolcall.Binding
	schedulable     []string
	minInterval     time.Duration
	approvalTimeout time.Duration
	now             clock.Clock
	log             *slog.Logger
}

var _ schedulesv1connect.SchedulesServiceHandler = (*Service)(nil)

// New returns the service over store and engine.
func New(store Store, engine Engine, cfg Config) (*Service, error) {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// Bound to no backend: the service only decodes and validates a
	// run's arguments; the worker makes the call.
	tools, err := toolcall.BindAll(toolcall.BindConfig{Contracts: cfg.Contracts, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s := &Service{
		store: store, engine: engine, tools: tools,
		minInterval: cfg.MinInterval, approvalTimeout: cfg.ApprovalTimeout, now: cfg.Now, log: cfg.Log,
	}
	for name, b := range tools {
		if ok, _ := Schedulable(b.Tool()); ok {
			s.schedulable = append(s.schedulable, name)
		}
	}
	sort.Strings(s.schedulable)
	return s, nil
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(schedulesv1connect.SchedulesServiceName, schedulesv1connect.SchedulesServiceHandler(s), schedulesv1connect.NewSchedulesServiceHandler, schedulesv1.RegisterSchedulesServiceHandler)
}

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

// Workflow contracts shared with workers/schedules.
var (
	approvalWorkflow = workflowcontract.WorkflowOf(&schedulesv1.ApprovalInput{})
	runWorkflow      = workflowcontract.WorkflowOf(&schedulesv1.RunInput{})
)

// TemporalID is the Temporal Schedule id of a schedule.
func TemporalID(scheduleID string) string { return "schedule/" + scheduleID }

// ApprovalWorkflowID is the id of the approval workflow that asks the owner
// about a schedule with a given spec hash.
func ApprovalWorkflowID(scheduleID, specHash string) string {
	return approvalWorkflow.IDPrefix + "/" + scheduleID + "/" + specHash
}

// RunWorkflowID is the id prefix of a schedule's runs; Temporal appends
// "-<time due>" to it for each run.
func RunWorkflowID(scheduleID string) string { return runWorkflow.IDPrefix + "/" + scheduleID }

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
	run := &schedulesv1.RunInput{
		ScheduleId: sch.GetId(),
		AgentId:    sch.GetAgentId(),
		Tool:       sch.GetAction().GetTool(),
		Arguments:  sch.GetAction().GetArguments(),
		Depth:      sch.GetDepth() + 1,
	}
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
	hash, err := s.engine.CreateSchedule(ctx, sch, spec, run)
	if err != nil {
		return nil, fail("create the Temporal Schedule", err)
	}
	approvalID = ApprovalWorkflowID(sch.GetId(), hash)
	in := &schedulesv1.ApprovalInput{
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
	}
	if err := s.engine.StartApproval(ctx, approvalID, in); err != nil {
		return nil, fail("ask the owner (start the approval workflow)", err)
	}
	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.SpecHash = hash
	next.ApprovalWorkflowId = approvalID
	next.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	done, err := s.store.Update(ctx, next, schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL)
	if err != nil {
		return nil, fail("record the approval request", err)
	}
	return done, nil
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

// Get implements SchedulesService.Get.
func (s *Service) Get(ctx context.Context, req *schedulesv1.GetRequest) (*schedulesv1.GetResponse, error) {
	sch, _, err := s.visible(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	return &schedulesv1.GetResponse{Schedule: s.withNextRuns(sch)}, nil
}

// List implements SchedulesService.List.
func (s *Service) List(ctx context.Context, req *schedulesv1.ListRequest) (*schedulesv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetAllAgents() {
		if _, err := mesh.RequireRole(ctx, mesh.RoleOwner); err != nil {
			return nil, connect.NewError(connect.CodePermissionDenied, errors.New("only the owner may list every agent's schedules (all_agents)"))
		}
		agent = ""
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, agent, req.GetStatus(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list schedules: %w", err))
	}
	for i := range list {
		list[i] = s.withNextRuns(list[i])
	}
	return &schedulesv1.ListResponse{Schedules: list, Page: paging.New(offset, limit, total)}, nil
}

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
				"schedule %s changed since the owner was asked (spec hash %s, now %s): it was not approved; deny it, and have it created again to ask anew",
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
	done, err := s.update(ctx, next, pending)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.decided", "schedule", done.GetId(), "status", protoenum.Word(to), "decided_by", req.GetDecidedBy())
	return &schedulesv1.ApplyDecisionResponse{Schedule: s.withNextRuns(done)}, nil
}

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
	done, err := s.update(ctx, next, schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE)
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
	done, err := s.update(ctx, next, schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED)
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
	done, err := s.update(ctx, next, from)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "schedules.deleted", "schedule", done.GetId(), "by", caller.Agent)
	return &schedulesv1.DeleteResponse{Schedule: done}, nil
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

// visible returns the schedule when the caller may see it: its agent or the
// owner. Anyone else gets NotFound, as for a schedule that does not exist.
func (s *Service) visible(ctx context.Context, id string) (*schedulesv1.Schedule, mesh.Caller, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, mesh.Caller{}, err
	}
	caller := mesh.FromContext(ctx).Caller
	sch, err := s.load(ctx, id)
	if err != nil {
		return nil, caller, err
	}
	if sch.GetAgentId() != caller.Agent && !caller.HasRole(mesh.RoleOwner) {
		return nil, caller, connect.NewError(connect.CodeNotFound, fmt.Errorf("schedule %s not found", id))
	}
	return sch, caller, nil
}

func (s *Service) load(ctx context.Context, id string) (*schedulesv1.Schedule, error) {
	sch, err := s.store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("schedule %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get schedule: %w", err))
	}
	return sch, nil
}

func (s *Service) update(ctx context.Context, next *schedulesv1.Schedule, from schedulesv1.ScheduleStatus) (*schedulesv1.Schedule, error) {
	done, err := s.store.Update(ctx, next, from)
	if errors.Is(err, ErrStale) {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("schedule %s changed while it was being updated; read it and try again", next.GetId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("update schedule: %w", err))
	}
	return done, nil
}

// withNextRuns adds the next run times of a schedule that runs, or will once
// approved.
func (s *Service) withNextRuns(sch *schedulesv1.Schedule) *schedulesv1.Schedule {
	switch sch.GetStatus() {
	case schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE, schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL:
	default:
		return sch
	}
	spec, err := ParseSpec(sch.GetCron(), sch.GetIntervalSeconds(), sch.GetTimezone())
	if err != nil {
		return sch
	}
	out := proto.Clone(sch).(*schedulesv1.Schedule)
	out.NextRunTimes = stamps(spec.Next(s.now(), nextRunCount))
	return out
}

// invalid is an InvalidArgument error carrying violations the way the
// validation interceptor does, so the edge lists them field by field.
func invalid(vs ...boundary.Violation) error {
	cerr := connect.NewError(connect.CodeInvalidArgument, errors.New(boundary.Summary(vs)))
	pv := make([]*validate.Violation, 0, len(vs))
	for _, v := range vs {
		var elems []*validate.FieldPathElement
		if v.Field != "" {
			for _, name := range strings.Split(v.Field, ".") {
				elems = append(elems, validate.FieldPathElement_builder{FieldName: proto.String(name)}.Build())
			}
		}
		pv = append(pv, validate.Violation_builder{
			Field:   validate.FieldPath_builder{Elements: elems}.Build(),
			RuleId:  proto.String(v.Rule),
			Message: proto.String(v.Message),
		}.Build())
	}
	if d, err := connect.NewErrorDetail(validate.Violations_builder{Violations: pv}.Build()); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

func stamps(ts []time.Time) []*timestamppb.Timestamp {
	out := make([]*timestamppb.Timestamp, len(ts))
	for i, t := range ts {
		out[i] = timestamppb.New(t)
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
