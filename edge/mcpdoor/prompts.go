package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// Prompts are conversations users start from a menu in their MCP host:
// each reads the mesh through tools, as the caller, and hands the model
// what it found as embedded resources, with instructions. A prompt is
// offered to callers who may call every tool it reads, and only on edges
// whose registry has those tools; its errors are the tools' errors.

// promptItems is how many items of a list a prompt embeds.
const promptItems = 50

// promptDef defines one prompt.
type promptDef struct {
	prompt *mcp.Prompt
	// reads are the tools the prompt calls.
	reads []string
	// kinds are the resource kinds (named by the tool that reads them) it
	// embeds or completes from.
	kinds []string
	// complete says how each argument that has completions completes.
	complete map[string]completion
	// build makes the prompt for p from its arguments.
	build func(ctx context.Context, r *promptRun, args map[string]string) (*mcp.GetPromptResult, error)
}

// completion is where an argument's values come from: a fixed set, or the
// ids of a resource kind (named by the tool that reads it), listed as the
// caller with listArgs added.
type completion struct {
	values   []string
	kind     string
	listArgs func(p *identity.Principal) map[string]any
}

// prompt is a prompt the edge serves.
type prompt struct {
	*promptDef
	tools []*tool
}

// visible reports whether p may call every tool pr reads.
func (pr *prompt) visible(p *identity.Principal) bool {
	for _, b := range pr.tools {
		if ok, _ := p.MayCall(b.catalog); !ok {
			return false
		}
	}
	return true
}

// promptRun is one prompts/get: who asks, and the resources to read
// through.
type promptRun struct {
	mesh  resourceReader
	p     *identity.Principal
	extra *mcp.RequestExtra
}

// resourceReader reads the mesh's resources as a caller.
type resourceReader interface {
	kind(get string) *resourceKind
	listItems(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, args map[string]any, offset, limit int32) ([]item, int32, *toolcall.Envelope)
	read(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, uri string) (*toolcall.Envelope, error)
}

// kind is the resource kind read by the tool named get.
func (d *Door) kind(get string) *resourceKind {
	for _, k := range d.resources {
		if k.get.catalog.Name == get {
			return k
		}
	}
	return nil
}

func (r *promptRun) kind(get string) *resourceKind { return r.mesh.kind(get) }

// embedList lists up to promptItems resources of the kind read by get, with
// args, and returns them as embedded resources, and whether there are more.
func (r *promptRun) embedList(ctx context.Context, get string, args map[string]any) ([]*mcp.PromptMessage, bool, error) {
	k := r.kind(get)
	items, next, env := r.mesh.listItems(ctx, k, r.p, r.extra, args, 0, promptItems)
	if env != nil {
		return nil, false, envelopeError(env)
	}
	msgs := make([]*mcp.PromptMessage, 0, len(items))
	for _, it := range items {
		msgs = append(msgs, embedded(k.URI(it.id), k.asRead(it.raw)))
	}
	return msgs, next >= 0, nil
}

// embedOne reads the resource of the kind read by get with the given id and
// returns it embedded.
func (r *promptRun) embedOne(ctx context.Context, get, id string) (*mcp.PromptMessage, error) {
	k := r.kind(get)
	uri := k.URI(id)
	env, err := r.mesh.read(ctx, k, r.p, r.extra, uri)
	if err != nil {
		return nil, err
	}
	if env.IsError() {
		return nil, envelopeError(env)
	}
	return embedded(uri, env.Data), nil
}

func embedded(uri string, data json.RawMessage) *mcp.PromptMessage {
	return &mcp.PromptMessage{Role: "user", Content: &mcp.EmbeddedResource{Resource: contents(uri, data)}}
}

func text(s string) *mcp.PromptMessage {
	return &mcp.PromptMessage{Role: "user", Content: &mcp.TextContent{Text: s}}
}

