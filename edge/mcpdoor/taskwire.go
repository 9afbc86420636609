package mcpdoor

import (
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/port"
)

// The wire shapes of MCP tasks: the 2026-07-28 extension's (flat, with
// resultType, ttlMs and pollIntervalMs) and the 2025-11-25 core's (a nested
// task in CreateTaskResult; ttl and pollInterval).

// extTask is a task on the extension's wire: the CreateTaskResult of a
// tools/call (resultType "task"), the DetailedTask of tasks/get (resultType
// "complete") and the params of notifications/tasks (no resultType).
type extTask struct {
	mcp.ResultBase
	ResultType     string              `json:"resultType,omitempty"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage,omitempty"`
	CreatedAt      string              `json:"createdAt"`
	LastUpdatedAt  string              `json:"lastUpdatedAt"`
	TTLMs          *int64              `json:"ttlMs"` // null: as long as its record lives
	PollIntervalMs int64               `json:"pollIntervalMs,omitempty"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result         *mcp.CallToolResult `json:"result,omitempty"`
	Error          *port.TaskError     `json:"error,omitempty"`
}

// createdTask is the CreateTaskResult of t: where it is, without what it
// waits for or what it answered.
func createdTask(t *port.Task) *extTask {
	return &extTask{
		ResultType:     "task",
		TaskID:         t.ID,
		Status:         t.Status,
		StatusMessage:  t.Message,
		CreatedAt:      wireTime(t.Created),
		LastUpdatedAt:  wireTime(t.Updated),
		TTLMs:          ttlMs(t.TTL),
		PollIntervalMs: taskPollInterval.Milliseconds(),
	}
}

// detailedTask is t as tasks/get shows it (resultType "complete"), and as
// notifications/tasks pushes it (resultType ""): by status, the questions it
// waits for, the result it answered, or its failure.
func detailedTask(t *port.Task, resultType string) *extTask {
	out := createdTask(t)
	out.ResultType = resultType
	switch t.Status {
	case port.TaskInputRequired:
		out.InputRequests = mcp.InputRequestMap{}
		for _, q := range t.Questions {
			_, out.InputRequests[q.Key] = inputRequest(stateless(q))
		}
	case port.TaskCompleted:
		if t.Envelope != nil {
			out.Result = result(t.Envelope)
		}
	case port.TaskFailed:
		out.Error = t.Error
		if out.Error == nil {
			out.Error = &port.TaskError{Code: codeInternalError, Message: t.Message}
		}
	}
	return out
}

// ackResult answers tasks/update and tasks/cancel at 2026-07-28.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// MetaIgnoredInputResponses names, in a tasks/update acknowledgement, the
// input responses that answered no question the task waits for.
const MetaIgnoredInputResponses = "dev.toolmesh/ignoredInputResponses"

// coreTask is a task on the 2025-11-25 wire.
type coreTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

func toCoreTask(t *port.Task) coreTask {
	return coreTask{
		TaskID:        t.ID,
		Status:        t.Status,
		StatusMessage: t.Message,
		CreatedAt:     wireTime(t.Created),
		LastUpdatedAt: wireTime(t.Updated),
		TTL:           ttlMs(t.TTL),
		PollInterval:  taskPollInterval.Milliseconds(),
	}
}

// coreCreated is the 2025-11-25 CreateTaskResult: the task, nested.
type coreCreated struct {
	mcp.ResultBase
	Task coreTask `json:"task"`
}

// coreTaskResult answers tasks/get and tasks/cancel at 2025-11-25.
type coreTaskResult struct {
	mcp.ResultBase
	coreTask
}

// coreTaskList answers tasks/list.
type coreTaskList struct {
	mcp.ResultBase
	Tasks      []coreTask `json:"tasks"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

// metaRelatedTask ties a message to the task it is about (2025-11-25).
const metaRelatedTask = "io.modelcontextprotocol/related-task"

func wireTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func ttlMs(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
