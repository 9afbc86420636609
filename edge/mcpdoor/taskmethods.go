package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The task methods, by wire:
//
//   - 2026-07-28, the extension (for a request whose client capabilities
//     declare it; -32021 otherwise): tasks/get, tasks/update, tasks/cancel;
//     a tools/call that becomes a task answers with resultType "task".
//     tasks/result and tasks/list are not methods there (-32601), and a
//     tools/call's params.task is ignored.
//   - 2025-11-25, the core (a session): a tools/call with params.task (which
//     serveMCP carries in _meta, metaCoreTask, as the SDK drops it) answers
//     with the nested CreateTaskResult; tasks/get, tasks/result (blocks
//     until the task is over; asks an input_required task's questions over
//     the session), tasks/list, tasks/cancel. A session that declared the
//     extension in initialize keeps its flat shapes.

// Task methods and their errors.
const (
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
	methodTasksResult = "tasks/result"
	methodTasksList   = "tasks/list"
	// codeMissingCapability is "Missing Required Client Capability".
	codeMissingCapability = -32021
	// codeHeaderMismatch is "Header Mismatch": a routing header differs
	// from the body.
	codeHeaderMismatch = -32020
)

// taskNamed reports whether method names one task, which Mcp-Name carries.
func taskNamed(method string) bool {
	return method == methodTasksGet || method == methodTasksUpdate || method == methodTasksCancel
}

// taskIDOf is the params.taskId of a task method's body ("" if none).
func taskIDOf(body []byte) string {
	var req struct {
		Params struct {
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	return req.Params.TaskID
}

// metaCoreTask carries, in a session's tools/call _meta, the params.task of
// a 2025-11-25 task-augmented request (serveMCP moves it there).
const metaCoreTask = "dev.toolmesh/task"

// coreTaskVersion is the session-era version with core tasks.
const coreTaskVersion = "2025-11-25"

// taskPageSize is how many tasks a tasks/list page has.
const taskPageSize = 20

// taskParams are the params of the task methods.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
	Cursor         string                     `json:"cursor,omitempty"`
}

// taskSlot carries, from a tools/call's handler to the task middleware,
// the task the call became.
type taskSlot struct{ task *port.Task }

type taskSlotKey struct{}

func taskSlotFrom(ctx context.Context) *taskSlot {
	s, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	return s
}

// taskFeature serves MCP tasks: the task methods, tools/call answered
// with the task a call became, and task listens.
type taskFeature struct {
	// tasks are the kinds of tasks served and their carriers.
	tasks    *tasks
	tools    map[string]*tool
	pipeline port.Pipeline
	resolve  *resolver
	log      *slog.Logger
	// answers counts the requests whose answer is not written yet; a
	// listen answers no call.
	answers port.Counter
	// closing is closed when the edge stops: task listens end.
	closing <-chan struct{}
}

// addTaskMethods registers the task methods with the SDK (so it parses
// them); taskMiddleware answers them, with the caller in hand.
func (tf *taskFeature) addTaskMethods(server *mcp.Server) error {
	unreachable := func(context.Context, *mcp.ServerSession, *taskParams) (*ackResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "task method outside the edge's middleware"}
	}
	for _, m := range []string{methodTasksGet, methodTasksUpdate, methodTasksCancel, methodTasksResult, methodTasksList} {
		if err := mcp.AddReceivingCustomMethod(server, m, unreachable); err != nil {
			return fmt.Errorf("register %s: %w", m, err)
		}
	}
	server.AddReceivingMiddleware(tf.taskMiddleware)
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

// versionOf is the protocol version of a request.
func versionOf(req mcp.Request) string {
	if r, ok := req.(interface{ ProtocolVersion() string }); ok {
		return r.ProtocolVersion()
	}
	return ""
}

// modernRequest reports whether req is of the stateless era.
func modernRequest(req mcp.Request) bool { return versionOf(req) >= ModernProtocol }

// coreTaskAsked reports whether req is a 2025-11-25 task-augmented
// tools/call.
func coreTaskAsked(req mcp.Request) bool {
	if modernRequest(req) || versionOf(req) < coreTaskVersion {
		return false
	}
	p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
	if !ok || p == nil {
		return false
	}
	_, ok = p.Meta[metaCoreTask]
	return ok
}

// coreTasks reports whether req is of a session that has the core task
// methods (2025-11-25) and did not declare the extension.
func coreTasks(req mcp.Request) bool {
	return !modernRequest(req) && versionOf(req) >= coreTaskVersion && !declaresTasks(req)
}

// missingCapability is the -32021 error naming the extension.
func missingCapability() error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{ExtensionTasks: map[string]any{}}}})
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability", Data: data}
}

