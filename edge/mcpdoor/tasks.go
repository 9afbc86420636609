package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// MCP tasks (docs/mcp-tasks.md).
//
// Two kinds of work are tasks, both named in the contracts, none in this
// package:
//
//   - the work a long_running tool with a task block (toolmesh.tool.v1 Task)
//     starts: a client that follows tasks makes the call with wait_seconds 0
//     (port.Call.NoWait) and, while the work runs, gets the task, whose id
//     is the work's workflow id "<prefix>/<agent>/<id>"; tasks/get reads the
//     work through the block's get tool and tasks/cancel cancels it through
//     its cancel tool, both through the pipeline as the caller;
//   - a call the calls worker carries (port.Tasks): a tool whose task_support
//     says so, or a call that waits, once its input is complete, for the
//     user's answers (port.Call.Tasks). Its id is its workflow's id,
//     "call/<tool>/<hex>", and port.Tasks follows it.
//
// Both are bound to the caller: another caller's task is "not found"
// (-32602), as is an unknown one. The protocol side — the 2026-07-28
// extension and the 2025-11-25 core methods — is in taskmethods.go, the wire
// shapes in taskwire.go.

// ExtensionTasks is the MCP Tasks extension's identifier.
const ExtensionTasks = "io.modelcontextprotocol/tasks"

// taskPollInterval is the pollIntervalMs tasks suggest.
const taskPollInterval = 2 * time.Second

// taskKind is a kind of work a task block describes: the tool that starts
// it, the tools that read and cancel it, and how their results say where
// the work is.
type taskKind struct {
	*toolcatalog.Task
	// start, get and cancel are the tools.
	start, get, cancel *tool
}

// MCP task statuses, by the contract's states.
var taskStatuses = map[toolv1.TaskState]string{
	toolv1.TaskState_TASK_STATE_WORKING:        port.TaskWorking,
	toolv1.TaskState_TASK_STATE_INPUT_REQUIRED: port.TaskInputRequired,
	toolv1.TaskState_TASK_STATE_COMPLETED:      port.TaskCompleted,
	toolv1.TaskState_TASK_STATE_FAILED:         port.TaskFailed,
	toolv1.TaskState_TASK_STATE_CANCELLED:      port.TaskCancelled,
}

var itemJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// state reads where the work is from a result of t, one of k's tools: the
// work is in the result data's item field. A completed task's result is
// env, as the start tool would have answered it had it waited.
func (k *taskKind) state(t *tool, env *toolcall.Envelope) (*port.Task, error) {
	res := dynamicpb.NewMessage(t.catalog.Method.Output())
	if err := itemJSON.Unmarshal(env.Data, res); err != nil {
		return nil, fmt.Errorf("read the %s: %w", k.ItemField, err)
	}
	item := res.Get(res.Descriptor().Fields().ByName(protoreflect.Name(k.ItemField))).Message()
	st := &port.Task{ID: item.Get(k.TaskID).String(), Created: toolcatalog.Time(item, k.Created).UTC()}
	st.Updated = st.Created
	if item.Has(k.Updated) {
		st.Updated = toolcatalog.Time(item, k.Updated).UTC()
	}
	status := item.Get(k.Status).Enum()
	s, ok := k.States[status]
	if !ok {
		return nil, fmt.Errorf("%s in unknown status %d", k.ItemField, status)
	}
	st.Status = taskStatuses[s.State]
	var b bytes.Buffer
	if err := s.Message.Execute(&b, toolcatalog.ItemFields(item)); err != nil {
		return nil, fmt.Errorf("say where the %s is: %w", k.ItemField, err)
	}
	st.Message = b.String()
	if st.ID == "" {
		return nil, fmt.Errorf("the %s names no task", k.ItemField)
	}
	switch st.Status {
	case port.TaskCompleted:
		// What the call would have returned had it waited: a result with
		// the work in the same field.
		st.Envelope = env
	case port.TaskFailed:
		st.Error = &port.TaskError{Code: codeInternalError, Message: st.Message}
	}
	return st, nil
}

// codeInternalError is JSON-RPC's internal error.
const codeInternalError = -32603

// tasks is the door's task support: the kinds whose tools all have
// backends, and the calls worker's tasks. Nil when there are none; the
// extension is then not declared.
type tasks struct {
	byStart  map[string]*taskKind
	byPrefix map[string]*taskKind
	// calls follows the calls the calls worker carries; nil without it.
	calls port.Tasks
	// prefixes are every kind's id prefix, "call" included with calls.
	prefixes []string
}

