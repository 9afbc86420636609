package port

import (
	"context"
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// MCP task statuses.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// Terminal reports whether a task in status is over.
func Terminal(status string) bool {
	return status == TaskCompleted || status == TaskFailed || status == TaskCancelled
}

// Task is where an MCP task is: what tasks/get shows of it.
type Task struct {
	// ID is the task's id: its workflow's id.
	ID string
	// Status is one of the Task* statuses.
	Status string
	// Message says where it is, for people.
	Message string
	// Created and Updated are when it began and last changed.
	Created, Updated time.Time
	// TTL is how long from its creation the task is kept at least; nil for
	// as long as its record lives.
	TTL *time.Duration
	// Questions are what an input_required task waits for, by key.
	Questions []Question
	// Envelope is a completed task's result: what the call would have
	// answered had it waited.
	Envelope *toolcall.Envelope
	// Error is a failed task's failure.
	Error *TaskError
}

// TaskError is the failure of a failed task, a JSON-RPC error.
type TaskError struct {
	Code    int64          `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// Tasks carries tool calls that are MCP tasks in workflows of the calls
// worker (edge/elicit): a door creates them through the pipeline (Call.Tasks)
// and follows them here. Every method is bound to its caller: a task of
// another caller is ErrTaskNotFound, as is an unknown one.
type Tasks interface {
	// Owns reports whether id is of a task this carrier makes.
	Owns(id string) bool
	// Get shows the task.
	Get(ctx context.Context, caller *identity.Principal, id string) (*Task, error)
	// Answer delivers answers (MCP input responses, by key; a response the
	// door could not read is the zero Answer) to the task's questions, and
	// returns the keys it ignored: those of no question the task waits for.
	// key, when not empty, makes a repeated delivery get the first one's
	// outcome.
	Answer(ctx context.Context, caller *identity.Principal, id string, answers map[string]Answer, key string) (ignored []string, err error)
	// Cancel cancels the task; a task that is over is left as it is.
	Cancel(ctx context.Context, caller *identity.Principal, id string) error
	// List lists the ids of the caller's long work whose kind is one of
	// kinds (task id prefixes), newest first, n at most, from cursor ("" for
	// the first page); next is "" after the last page.
	List(ctx context.Context, caller *identity.Principal, kinds []string, cursor string, n int) (ids []string, next string, err error)
}

// TaskExtender is a Tasks carrier whose running tasks have a deadline that
// their own caller may move later (the calls worker's: calls_extend_task).
type TaskExtender interface {
	// Extend moves the deadline of the caller's running task id by, for
	// reason; key, when not empty, makes a repeated request get the first
	// one's outcome. ErrTaskNotFound for a task that is not the caller's;
	// a TaskRefusal when the task cannot be extended so.
	Extend(ctx context.Context, caller *identity.Principal, id string, by time.Duration, reason, key string) (TaskDeadline, error)
}

// TaskDeadline is a running task's deadline, and the latest it may be
// extended to.
type TaskDeadline struct{ Deadline, Max time.Time }

// ErrTaskNotFound is the error of a task that is unknown or another caller's.
var ErrTaskNotFound = errors.New("task not found")

// TaskRefusal is a request about a task that cannot apply (an answer that
// does not fit its form, a task that is over); it changed nothing.
type TaskRefusal struct{ Reason string }

func (r *TaskRefusal) Error() string { return r.Reason }
