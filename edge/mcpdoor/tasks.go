package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Long-running tools that wait, and MCP tasks.
//
// A long_running tool whose request has an `optional int32 wait_seconds`
// field waits for its outcome in the service, for at most that many
// seconds, then answers with a handle to poll. The edge fills the field
// with its wait budget (Config.WaitBudget, whole seconds; a smaller value
// the caller gave is kept) and gives such a call the budget on top of
// CallTimeout, so the service's wait, not the edge's deadline, decides
// when a pending handle comes back. While it waits, a client that asked for
// progress hears that the call is still running.
//
// A client that declares the Tasks extension (io.modelcontextprotocol/tasks,
// in the request's per-request capabilities or, for a session, in its
// initialize capabilities) gets a task instead of the wait: the call goes
// out with wait_seconds 0 and, while the work is still running, answers
//
//	{"resultType":"task","taskId":"ask/<agent>/<ask id>","status":"working",...}
//
// whose taskId is the workflow id. tasks/get reads the work through the
// kind's get tool (working, then completed with the same tool result the
// call would have returned, or cancelled), and tasks/cancel cancels it
// through the kind's cancel tool. Both are bound to the caller: a task id
// names its agent, and another caller's task is "not found" (-32602), as is
// an unknown one.

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
// how their results say where the work is.
type taskKind struct {
	// prefix starts its task ids: "<prefix>/<agent>/<id>".
	prefix string
	// start, get and cancel are tool names; get and cancel take the id in
	// idField.
	start, get, cancel string
	idField            string
	// state reads a start, get or cancel result's data.
	state func(data json.RawMessage) (taskState, error)
}

// taskState is where a task's work is.
type taskState struct {
	id      string // the task id
	status  string // working, completed or cancelled
	message string
	created time.Time
	updated time.Time
}

// Task statuses the edge reports.
const (
	taskWorking   = "working"
	taskCompleted = "completed"
	taskCancelled = "cancelled"
)

// taskKinds lists the work that can become tasks: owner asks and remote
// agent invocations.
func taskKinds() []*taskKind {
	return []*taskKind{{
		prefix: "ask", start: "owner_ask", get: "owner_get_ask", cancel: "owner_cancel_ask", idField: "ask_id",
		state: askState,
	}, {
		prefix: "invoke", start: "remoteagents_invoke", get: "remoteagents_get_invocation", cancel: "remoteagents_cancel_invocation",
		idField: "invocation_id", state: invocationState,
	}}
}

// invocationState reads the invocation in a remoteagents_invoke,
// remoteagents_get_invocation or remoteagents_cancel_invocation result
// ({"invocation": {...}}).
func invocationState(data json.RawMessage) (taskState, error) {
	var res remoteagentsv1.GetInvocationResponse
	if err := askJSON.Unmarshal(data, &res); err != nil {
		return taskState{}, fmt.Errorf("read the invocation: %w", err)
	}
	inv := res.GetInvocation()
	st := taskState{id: inv.GetWorkflowId(), created: inv.GetCreateTime().AsTime(), updated: inv.GetCreateTime().AsTime()}
	if inv.GetResolveTime() != nil {
		st.updated = inv.GetResolveTime().AsTime()
	}
	switch inv.GetStatus() {
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING:
		st.status = taskWorking
		st.message = "The remote agent is working on it"
		if s := inv.GetRemoteState(); s != "" {
			st.message += " (" + s + ")"
		}
		st.message += "."
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED:
		st.status, st.message = taskCompleted, "The remote agent answered."
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED:
		st.status, st.message = taskCompleted, "The invocation failed: "+inv.GetError()
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_REJECTED:
		st.status, st.message = taskCompleted, "The remote agent refused it."
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_INPUT_REQUIRED:
		st.status, st.message = taskCompleted, "The remote agent needs more input: invoke it again with the task_id."
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED:
		st.status, st.message = taskCancelled, "The invocation was cancelled."
	default:
		return taskState{}, fmt.Errorf("invocation in unknown status %v", inv.GetStatus())
	}
	if st.id == "" {
		return taskState{}, fmt.Errorf("the invocation names no workflow")
	}
	return st, nil
}

var askJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// askState reads the ask in an owner_ask, owner_get_ask or
// owner_cancel_ask result ({"ask": {...}}).
func askState(data json.RawMessage) (taskState, error) {
	var res ownerv1.GetAskResponse
	if err := askJSON.Unmarshal(data, &res); err != nil {
		return taskState{}, fmt.Errorf("read the ask: %w", err)
	}
	a := res.GetAsk()
	st := taskState{id: a.GetWorkflowId(), created: a.GetCreateTime().AsTime(), updated: a.GetCreateTime().AsTime()}
	if a.GetResolveTime() != nil {
		st.updated = a.GetResolveTime().AsTime()
	}
	switch a.GetStatus() {
	case ownerv1.AskStatus_ASK_STATUS_PENDING:
		st.status = taskWorking
		st.message = "Waiting for the owner's answer (the ask expires at " + a.GetExpireTime().AsTime().UTC().Format(time.RFC3339) + ")."
	case ownerv1.AskStatus_ASK_STATUS_ANSWERED:
		st.status, st.message = taskCompleted, "The owner answered."
	case ownerv1.AskStatus_ASK_STATUS_EXPIRED:
		st.status, st.message = taskCompleted, "The ask expired without an answer."
	case ownerv1.AskStatus_ASK_STATUS_CANCELLED:
		st.status, st.message = taskCancelled, "The ask was cancelled."
	default:
		return taskState{}, fmt.Errorf("ask in unknown status %v", a.GetStatus())
	}
	if st.id == "" {
		return taskState{}, fmt.Errorf("the ask names no workflow")
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
	for _, k := range taskKinds() {
		ok := true
		for _, name := range []string{k.start, k.get, k.cancel} {
			tool, found := d.tools[name]
			ok = ok && found && tool.Binding().HasBackend()
		}
		if ok && d.tools[k.start].catalog.Wait != nil {
			t.byStart[k.start] = k
			t.byPrefix[k.prefix] = k
		}
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

// taskPollInterval is the pollIntervalMs tasks suggest: asks wait for a
// person.
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
	st, err := k.state(env.Data)
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
	name := k.get
	if method == methodTasksCancel {
		name = k.cancel
	}
	t := d.tools[name]
	if ok, _ := p.MayCall(t.catalog); !ok {
		return nil, taskNotFound()
	}
	args, _ := json.Marshal(map[string]string{k.idField: id})
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
	st, err := k.state(env.Data)
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
