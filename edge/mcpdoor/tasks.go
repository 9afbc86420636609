package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// MCP tasks for long-running tools.
//
// A long_running tool whose contract gives it a task block (toolmesh.tool.v1
// Task) starts work a client that declares the Tasks extension
// (io.modelcontextprotocol/tasks, in the request's per-request capabilities
// or, for a session, in its initialize capabilities) follows as a task
// instead of waiting for it: the call goes out with wait_seconds 0
// (port.Call.NoWait) and, while the work is still running, answers
//
//	{"resultType":"task","taskId":"<prefix>/<agent>/<id>","status":"working",...}
//
// whose taskId is the work's task id field (its workflow id). tasks/get
// reads the work through the block's get tool (working, then completed with
// the same tool result the call would have returned, or cancelled), and
// tasks/cancel cancels it through its cancel tool, both through the
// pipeline as the caller. Both are bound to the caller: a task id names its
// agent, and another caller's task is "not found" (-32602), as is an unknown
// one. What a status means, and the words that say so, are the contract's:
// nothing here names a kind of work.

// ExtensionTasks is the MCP Tasks extension's identifier.
const ExtensionTasks = "io.modelcontextprotocol/tasks"

// Task methods and their errors.
const (
	methodTasksGet    = "tasks/get"
	methodTasksCancel = "tasks/cancel"
	// codeMissingCapability is "Missing Required Client Capability".
	codeMissingCapability = -32021
)

// taskKind is a kind of long-running work a tool call can become an MCP
// task of: the tool that starts it, the tools that read and cancel it, and
// how their results say where the work is (the contract's task block).
type taskKind struct {
	*toolcatalog.Task
	// start, get and cancel are the tools.
	start, get, cancel *tool
}

// taskState is where a task's work is.
type taskState struct {
	id      string // the task id
	status  string // working, input_required, completed, failed or cancelled
	message string
	created time.Time
	updated time.Time
}

// MCP task statuses, by the contract's states.
var taskStatuses = map[toolv1.TaskState]string{
	toolv1.TaskState_TASK_STATE_WORKING:        "working",
	toolv1.TaskState_TASK_STATE_INPUT_REQUIRED: "input_required",
	toolv1.TaskState_TASK_STATE_COMPLETED:      "completed",
	toolv1.TaskState_TASK_STATE_FAILED:         "failed",
	toolv1.TaskState_TASK_STATE_CANCELLED:      "cancelled",
}

const (
	taskWorking   = "working"
	taskCompleted = "completed"
)

var itemJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// state reads where the work is from a result of t, one of k's tools: the
// work is in the result data's item field.
func (k *taskKind) state(t *tool, data json.RawMessage) (taskState, error) {
	res := dynamicpb.NewMessage(t.catalog.Method.Output())
	if err := itemJSON.Unmarshal(data, res); err != nil {
		return taskState{}, fmt.Errorf("read the %s: %w", k.ItemField, err)
	}
	item := res.Get(res.Descriptor().Fields().ByName(protoreflect.Name(k.ItemField))).Message()
	st := taskState{id: item.Get(k.TaskID).String(), created: toolcatalog.Time(item, k.Created)}
	st.updated = st.created
	if item.Has(k.Updated) {
		st.updated = toolcatalog.Time(item, k.Updated)
	}
	status := item.Get(k.Status).Enum()
	s, ok := k.States[status]
	if !ok {
		return taskState{}, fmt.Errorf("%s in unknown status %d", k.ItemField, status)
	}
	st.status = taskStatuses[s.State]
	var b bytes.Buffer
	if err := s.Message.Execute(&b, toolcatalog.ItemFields(item)); err != nil {
		return taskState{}, fmt.Errorf("say where the %s is: %w", k.ItemField, err)
	}
	st.message = b.String()
	if st.id == "" {
		return taskState{}, fmt.Errorf("the %s names no task", k.ItemField)
	}
	return st, nil
}

// tasks is the edge's task support: the kinds whose tools all have
// backends. Nil when there are none; the extension is then not declared.
type tasks struct {
	byStart  map[string]*taskKind
	byPrefix map[string]*taskKind
}

func buildTasks(d *Door) (*tasks, error) {
	t := &tasks{byStart: map[string]*taskKind{}, byPrefix: map[string]*taskKind{}}
	for _, start := range d.sorted {
		task := start.catalog.Task
		if task == nil {
			continue
		}
		k := &taskKind{Task: task, start: start, get: d.tools[task.Get.Name], cancel: d.tools[task.Cancel.Name]}
		if !k.start.Binding().HasBackend() || !k.get.Binding().HasBackend() || !k.cancel.Binding().HasBackend() {
			continue
		}
		t.byStart[start.catalog.Name] = k
		t.byPrefix[task.IDPrefix] = k
	}
	if len(t.byStart) == 0 {
		return nil, nil
	}
	return t, nil
}

// starts reports whether the tool named name starts a kind of task.
func (t *tasks) starts(name string) bool { return t != nil && t.byStart[name] != nil }

// kindOf splits a task id into its kind, agent and local id.
func (t *tasks) kindOf(taskID string) (k *taskKind, agent, id string, ok bool) {
	prefix, rest, found := strings.Cut(taskID, "/")
	if !found {
		return nil, "", "", false
	}
	k = t.byPrefix[prefix]
	i := strings.LastIndexByte(rest, '/')
	if k == nil || i <= 0 || i == len(rest)-1 {
		return nil, "", "", false
	}
	return k, rest[:i], rest[i+1:], true
}