// taskMiddleware makes tools/call answer with the task a call became,
// refuses a call of a tool that runs only as a task from a client that
// does not follow tasks, adds the core task capability to a 2025-11-25
// initialize, and serves the task methods.
func (tf *taskFeature) taskMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			return tf.callTool(ctx, next, method, req)
		case "initialize":
			res, err := next(ctx, method, req)
			if init, ok := res.(*mcp.InitializeResult); ok && err == nil && init.ProtocolVersion >= coreTaskVersion {
				return tf.withCoreTasks(init), nil
			}
			return res, err
		case methodTasksGet, methodTasksUpdate, methodTasksCancel, methodTasksResult, methodTasksList:
			if r, ok := req.(*mcp.ServerRequest[*taskParams]); ok && r.Params == nil {
				// A request without params (tasks/list may have none): the
				// SDK's readers of a request's _meta need them.
				r.Params = &taskParams{}
			}
			return tf.serveTask(ctx, method, req)
		}
		return next(ctx, method, req)
	}
}

// callTool runs a tools/call; for a client that follows tasks, the call
// answers with the task it became, in the shape of the client's wire.
func (tf *taskFeature) callTool(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	core := coreTaskAsked(req)
	follows := core || declaresTasks(req)
	if !follows {
		if t := tf.tools[toolNameOf(req)]; t != nil && t.catalog.TaskSupport == toolv1.TaskSupport_TASK_SUPPORT_REQUIRED && tf.tasks.support(t.catalog) != "" {
			if modernRequest(req) {
				return nil, missingCapability()
			}
			if versionOf(req) >= coreTaskVersion {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
					Message: fmt.Sprintf("tool %s runs only as a task: call it with params.task", t.catalog.Name)}
			}
		}
		return next(ctx, method, req)
	}
	slot := &taskSlot{}
	res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
	if err != nil || slot.task == nil {
		return res, err
	}
	if core {
		return &coreCreated{Task: toCoreTask(slot.task)}, nil
	}
	return createdTask(slot.task), nil
}

// toolNameOf is the tool a tools/call names.
func toolNameOf(req mcp.Request) string {
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil {
		return p.Name
	}
	return ""
}

// initializeWithTasks is a 2025-11-25 initialize result that declares the
// core task capability.
type initializeWithTasks struct {
	*mcp.InitializeResult
	Capabilities *capabilitiesWithTasks `json:"capabilities"`
}

type capabilitiesWithTasks struct {
	*mcp.ServerCapabilities
	Tasks map[string]any `json:"tasks"`
}

// withCoreTasks declares, in init, the core tasks the edge serves: list
// (from Temporal's visibility store, with the calls worker), cancel, and
// task-augmented tools/call.
func (tf *taskFeature) withCoreTasks(init *mcp.InitializeResult) mcp.Result {
	caps := map[string]any{"cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	if tf.tasks.calls != nil {
		caps["list"] = map[string]any{}
	}
	return &initializeWithTasks{InitializeResult: init, Capabilities: &capabilitiesWithTasks{ServerCapabilities: init.Capabilities, Tasks: caps}}
}

// serveTask answers the task methods for the caller's own tasks.
func (tf *taskFeature) serveTask(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
	p := tf.resolve.principal(req)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	modern, core := modernRequest(req), coreTasks(req)
	switch {
	case modern && (method == methodTasksResult || method == methodTasksList):
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served at %s (the tasks extension has none)", method, ModernProtocol)}
	case !core && !declaresTasks(req):
		if modern {
			return nil, missingCapability()
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q needs protocol version %s or the tasks extension", method, coreTaskVersion)}
	case core && method == methodTasksUpdate:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is the tasks extension's; at %s, tasks/result asks a task's questions", method, coreTaskVersion)}
	case !core && (method == methodTasksResult || method == methodTasksList):
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served to a client of the tasks extension", method)}
	}
	params, _ := req.GetParams().(*taskParams)
	if params == nil {
		params = &taskParams{}
	}
	if method == methodTasksList {
		return tf.listTasks(ctx, p, params.Cursor)
	}
	if params.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "taskId is required"}
	}
	tf.log.DebugContext(ctx, "mcp.task", "method", method, "task_id", params.TaskID, "subject", p.Subject, "agent", p.Agent)
	switch method {
	case methodTasksUpdate:
		return tf.updateTask(ctx, p, params)
	case methodTasksResult:
		return tf.taskResult(ctx, req, p, params.TaskID)
	}
	t, err := tf.task(ctx, p, params.TaskID, method == methodTasksCancel)
	if err != nil {
		return nil, tf.taskError(ctx, params.TaskID, err)
	}
	switch {
	case core:
		return &coreTaskResult{coreTask: toCoreTask(t)}, nil
	case method == methodTasksCancel:
		return &ackResult{ResultType: "complete"}, nil
	}
	return detailedTask(t, "complete"), nil
}

// taskError is the JSON-RPC error of a task method that failed: an unknown
// task, or another caller's, is -32602; a refused request says why; any
// other failure is the edge's, logged under an error id.
func (tf *taskFeature) taskError(ctx context.Context, id string, err error) error {
	var refusal *port.TaskRefusal
	switch {
	case errors.Is(err, port.ErrTaskNotFound):
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	case errors.As(err, &refusal):
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: refusal.Reason}
	}
	eid := rpcerror.NewID()
	tf.log.WarnContext(ctx, "mcp.task_unavailable", "task_id", id, "error_id", eid, "error", err)
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: rpcerror.WithID("the task's state could not be read in time; retry", eid)}
}