// invalidArgument refuses a prompt argument.
func invalidArgument(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// count says how many things there are: "1 open task", "2 open tasks".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// isOwner reports whether p acts as the owner.
func isOwner(p *identity.Principal) bool { return slices.Contains(p.Roles, mesh.RoleOwner) }

// promptDefs are the prompts of the mesh.
func promptDefs() []*promptDef {
	return []*promptDef{
		{
			prompt: &mcp.Prompt{
				Name:  "triage_tasks",
				Title: "Triage my open tasks",
				Description: "Go through your open work tasks (pending and running) and decide, most urgent first, " +
					"what to do next with each: start it, finish it, cancel it or leave it.",
				Arguments: []*mcp.PromptArgument{
					{Name: "status", Title: "Status", Description: "Only open tasks in this status: pending or running (both when empty)."},
					{Name: "focus", Title: "Focus", Description: "What matters most right now, e.g. a deadline or a project."},
				},
			},
			reads:    []string{"tasks_list"},
			kinds:    []string{"tasks_get"},
			complete: map[string]completion{"status": {values: []string{"pending", "running"}}},
			build:    triageTasks,
		},
		{
			prompt: &mcp.Prompt{
				Name:  "review_pending_asks",
				Title: "Go through the owner's pending asks",
				Description: "Go through the questions agents are waiting on the owner to answer, summarise what each " +
					"agent needs and suggest an answer.",
				Arguments: []*mcp.PromptArgument{
					{Name: "agent_id", Title: "Agent", Description: "Only this agent's asks (every agent's you may see when empty)."},
				},
			},
			reads:    []string{"owner_list_asks"},
			kinds:    []string{"owner_get_ask", "agents_get"},
			complete: map[string]completion{"agent_id": {kind: "agents_get"}},
			build:    reviewPendingAsks,
		},
		{
			prompt: &mcp.Prompt{
				Name:  "review_schedule",
				Title: "Review a schedule before approving it",
				Description: "Check what a schedule waiting for approval will run, as which agent and how often, " +
					"and recommend approving or denying it.",
				Arguments: []*mcp.PromptArgument{
					{Name: "schedule_id", Title: "Schedule", Description: "Id of the schedule, e.g. sch_01j....", Required: true},
				},
			},
			reads: []string{"schedules_get"},
			kinds: []string{"schedules_get"},
			complete: map[string]completion{"schedule_id": {kind: "schedules_get", listArgs: func(p *identity.Principal) map[string]any {
				// The owner approves every agent's schedules; an agent
				// sees its own.
				return map[string]any{"status": "SCHEDULE_STATUS_PENDING_APPROVAL", "all_agents": isOwner(p)}
			}}},
			build: reviewSchedule,
		},
	}
}

func triageTasks(ctx context.Context, r *promptRun, args map[string]string) (*mcp.GetPromptResult, error) {
	statuses := []string{"pending", "running"}
	if s := strings.ToLower(strings.TrimSpace(args["status"])); s != "" {
		if !slices.Contains(statuses, s) {
			return nil, invalidArgument("status must be pending or running, not %q", args["status"])
		}
		statuses = []string{s}
	}
	var tasks []*mcp.PromptMessage
	more := false
	for _, s := range statuses {
		msgs, m, err := r.embedList(ctx, "tasks_get", map[string]any{"status": "TASK_STATUS_" + strings.ToUpper(s)})
		if err != nil {
			return nil, err
		}
		tasks, more = append(tasks, msgs...), more || m
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Triage my open work tasks (%s).", strings.Join(statuses, " and "))
	if focus := strings.TrimSpace(args["focus"]); focus != "" {
		fmt.Fprintf(&b, " What matters most right now: %s.", focus)
	}
	if len(tasks) == 0 {
		b.WriteString("\n\nI have no open tasks. Say so, and suggest what to record as a task next, if anything.")
		return &mcp.GetPromptResult{Description: "No open tasks.", Messages: []*mcp.PromptMessage{text(b.String())}}, nil
	}
	b.WriteString("\n\nThe tasks are attached, newest first. Order them by urgency (priority first), then say for each what to do next:" +
		" start it (tasks_update_status to TASK_STATUS_RUNNING), finish it (TASK_STATUS_COMPLETED or TASK_STATUS_FAILED with a result)," +
		" cancel it (tasks_cancel with a reason) or leave it, and why. Do not change any task before I agree.")
	if more {
		fmt.Fprintf(&b, "\n\nOnly the first %d tasks of each status are attached; tasks_list pages through the rest.", promptItems)
	}
	return &mcp.GetPromptResult{Description: count(len(tasks), "open task") + " to triage.", Messages: append([]*mcp.PromptMessage{text(b.String())}, tasks...)}, nil
}

func reviewPendingAsks(ctx context.Context, r *promptRun, args map[string]string) (*mcp.GetPromptResult, error) {
	list := map[string]any{"status": "ASK_STATUS_PENDING"}
	who := "every agent I may see"
	if agent := strings.TrimSpace(args["agent_id"]); agent != "" {
		list["agent_id"], who = agent, "agent "+agent
	}
	asks, more, err := r.embedList(ctx, "owner_get_ask", list)
	if err != nil {
		return nil, err
	}
	if len(asks) == 0 {
		return &mcp.GetPromptResult{Description: "No pending asks.", Messages: []*mcp.PromptMessage{
			text(fmt.Sprintf("Check the owner's pending asks from %s. There are none: say so.", who))}}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Go through the asks from %s that are waiting for the owner's answer; they are attached, newest first.", who)
	b.WriteString(" For each: say in one line what the agent needs and by when it expires, suggest an answer (exactly one of its options when" +
		" it lists options), and say which can wait. The owner answers with owner_answer; do not answer before the owner decides.")
	if more {
		fmt.Fprintf(&b, "\n\nOnly the first %d asks are attached; owner_list_asks pages through the rest.", promptItems)
	}
	return &mcp.GetPromptResult{Description: count(len(asks), "pending ask") + ".", Messages: append([]*mcp.PromptMessage{text(b.String())}, asks...)}, nil
}

func reviewSchedule(ctx context.Context, r *promptRun, args map[string]string) (*mcp.GetPromptResult, error) {
	id := strings.TrimSpace(args["schedule_id"])
	schedule, err := r.embedOne(ctx, "schedules_get", id)
	if err != nil {
		return nil, err
	}
	return &mcp.GetPromptResult{Description: "Review schedule " + id + ".", Messages: []*mcp.PromptMessage{
		text("Review the attached schedule before the owner approves it. Check: which tool it runs, with which arguments, as which agent;" +
			" whether the arguments are right and safe to repeat; how often it runs (its next run times) and whether that is what is needed." +
			" Then recommend approving it (schedules_approve) or denying it (schedules_deny), with the reason in one sentence." +
			" Do not approve or deny it yourself before the owner agrees."),
		schedule,
	}}, nil
}

// buildPrompts makes the prompts whose tools the registry has, sorted by
// name.
func (d *Door) buildPrompts() {
	for _, def := range promptDefs() {
		pr := &prompt{promptDef: def}
		for _, name := range def.reads {
			if t, ok := d.tools[name]; ok {
				pr.tools = append(pr.tools, t)
			}
		}
		if len(pr.tools) < len(def.reads) || !d.hasKinds(def) {
			continue
		}
		d.prompts = append(d.prompts, pr)
	}
	sort.Slice(d.prompts, func(i, j int) bool { return d.prompts[i].prompt.Name < d.prompts[j].prompt.Name })
}

// hasKinds reports whether the resource kinds def uses are served.
func (d *Door) hasKinds(def *promptDef) bool {
	for _, name := range def.kinds {
		if d.kind(name) == nil {
			return false
		}
	}
	return true
}

func (d *Door) promptHandler(pr *prompt) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		p, err := d.caller(req)
		if err != nil {
			return nil, err
		}
		args := req.Params.Arguments
		for _, a := range pr.prompt.Arguments {
			if a.Required && strings.TrimSpace(args[a.Name]) == "" {
				return nil, invalidArgument("prompt %s needs the argument %s", pr.prompt.Name, a.Name)
			}
		}
		return pr.build(ctx, &promptRun{mesh: d, p: p, extra: req.Extra}, args)
	}
}