func buildTasks(sorted []*tool, tools map[string]*tool, calls port.Tasks) (*tasks, error) {
	t := &tasks{byStart: map[string]*taskKind{}, byPrefix: map[string]*taskKind{}, calls: calls}
	for _, start := range sorted {
		task := start.catalog.Task
		if task == nil {
			continue
		}
		k := &taskKind{Task: task, start: start, get: tools[task.Get.Name], cancel: tools[task.Cancel.Name]}
		if !k.start.Binding().HasBackend() || !k.get.Binding().HasBackend() || !k.cancel.Binding().HasBackend() {
			continue
		}
		if t.calls != nil && t.calls.Owns(task.IDPrefix+"/") {
			return nil, fmt.Errorf("tool %q: task id_prefix %q is the calls worker's", start.catalog.Name, task.IDPrefix)
		}
		t.byStart[start.catalog.Name] = k
		t.byPrefix[task.IDPrefix] = k
		t.prefixes = append(t.prefixes, task.IDPrefix)
	}
	if t.calls != nil {
		t.prefixes = append(t.prefixes, "call")
	}
	if len(t.byStart) == 0 && t.calls == nil {
		return nil, nil
	}
	return t, nil
}

// starts reports whether the tool named name starts work a task block
// describes.
func (t *tasks) starts(name string) bool { return t != nil && t.byStart[name] != nil }

// support is what tools/list says of a tool's tasks: "optional" or
// "required", or "" when its calls never become tasks (an elicited call of
// any tool still may, while it waits for answers).
func (t *tasks) support(c *toolcatalog.Tool) string {
	if t == nil {
		return ""
	}
	carried := t.calls != nil && c.Task == nil
	if !t.starts(c.Name) && !carried {
		return ""
	}
	switch {
	case c.TaskSupport == toolv1.TaskSupport_TASK_SUPPORT_REQUIRED:
		return "required"
	case c.TaskSupport == toolv1.TaskSupport_TASK_SUPPORT_OPTIONAL, t.starts(c.Name):
		// Unspecified is optional for the start tool of a task block.
		return "optional"
	}
	return ""
}

// kindOf splits a task id of a task block into its kind, agent and local
// id.
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

// started is the task a call of a task block's start tool became, for a
// client that follows tasks: while the work runs, the call answers with it.
func (tf *taskFeature) started(ctx context.Context, c *toolcatalog.Tool, env *toolcall.Envelope) *port.Task {
	k := tf.tasks.byStart[c.Name]
	if k == nil || env.IsError() {
		return nil
	}
	st, err := k.state(k.start, env)
	if err != nil {
		tf.log.WarnContext(ctx, "mcp.task_unreadable", "tool", c.Name, "error", err)
		return nil
	}
	if st.Status != port.TaskWorking {
		return nil
	}
	tf.log.InfoContext(ctx, "mcp.task_created", "tool", c.Name, "task_id", st.ID)
	return st
}

// errTaskUnreadable is an error of the edge's, not the caller's: the work a
// tool shows could not be read as a task.
var errTaskUnreadable = errors.New("read the task's state")

// task reads where task id of p is: from the calls worker for a call it
// carries, through the kind's get tool (or, with cancel, its cancel tool)
// for work a task block describes.
func (tf *taskFeature) task(ctx context.Context, p *identity.Principal, id string, cancel bool) (*port.Task, error) {
	t := tf.tasks
	if t.calls != nil && t.calls.Owns(id) {
		if cancel {
			if err := t.calls.Cancel(ctx, p, id); err != nil {
				return nil, err
			}
		}
		return t.calls.Get(ctx, p, id)
	}
	k, agent, local, ok := t.kindOf(id)
	if !ok || agent != p.Agent {
		return nil, port.ErrTaskNotFound
	}
	tl := k.get
	if cancel {
		tl = k.cancel
	}
	if ok, _ := p.MayCall(tl.catalog); !ok {
		return nil, port.ErrTaskNotFound
	}
	args, _ := json.Marshal(map[string]string{k.IDField: local})
	env := tf.pipeline.Call(ctx, &port.Call{Tool: tl.Tool, Caller: p, Arguments: args}).Envelope
	if env.IsError() {
		if env.DomainCode == toolcall.CodeNotFound || env.DomainCode == toolcall.CodeInvalidArgument {
			return nil, port.ErrTaskNotFound
		}
		if cancel && env.DomainCode == toolcall.CodeConflict {
			// Over already: cancelling it is a no-op; show it.
			return tf.task(ctx, p, id, false)
		}
		return nil, fmt.Errorf("%s: %s: %s", tl.catalog.Name, env.DomainCode, env.Message)
	}
	st, err := k.state(tl, env)
	if err != nil {
		tf.log.WarnContext(ctx, "mcp.task_unreadable", "tool", tl.catalog.Name, "task_id", id, "error", err)
		return nil, errTaskUnreadable
	}
	if st.Status == port.TaskCompleted && cancel {
		// Over before it was cancelled: its result is the get tool's.
		return tf.task(ctx, p, id, false)
	}
	return st, nil
}
