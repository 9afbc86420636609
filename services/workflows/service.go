// Package workflows is agents' own workflows: an agent defines a graph of
// nodes (start, end, action, condition, parallel, join, approval, delay)
// and runs it.
//
// A definition is checked when it is written (validate.go): its shape, no
// cycles and no unreachable nodes, parallels and their joins, and each
// node's tool, arguments and CEL expressions (internal/flowexpr). Every
// update makes a new version; a run records the version it runs.
//
// A run is one Temporal workflow (the workflows.run contract in
// toolmesh.workflows.v1; the worker is workers/workflows) with the
// deterministic id "workflow-run/<agent>/<run id>", the run id derived
// from the call's idempotency key. The service captures, when the run
// starts, what the starting agent may call (its mesh token's grants) and
// hands it to the workflow, which calls each action's tool through the
// calls worker as that agent at its depth + 1. The workflow records the
// run's state here (RecordRun) when it suspends for an approval and when it
// ends; GetRun asks it (its state query) for a run in flight.
package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/flowexpr"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
)

// Defaults of Config: the limits of workflows and runs, documented in
// docs/agent-workflows.md.
const (
	// DefaultMaxNodes is the most nodes a definition may have.
	DefaultMaxNodes = 50
	// MaxNodesLimit is the largest MaxNodes a mesh may be configured with.
	MaxNodesLimit = 200
	// DefaultMaxParallel is the most branches one parallel node may run.
	DefaultMaxParallel = 10
	// DefaultRunTimeout is how long a run may take when its request names
	// no timeout.
	DefaultRunTimeout = time.Hour
	// DefaultMaxRunDuration is the longest a run may take, extensions
	// included.
	DefaultMaxRunDuration = 7 * 24 * time.Hour
	// DefaultWait is how long Run waits for the run to end when the request
	// names no wait.
	DefaultWait = 25 * time.Second
)

// MaxDepth is the invocation depth from which Run is refused, as sending
// a message is: a run's tool calls run one level deeper than its start.
const MaxDepth = 3

// minRunTimeout is the shortest timeout a run may ask for.
const minRunTimeout = 10 * time.Second

// maxInputBytes bounds a run's input as JSON.
const maxInputBytes = 16 << 10

// Config configures the service.
type Config struct {
	// MaxNodes, MaxParallel, RunTimeout and MaxRunDuration are the limits
	// (the defaults above when zero).
	MaxNodes       int
	MaxParallel    int
	RunTimeout     time.Duration
	MaxRunDuration time.Duration
	// DefaultWait is Run's wait when the request names none (DefaultWait).
	DefaultWait time.Duration
	// CallTimeout bounds each tool call of a run's action nodes
	// (toolcall.DefaultTimeout when zero); a run carries the value it
	// started with.
	CallTimeout time.Duration
	// Contracts are the services whose tools action nodes may call
	// (toolcatalog.Contracts() when nil).
	Contracts []protoreflect.ServiceDescriptor
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events; discarded when nil.
	Log *slog.Logger
}

// Validate reports the first limit out of its range. New applies the
// defaults to zero fields first; a setting bound from a flag is never zero
// unless the person asked for it, so Validate takes zero as a value.
func (c Config) Validate() error {
	switch {
	case c.MaxNodes < 2 || c.MaxNodes > MaxNodesLimit:
		return fmt.Errorf("workflows: the most nodes of a definition must be 2 to %d, got %d", MaxNodesLimit, c.MaxNodes)
	case c.MaxParallel < 2:
		return fmt.Errorf("workflows: the most branches of a parallel node must be at least 2, got %d", c.MaxParallel)
	case c.RunTimeout < 10*time.Second:
		return fmt.Errorf("workflows: the run timeout must be at least 10s, got %s", c.RunTimeout)
	case c.RunTimeout > c.MaxRunDuration:
		return fmt.Errorf("workflows: the run timeout %s is longer than the longest run %s", c.RunTimeout, c.MaxRunDuration)
	}
	return nil
}

// Service implements toolmesh.workflows.v1.WorkflowsService.
type Service struct {
	store  Store
	engine Engine
	tools  map[string]*toolcall.Binding
	expr   *flowexpr.Env
	cfg    Config
	log    *slog.Logger
}

var _ workflowsv1connect.WorkflowsServiceHandler = (*Service)(nil)

