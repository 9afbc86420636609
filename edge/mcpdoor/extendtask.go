package mcpdoor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolschema"
)

// calls_extend_task: an agent gives its own running MCP task — a call the
// calls worker carries — more time. It is the edge's, not a domain's: an
// MCP task is the edge's way of answering a call, so the tool is listed
// beside the catalog's tools whenever the edge carries such tasks, in
// every selection. The work is the task workflow's extend update
// (port.TaskExtender), which checks the caller, the reason and the task's
// longest life, and records the extension in the audit trail.
const metaExtendTask = "calls_extend_task"

// Bounds of an extension, and of its reason.
const (
	minExtendSeconds = 60
	maxExtendSeconds = int(toolcall.MaxTaskLifetime / time.Second)
	maxReasonLen     = 500
)

// extendKeyRE is what an idempotency key looks like (as the pipeline's).
var extendKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// extenderOf is the task carrier that extends tasks, if any.
func extenderOf(tasks port.Tasks) port.TaskExtender {
	x, _ := tasks.(port.TaskExtender)
	return x
}

// extendTaskTool is calls_extend_task as tools/list shows it.
func extendTaskTool() *mcp.Tool {
	notDestructive, closed := false, false
	return &mcp.Tool{
		Name:  metaExtendTask,
		Title: "Extend a running task",
		Description: "Give one of your running MCP tasks more time: its deadline moves extend_seconds later, up to " +
			fmt.Sprintf("%d hours after its work started. ", maxExtendSeconds/3600) +
			"Use it when a task (an id call/...) is still working and will not finish by its deadline; give the reason, which is recorded in the audit trail. " +
			"Only the agent that started the task may extend it. An owner ask is extended with owner_extend_ask, a remote invocation with remoteagents_extend_invocation, a workflow run with workflows_extend_run.",
		InputSchema: mustJSON(toolschema.Schema{"type": "object", "additionalProperties": false, "required": []string{"task_id", "extend_seconds", "reason"},
			"properties": toolschema.Schema{
				"task_id":        toolschema.Schema{"type": "string", "minLength": 1, "pattern": `^call/`, "description": "The task's id, as the call that became the task answered it (call/...)."},
				"extend_seconds": toolschema.Schema{"type": "integer", "minimum": minExtendSeconds, "maximum": maxExtendSeconds, "description": "How much later the task's deadline is, in seconds."},
				"reason":         toolschema.Schema{"type": "string", "minLength": 1, "maxLength": maxReasonLen, "pattern": `\S`, "description": "Why the task needs more time (recorded in the audit trail)."},
			}}),
		OutputSchema: envelopeSchema(toolschema.Schema{"task_id": toolschema.Schema{"type": "string"},
			"deadline": toolschema.Schema{"type": "string", "format": "date-time"}, "max_deadline": toolschema.Schema{"type": "string", "format": "date-time"}}),
		Annotations: &mcp.ToolAnnotations{Title: "Extend a running task", DestructiveHint: &notDestructive, OpenWorldHint: &closed},
	}
}

func (m *metaFeature) extendTask(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		TaskID        string `json:"task_id"`
		ExtendSeconds *int   `json:"extend_seconds"`
		Reason        string `json:"reason"`
	}
	const name = metaExtendTask
	p := m.resolve.principal(req)
	x := m.extend
	var fail *toolcall.Envelope
	switch {
	case p == nil:
		fail = toolcall.Fail(name, toolcall.CodeUnauthenticated, "the caller is not authenticated")
	case x == nil:
		fail = toolcall.Fail(name, toolcall.CodeNotSupported, "this edge carries no MCP tasks")
	case m.pipeline.ReadOnly():
		fail = toolcall.Fail(name, toolcall.CodeReadOnly, "Cannot extend a task in read-only mode.")
	default:
		fail = decodeArgs(name, req.Params.Arguments, &args)
	}
	key, _ := req.Params.GetMeta()[port.MetaIdempotencyKey].(string)
	if fail == nil {
		reason := strings.TrimSpace(args.Reason)
		switch {
		case args.TaskID == "":
			fail = toolcall.Fail(name, toolcall.CodeInvalidArgument, "task_id: the task's id (call/...)")
		case !m.tasks.Owns(args.TaskID):
			fail = toolcall.Fail(name, toolcall.CodeInvalidArgument, "task_id: "+name+" extends the MCP tasks of calls (ids call/...); "+
				"an owner ask is extended with owner_extend_ask, a remote invocation with remoteagents_extend_invocation, a workflow run with workflows_extend_run")
		case args.ExtendSeconds == nil || *args.ExtendSeconds < minExtendSeconds || *args.ExtendSeconds > maxExtendSeconds:
			fail = toolcall.Fail(name, toolcall.CodeInvalidArgument, fmt.Sprintf("extend_seconds: how much later the deadline is, from %d to %d", minExtendSeconds, maxExtendSeconds))
		case reason == "" || len(args.Reason) > maxReasonLen:
			fail = toolcall.Fail(name, toolcall.CodeInvalidArgument, fmt.Sprintf("reason: why the task needs more time, 1 to %d characters", maxReasonLen))
		case key != "" && !extendKeyRE.MatchString(key):
			fail = toolcall.Fail(name, toolcall.CodeInvalidArgument, "_meta."+port.MetaIdempotencyKey+": 1 to 128 letters, digits, '.', '_', ':' or '-'")
		}
		args.Reason = reason
	}
	if fail != nil {
		return result(fail), nil
	}
	dl, err := x.Extend(ctx, p, args.TaskID, time.Duration(*args.ExtendSeconds)*time.Second, args.Reason, key)
	if err != nil {
		if errors.Is(err, port.ErrTaskNotFound) {
			return result(toolcall.Fail(name, toolcall.CodeNotFound, fmt.Sprintf("no task %s of yours", args.TaskID))), nil
		}
		if r, ok := errors.AsType[*port.TaskRefusal](err); ok {
			return result(toolcall.Fail(name, toolcall.CodeConflict, fmt.Sprintf("task %s cannot be extended: %s", args.TaskID, r.Reason))), nil
		}
		m.log.WarnContext(ctx, "mcp.task_extend_failed", "task_id", args.TaskID, "subject", p.Subject, "agent", p.Agent, "error", err)
		return result(toolcall.Fail(name, toolcall.CodeUnavailable,
			"the task's workflow could not be reached; try again (with the same _meta \""+port.MetaIdempotencyKey+"\" a retry is the same extension)")), nil
	}
	return ok(name, map[string]any{"task_id": args.TaskID, "deadline": dl.Deadline.Format(time.RFC3339), "max_deadline": dl.Max.Format(time.RFC3339)}), nil
}
