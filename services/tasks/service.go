// Package tasks is the work-task domain: agents create tasks, move them
// through pending → running → completed | failed, or cancel them.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/server"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultMaxPerDay is the per-agent daily task cap when none is configured
// (WORK_TASK_MAX_PER_DAY).
const DefaultMaxPerDay = 100

// Config tunes the service.
type Config struct {
	// MaxPerDay caps how many tasks one agent may create per UTC day.
	MaxPerDay int
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Validate reports a limit out of its range. New takes a zero field as
// its default; a setting bound from a flag is a value, so Validate does not.
func (c Config) Validate() error {
	if c.MaxPerDay < 1 {
		return fmt.Errorf("tasks: the work tasks one agent may create per day must be at least 1, got %d", c.MaxPerDay)
	}
	return nil
}

// Service implements toolmesh.tasks.v1.TasksService.
type Service struct {
	store     Store
	maxPerDay int
	now       clock.Clock
}

var _ tasksv1connect.TasksServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.MaxPerDay <= 0 {
		cfg.MaxPerDay = DefaultMaxPerDay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: store, maxPerDay: cfg.MaxPerDay, now: cfg.Now}
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(s), tasksv1connect.NewTasksServiceHandler, tasksv1.RegisterTasksServiceHandler)
}

// Create implements TasksService.Create.
func (s *Service) Create(ctx context.Context, req *tasksv1.CreateRequest) (*tasksv1.CreateResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	// Stored times have millisecond precision; answer with what is stored.
	now := s.now().UTC().Truncate(time.Millisecond)
	priority := req.GetPriority()
	if priority == tasksv1.TaskPriority_TASK_PRIORITY_UNSPECIFIED {
		priority = tasksv1.TaskPriority_TASK_PRIORITY_NORMAL
	}
	t := &tasksv1.Task{
		Id:          ids.NewAt("tsk", now),
		AgentId:     agent,
		Description: req.GetDescription(),
		Status:      tasksv1.TaskStatus_TASK_STATUS_PENDING,
		Priority:    priority,
		ProjectId:   req.GetProjectId(),
		CreateTime:  timestamppb.New(now),
		UpdateTime:  timestamppb.New(now),
	}
	call := idempotency.CallOf(ctx, req)
	stored, created, err := s.store.Create(ctx, t, call, s.maxPerDay)
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(call.Key)
	}
	if errors.Is(err, ErrDailyCap) {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			//lint:ignore ST1005 the contract fixes this user-facing sentence, capital and full stop included
			fmt.Errorf("Rate limit exceeded: maximum %d work tasks per day.", s.maxPerDay))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create task: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, call.Key)
	}
	return &tasksv1.CreateResponse{Task: stored}, nil
}

// Get implements TasksService.Get.
func (s *Service) Get(ctx context.Context, req *tasksv1.GetRequest) (*tasksv1.GetResponse, error) {
	t, err := s.get(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return &tasksv1.GetResponse{Task: t}, nil
}

func (s *Service) get(ctx context.Context, id string) (*tasksv1.Task, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.store.Get(ctx, agent, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get task: %w", err))
	}
	return t, nil
}

// List implements TasksService.List.
func (s *Service) List(ctx context.Context, req *tasksv1.ListRequest) (*tasksv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, agent, Filter{Status: req.GetStatus(), ProjectID: req.GetProjectId()}, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list tasks: %w", err))
	}
	return &tasksv1.ListResponse{Tasks: list, Page: paging.New(offset, limit, total)}, nil
}

// CanMove reports whether a task may move from one status to another:
// pending -> running | cancelled, running -> completed | failed | cancelled.
func CanMove(from, to tasksv1.TaskStatus) bool {
	switch from {
	case tasksv1.TaskStatus_TASK_STATUS_PENDING:
		return to == tasksv1.TaskStatus_TASK_STATUS_RUNNING || to == tasksv1.TaskStatus_TASK_STATUS_CANCELLED
	case tasksv1.TaskStatus_TASK_STATUS_RUNNING:
		return to == tasksv1.TaskStatus_TASK_STATUS_COMPLETED || to == tasksv1.TaskStatus_TASK_STATUS_FAILED ||
			to == tasksv1.TaskStatus_TASK_STATUS_CANCELLED
	}
	return false
}

// UpdateStatus implements TasksService.UpdateStatus.
func (s *Service) UpdateStatus(ctx context.Context, req *tasksv1.UpdateStatusRequest) (*tasksv1.UpdateStatusResponse, error) {
	t, err := s.move(ctx, req.GetTaskId(), req.GetStatus(), func(t *tasksv1.Task) { t.Result = req.GetResult() })
	if err != nil {
		return nil, err
	}
	return &tasksv1.UpdateStatusResponse{Task: t}, nil
}

// Cancel implements TasksService.Cancel.
func (s *Service) Cancel(ctx context.Context, req *tasksv1.CancelRequest) (*tasksv1.CancelResponse, error) {
	t, err := s.move(ctx, req.GetTaskId(), tasksv1.TaskStatus_TASK_STATUS_CANCELLED, func(t *tasksv1.Task) { t.CancelReason = req.GetReason() })
	if err != nil {
		return nil, err
	}
	return &tasksv1.CancelResponse{Task: t}, nil
}

// move applies one status change, refusing illegal ones. A concurrent change
// between the read and the write is reported against the status it made.
func (s *Service) move(ctx context.Context, id string, to tasksv1.TaskStatus, edit func(*tasksv1.Task)) (*tasksv1.Task, error) {
	t, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	from := t.GetStatus()
	if !CanMove(from, to) {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("task %s cannot move from %s to %s", id, protoenum.Word(from), protoenum.Word(to)))
	}
	t.Status = to
	t.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	edit(t)
	updated, err := s.store.Update(ctx, t, from)
	if errors.Is(err, ErrStale) {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("task %s changed while it was being updated; read it and try again", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("update task: %w", err))
	}
	return updated, nil
}