// New returns the service over store and engine (nil: runs answer
// unavailable).
func New(store Store, engine Engine, cfg Config) (*Service, error) {
	if cfg.MaxNodes <= 0 {
		cfg.MaxNodes = DefaultMaxNodes
	}
	if cfg.MaxParallel <= 0 {
		cfg.MaxParallel = DefaultMaxParallel
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = DefaultRunTimeout
	}
	if cfg.MaxRunDuration <= 0 {
		cfg.MaxRunDuration = DefaultMaxRunDuration
	}
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = DefaultWait
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = toolcall.DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Bound to no backend: the service only decodes and validates
	// arguments; the calls worker makes the calls.
	tools, err := toolcall.BindAll(toolcall.BindConfig{Contracts: cfg.Contracts, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	env, err := flowexpr.New()
	if err != nil {
		return nil, err
	}
	return &Service{store: store, engine: engine, tools: tools, expr: env, cfg: cfg, log: cfg.Log}, nil
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	return server.Register(workflowsv1connect.WorkflowsServiceName, workflowsv1connect.WorkflowsServiceHandler(s),
		workflowsv1connect.NewWorkflowsServiceHandler, workflowsv1.RegisterWorkflowsServiceHandler)
}

// nowMillis is the clock at the millisecond precision the store keeps.
func (s *Service) nowMillis() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// Create implements WorkflowsService.Create.
func (s *Service) Create(ctx context.Context, req *workflowsv1.CreateRequest) (*workflowsv1.CreateResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.check(req.GetDefinition()); err != nil {
		return nil, err
	}
	now := s.nowMillis()
	w := &workflowsv1.Workflow{
		WorkflowId:    ids.NewAt("wf", now),
		AgentId:       agent,
		Name:          req.GetName(),
		Description:   req.GetDescription(),
		Version:       1,
		LatestVersion: 1,
		Definition:    req.GetDefinition(),
		CreateTime:    timestamppb.New(now),
		UpdateTime:    timestamppb.New(now),
	}
	key := idempotency.CallOf(ctx, req)
	stored, created, err := s.store.CreateWorkflow(ctx, w, key)
	switch {
	case errors.Is(err, idempotency.ErrKeyReused):
		return nil, idempotency.KeyConflict(key.Key)
	case errors.Is(err, ErrNameTaken):
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("you have a workflow named %q already; pick another name, or change it with workflows_update", req.GetName()))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create workflow: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, key.Key)
	} else {
		s.log.InfoContext(ctx, "workflows.created", "workflow_id", w.GetWorkflowId(), "agent", agent, "name", w.GetName(), "nodes", len(w.GetDefinition().GetNodes()))
	}
	return &workflowsv1.CreateResponse{Workflow: stored}, nil
}

// visibleWorkflow returns a workflow (at version, 0 for the latest) the
// caller may see: its own, or any for the owner. Anyone else's is not
// found, as if it did not exist.
func (s *Service) visibleWorkflow(ctx context.Context, id string, version int32) (*workflowsv1.Workflow, error) {
	caller := mesh.FromContext(ctx).Caller
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	w, err := s.store.GetWorkflow(ctx, id, version)
	if errors.Is(err, ErrNotFound) || (err == nil && w.GetAgentId() != caller.Agent && !caller.HasRole(mesh.RoleOwner)) {
		if version != 0 {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("workflow %s has no version %d", id, version))
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("workflow %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get workflow: %w", err))
	}
	return w, nil
}

// ownWorkflow is visibleWorkflow for a change or a run: the caller's own
// workflow only.
func (s *Service) ownWorkflow(ctx context.Context, id string, version int32) (*workflowsv1.Workflow, error) {
	w, err := s.visibleWorkflow(ctx, id, version)
	if err == nil && w.GetAgentId() != mesh.FromContext(ctx).Caller.Agent {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("workflow %s is agent %s's; only it may change or run it", id, w.GetAgentId()))
	}
	return w, err
}

// Get implements WorkflowsService.Get.
func (s *Service) Get(ctx context.Context, req *workflowsv1.GetRequest) (*workflowsv1.GetResponse, error) {
	w, err := s.visibleWorkflow(ctx, req.GetWorkflowId(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &workflowsv1.GetResponse{Workflow: w}, nil
}

// Update implements WorkflowsService.Update.
func (s *Service) Update(ctx context.Context, req *workflowsv1.UpdateRequest) (*workflowsv1.UpdateResponse, error) {
	if _, err := s.ownWorkflow(ctx, req.GetWorkflowId(), 0); err != nil {
		return nil, err
	}
	if err := s.check(req.GetDefinition()); err != nil {
		return nil, err
	}
	w, err := s.store.UpdateWorkflow(ctx, req.GetWorkflowId(), req.GetExpectedVersion(), req.Description, req.GetDefinition(), s.nowMillis())
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("workflow %s not found", req.GetWorkflowId()))
	case errors.Is(err, ErrVersionConflict):
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("workflow %s is no longer at version %d; get it, and update the latest version",
			req.GetWorkflowId(), req.GetExpectedVersion()))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("update workflow: %w", err))
	}
	s.log.InfoContext(ctx, "workflows.updated", "workflow_id", w.GetWorkflowId(), "agent", w.GetAgentId(), "version", w.GetVersion())
	return &workflowsv1.UpdateResponse{Workflow: w}, nil
}

// List implements WorkflowsService.List.
func (s *Service) List(ctx context.Context, req *workflowsv1.ListRequest) (*workflowsv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListWorkflows(ctx, agent, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list workflows: %w", err))
	}
	return &workflowsv1.ListResponse{Workflows: list, Page: paging.New(offset, limit, total)}, nil
}

// Delete implements WorkflowsService.Delete.
func (s *Service) Delete(ctx context.Context, req *workflowsv1.DeleteRequest) (*workflowsv1.DeleteResponse, error) {
	if _, err := s.ownWorkflow(ctx, req.GetWorkflowId(), 0); err != nil {
		return nil, err
	}
	w, err := s.store.DeleteWorkflow(ctx, req.GetWorkflowId(), s.nowMillis())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("workflow %s not found", req.GetWorkflowId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("delete workflow: %w", err))
	}
	s.log.InfoContext(ctx, "workflows.deleted", "workflow_id", w.GetWorkflowId(), "agent", w.GetAgentId())
	return &workflowsv1.DeleteResponse{Workflow: w}, nil
}