// updateTask delivers a tasks/update's input responses. An answer to a key
// the task does not wait for is ignored (the acknowledgement names it); the
// work of a task block never waits for answers.
func (tf *taskFeature) updateTask(ctx context.Context, p *identity.Principal, params *taskParams) (mcp.Result, error) {
	var ignored []string
	if tf.tasks.calls != nil && tf.tasks.calls.Owns(params.TaskID) {
		key, _ := params.Meta[port.MetaIdempotencyKey].(string)
		var err error
		answers := make(map[string]port.Answer, len(params.InputResponses))
		for k, raw := range params.InputResponses {
			// A response the door cannot read is no answer: refused if its
			// key is a question's.
			answers[k], _ = answerOfJSON(raw)
		}
		if ignored, err = tf.tasks.calls.Answer(ctx, p, params.TaskID, answers, key); err != nil {
			return nil, tf.taskError(ctx, params.TaskID, err)
		}
	} else {
		if _, err := tf.task(ctx, p, params.TaskID, false); err != nil {
			return nil, tf.taskError(ctx, params.TaskID, err)
		}
		for k := range params.InputResponses {
			ignored = append(ignored, k)
		}
	}
	ack := &ackResult{ResultType: "complete"}
	if len(ignored) > 0 {
		ack.Meta = mcp.Meta{MetaIgnoredInputResponses: ignored}
	}
	return ack, nil
}

// taskResult answers tasks/result (2025-11-25): it waits until the task is
// over and answers the call's result, with the task named in _meta; while
// the task waits for answers, its questions are asked over the session.
func (tf *taskFeature) taskResult(ctx context.Context, req mcp.Request, p *identity.Principal, id string) (mcp.Result, error) {
	related := mcp.Meta{metaRelatedTask: map[string]any{"taskId": id}}
	for {
		t, err := tf.task(ctx, p, id, false)
		if err != nil {
			return nil, tf.taskError(ctx, id, err)
		}
		switch t.Status {
		case port.TaskCompleted:
			res := result(t.Envelope)
			res.Meta = related
			return res, nil
		case port.TaskFailed:
			e := detailedTask(t, "").Error
			var data json.RawMessage
			if e.Data != nil {
				data, _ = json.Marshal(e.Data)
			}
			return nil, &jsonrpc.Error{Code: e.Code, Message: e.Message, Data: data}
		case port.TaskCancelled:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s was cancelled: it has no result", id)}
		case port.TaskInputRequired:
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && tf.tasks.calls != nil {
				if err := tf.askOverSession(ctx, ss, p, t, related); err != nil {
					return nil, err
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// askOverSession asks the questions of t, an input_required task, over the
// session (elicitation/create) and delivers the answers.
func (tf *taskFeature) askOverSession(ctx context.Context, ss *mcp.ServerSession, p *identity.Principal, t *port.Task, related mcp.Meta) error {
	answers := map[string]port.Answer{}
	for _, q := range t.Questions {
		a, err := askSession(ctx, ss, q, related)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// No answer the client could send: asked again next time.
			tf.log.InfoContext(ctx, "mcp.task_question_unanswered", "task_id", t.ID, "key", q.Key, "error", err)
			continue
		}
		answers[q.Key] = a
	}
	if len(answers) == 0 {
		return nil
	}
	if _, err := tf.tasks.calls.Answer(ctx, p, t.ID, answers, ""); err != nil {
		var refusal *port.TaskRefusal
		if errors.As(err, &refusal) {
			// An answer that does not fit: asked again.
			tf.log.InfoContext(ctx, "mcp.task_answer_refused", "task_id", t.ID, "reason", refusal.Reason)
			return nil
		}
		return tf.taskError(ctx, t.ID, err)
	}
	return nil
}

// listTasks answers tasks/list (2025-11-25): the caller's own tasks of
// every kind, newest first, from Temporal's visibility store.
func (tf *taskFeature) listTasks(ctx context.Context, p *identity.Principal, cursor string) (mcp.Result, error) {
	if tf.tasks.calls == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tasks/list needs the calls worker's Temporal, which this edge does not have"}
	}
	ids, next, err := tf.tasks.calls.List(ctx, p, tf.tasks.prefixes, cursor, taskPageSize)
	if err != nil {
		return nil, tf.taskError(ctx, "", err)
	}
	out := &coreTaskList{Tasks: []coreTask{}, NextCursor: next}
	for _, id := range ids {
		t, err := tf.task(ctx, p, id, false)
		if err != nil {
			// Gone since it was listed, or unreadable now: left out.
			continue
		}
		out.Tasks = append(out.Tasks, toCoreTask(t))
	}
	return out, nil
}