// taskPollInterval is the pollIntervalMs tasks suggest: long-running work
// often waits for a person.
const taskPollInterval = 2 * time.Second

// taskResult is a CreateTaskResult (resultType "task", from tools/call) or
// a GetTaskResult (resultType "complete", from tasks/get).
type taskResult struct {
	mcp.ResultBase
	ResultType     string `json:"resultType"`
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"` // null: kept for good
	PollIntervalMs int64  `json:"pollIntervalMs,omitempty"`
	Result         any    `json:"result,omitempty"`
}

// ackResult answers tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

func newTaskResult(resultType string, st taskState) *taskResult {
	return &taskResult{
		ResultType:     resultType,
		TaskID:         st.id,
		Status:         st.status,
		StatusMessage:  st.message,
		CreatedAt:      st.created.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt:  st.updated.UTC().Format(time.RFC3339Nano),
		PollIntervalMs: taskPollInterval.Milliseconds(),
	}
}

// taskSlot carries, from a tools/call's handler to the task middleware,
// the task the call became.
type taskSlot struct{ task *taskResult }

type taskSlotKey struct{}

func taskSlotFrom(ctx context.Context) *taskSlot {
	s, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	return s
}

// addTaskMethods registers tasks/get and tasks/cancel with the SDK (so it
// parses them); taskMiddleware answers them, with the caller in hand.
func (d *Door) addTaskMethods() error {
	if d.tasks == nil {
		return nil
	}
	unreachable := func(context.Context, *mcp.ServerSession, *taskParams) (*taskResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "task method outside the edge's middleware"}
	}
	for _, m := range []string{methodTasksGet, methodTasksCancel} {
		if err := mcp.AddReceivingCustomMethod(d.server, m, unreachable); err != nil {
			return fmt.Errorf("register %s: %w", m, err)
		}
	}
	d.server.AddReceivingMiddleware(d.taskMiddleware)
	return nil
}

// declaresTasks reports whether the request's client declared the Tasks
// extension.
func declaresTasks(req mcp.Request) bool {
	r, ok := req.(interface {
		ClientCapabilities() *mcp.ClientCapabilities
	})
	if !ok {
		return false
	}
	caps := r.ClientCapabilities()
	if caps == nil {
		return false
	}
	_, ok = caps.Extensions[ExtensionTasks]
	return ok
}

// taskMiddleware turns the tools/call of a Tasks client into a task when
// the work is still running, and serves tasks/get and tasks/cancel.
func (d *Door) taskMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			if !declaresTasks(req) {
				return next(ctx, method, req)
			}
			slot := &taskSlot{}
			res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
			if err == nil && slot.task != nil {
				return slot.task, nil
			}
			return res, err
		case methodTasksGet, methodTasksCancel:
			return d.serveTask(ctx, method, req)
		}
		return next(ctx, method, req)
	}
}

// started is the tools/call side: for a Tasks client, the started work
// becomes a task while it is still running.
func (t *tasks) started(ctx context.Context, log *slog.Logger, tool *toolcatalog.Tool, env *toolcall.Envelope, slot *taskSlot) {
	if t == nil {
		return
	}
	k := t.byStart[tool.Name]
	if k == nil || env.IsError() {
		return
	}
	st, err := k.state(k.start, env.Data)
	if err != nil {
		log.WarnContext(ctx, "mcp.task_unreadable", "tool", tool.Name, "error", err)
		return
	}
	if st.status == taskWorking {
		slot.task = newTaskResult("task", st)
		log.InfoContext(ctx, "mcp.task_created", "tool", tool.Name, "task_id", st.id)
	}
}

func taskNotFound() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
}

// serveTask answers tasks/get and tasks/cancel for the caller's own tasks.
func (d *Door) serveTask(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
	p := d.principal(req)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	if !declaresTasks(req) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{ExtensionTasks: map[string]any{}}}})
		return nil, &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability", Data: data}
	}
	params, _ := req.GetParams().(*taskParams)
	if params == nil || params.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "taskId is required"}
	}
	k, agent, id, ok := d.tasks.kindOf(params.TaskID)
	if !ok || agent != p.Agent {
		return nil, taskNotFound()
	}
	t := k.get
	if method == methodTasksCancel {
		t = k.cancel
	}
	if ok, _ := p.MayCall(t.catalog); !ok {
		return nil, taskNotFound()
	}
	args, _ := json.Marshal(map[string]string{k.IDField: id})
	env := d.pipeline.Call(ctx, &port.Call{Tool: t.Tool, Caller: p, Arguments: args}).Envelope
	if env.IsError() {
		if env.DomainCode == toolcall.CodeNotFound || env.DomainCode == toolcall.CodeInvalidArgument {
			return nil, taskNotFound()
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: env.Message}
	}
	d.log.DebugContext(ctx, "mcp.task", "method", method, "task_id", params.TaskID, "subject", p.Subject, "agent", p.Agent)
	if method == methodTasksCancel {
		return &ackResult{ResultType: "complete"}, nil
	}
	st, err := k.state(t, env.Data)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "read the task's state"}
	}
	out := newTaskResult("complete", st)
	if st.status == taskCompleted {
		// What the original call would have returned had it waited.
		out.Result = result(env)
	}
	return out, nil
}
