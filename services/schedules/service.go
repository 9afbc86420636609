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
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
)

// Defaults of Config.
const (
	// DefaultMinInterval is the shortest time allowed between two runs.
	DefaultMinInterval = 5 * time.Minute
	// DefaultApprovalTimeout is how long the owner has to decide before a
	// schedule expires.
	DefaultApprovalTimeout = 7 * 24 * time.Hour
)

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

// Validate reports a limit out of its range. New takes a zero field as
// its default; a setting bound from a flag is a value, so Validate does not.
func (c Config) Validate() error {
	switch {
	case c.MinInterval < time.Second:
		return fmt.Errorf("schedules: the shortest time between two runs must be at least 1s, got %s", c.MinInterval)
	case c.ApprovalTimeout < time.Second:
		return fmt.Errorf("schedules: the approval timeout must be at least 1s, got %s", c.ApprovalTimeout)
	}
	return nil
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

// save stores next, a change of from, unless the stored schedule changed
// since from was read (Aborted).
func (s *Service) save(ctx context.Context, next, from *schedulesv1.Schedule) (*schedulesv1.Schedule, error) {
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

// invalid is the InvalidArgument error of violations only the service can
// find.
func invalid(vs ...boundary.Violation) error { return boundary.InvalidArgument(vs...) }

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
