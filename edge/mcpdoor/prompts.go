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
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Prompts are conversations users start from a menu in their MCP host:
// each reads the mesh through the READ tool whose contract declares it
// (toolmesh.tool.v1 Prompt), as the caller, and hands the model what it
// found — embedded resources, or the content blocks the tool answers —
// after instructions rendered from the contract's templates. A prompt is offered to callers who may call that
// tool, and only on edges that serve the resources it embeds and completes
// from; its errors are the tool's errors. Nothing here names a prompt.

// promptItems is how many items of a list a prompt embeds per list call.
const promptItems = 50

// prompt is a prompt the door serves.
type prompt struct {
	*toolcatalog.Prompt
	prompt *mcp.Prompt
	// tool is the tool it reads through; kind the resource kind it embeds.
	tool *tool
	kind *resourceKind
	// each is the argument whose choices the list is read for, once per
	// choice, when it is left empty (nil: none).
	each *toolv1.PromptArgument
	// complete says how each argument that has completions completes.
	complete map[string]completion
}

// completion is where an argument's values come from: a fixed set, or the
// ids of a resource kind, listed as the caller with listArgs added.
type completion struct {
	values   []string
	kind     *resourceKind
	listArgs func(p *identity.Principal) map[string]any
}

// visible reports whether p may call the tool pr reads through.
func (pr *prompt) visible(p *identity.Principal) bool {
	ok, _ := p.MayCall(pr.tool.catalog)
	return ok
}

// reached reports whether r reaches the tool pr reads through and the
// resources it embeds.
func (pr *prompt) reached(r *reach) bool {
	return r.has(pr.tool.catalog.Name) && (pr.kind == nil || pr.kind.reached(r))
}

// refuse is the error of a request for pr that r does not reach, naming
// the first tool pr reads through that r leaves out.
func (pr *prompt) refuse(r *reach) error {
	t, read := pr.tool, []*tool{pr.tool}
	if pr.kind != nil {
		read = append(read, pr.kind.get, pr.kind.list)
	}
	for _, x := range read {
		if x != nil && !r.has(x.catalog.Name) {
			t = x
			break
		}
	}
	return r.refuse("prompt "+pr.GetName(), t.catalog.Name, t.catalog.Toolset)
}

// kind is the resource kind read by the tool named get.
func (rs *resourceFeature) kind(get string) *resourceKind {
	for _, k := range rs.kinds {
		if k.get.catalog.Name == get {
			return k
		}
	}
	return nil
}

// promptFeature serves the prompts, which read through the tools and the
// resource kinds they embed.
type promptFeature struct {
	prompts []*prompt
	res     *resourceFeature
	calls   *toolFeature
	resolve *resolver
}

// buildPrompts makes the prompts of the tools, sorted by name, leaving out
// those whose resource kinds this door does not serve.
func buildPrompts(sorted []*tool, res *resourceFeature) []*prompt {
	var prompts []*prompt
	for _, t := range sorted {
	prompts:
		for _, def := range t.catalog.Prompts {
			pr := &prompt{Prompt: def, tool: t, complete: map[string]completion{}}
			switch def.GetEmbed() {
			case toolv1.PromptEmbed_PROMPT_EMBED_LIST:
				for _, k := range res.kinds {
					if k.list == t {
						pr.kind = k
					}
				}
			case toolv1.PromptEmbed_PROMPT_EMBED_ONE:
				pr.kind = res.kind(t.catalog.Name)
			}
			if pr.kind == nil && def.GetEmbed() != toolv1.PromptEmbed_PROMPT_EMBED_CONTENT {
				continue
			}
			mp := &mcp.Prompt{Name: def.GetName(), Title: def.GetTitle(), Description: def.GetDescription()}
			for _, a := range def.GetArguments() {
				mp.Arguments = append(mp.Arguments, &mcp.PromptArgument{Name: a.GetName(), Title: a.GetTitle(), Description: a.GetDescription(), Required: a.GetRequired()})
				if len(a.GetChoices()) > 0 {
					if a.GetListField() != "" {
						pr.each = a
					}
					var values []string
					for _, c := range a.GetChoices() {
						values = append(values, c.GetValue())
					}
					pr.complete[a.GetName()] = completion{values: values}
				}
				if c := def.Completions[a.GetName()]; c != nil {
					k := res.kind(c.Resource)
					if k == nil || k.list == nil {
						continue prompts
					}
					pr.complete[a.GetName()] = completion{kind: k, listArgs: listArgs(c)}
				}
			}
			pr.prompt = mp
			prompts = append(prompts, pr)
		}
	}
	sort.Slice(prompts, func(i, j int) bool { return prompts[i].prompt.Name < prompts[j].prompt.Name })
	return prompts
}

// listArgs are the list arguments a completion lists with, for p.
func listArgs(c *toolcatalog.PromptCompletion) func(p *identity.Principal) map[string]any {
	if len(c.ListArguments) == 0 && c.OwnerField == "" {
		return nil
	}
	return func(p *identity.Principal) map[string]any {
		out := make(map[string]any, len(c.ListArguments)+1)
		for k, v := range c.ListArguments {
			out[k] = v
		}
		if c.OwnerField != "" {
			out[c.OwnerField] = slices.Contains(p.Roles, mesh.RoleOwner)
		}
		return out
	}
}

func (pf *promptFeature) promptHandler(pr *prompt) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		rq, err := pf.resolve.of(ctx, req)
		if err != nil {
			return nil, err
		}
		p, r := rq.caller, rq.reach
		if !pr.reached(r) {
			return nil, pr.refuse(r)
		}
		args, ask, err := pr.arguments(req)
		if err != nil || ask != nil {
			return ask, err
		}
		return pf.runPrompt(ctx, pr, p, req.Extra, args)
	}
}

// promptArgumentsKey is the key of the question that asks for a prompt's
// missing arguments.
const promptArgumentsKey = "arguments"

// arguments are the arguments of req: those given, with the answers to the
// question that asked for the required ones left out. A client that can be
// asked (it declares form elicitation) is asked for the required arguments
// it left out — as an input_required result at 2026-07-28, over the session
// before (the SDK asks, and calls again) — rather than refused; ask is
// that question. A prompt only reads, so no state is kept between the
// rounds: the retry carries the arguments and the answers.
func (pr *prompt) arguments(req *mcp.GetPromptRequest) (args map[string]string, ask *mcp.GetPromptResult, err error) {
	args = map[string]string{}
	for k, v := range req.Params.Arguments {
		args[k] = v
	}
	if r, ok := req.Params.InputResponses[promptArgumentsKey].(*mcp.ElicitResult); ok {
		if r.Action != "accept" {
			return nil, nil, invalidArgument("the user did not give the arguments prompt %s needs", pr.GetName())
		}
		for _, a := range pr.GetArguments() {
			if v, ok := r.Content[a.GetName()].(string); ok && strings.TrimSpace(args[a.GetName()]) == "" {
				args[a.GetName()] = v
			}
		}
	}
	var missing []*toolv1.PromptArgument
	for _, a := range pr.GetArguments() {
		if a.GetRequired() && strings.TrimSpace(args[a.GetName()]) == "" {
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 || !canAsk(req) {
		// runPrompt refuses what is still missing.
		return args, nil, nil
	}
	props := map[string]any{}
	var required, titles []string
	for _, a := range missing {
		prop := map[string]any{"type": "string", "title": a.GetTitle(), "minLength": 1}
		if a.GetDescription() != "" {
			prop["description"] = a.GetDescription()
		}
		if choices := a.GetChoices(); len(choices) > 0 {
			var values []any
			for _, c := range choices {
				values = append(values, c.GetValue())
			}
			prop["enum"] = values
		}
		props[a.GetName()] = prop
		required = append(required, a.GetName())
		titles = append(titles, a.GetTitle())
	}
	schema, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	if err != nil {
		return nil, nil, err
	}
	return nil, &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{promptArgumentsKey: &mcp.ElicitParams{Mode: "form",
		Message:         fmt.Sprintf("%s needs: %s.", pr.GetTitle(), strings.Join(titles, ", ")),
		RequestedSchema: json.RawMessage(schema)}}}, nil
}

// canAsk reports whether the client of req declared form elicitation (an
// empty elicitation capability means form).
func canAsk(req mcp.Request) bool {
	type capable interface {
		ClientCapabilities() *mcp.ClientCapabilities
	}
	c, ok := req.(capable)
	if !ok {
		return false
	}
	caps := c.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && (caps.Elicitation.Form != nil || caps.Elicitation.URL == nil)
}

// runPrompt reads what pr embeds as p and renders its instructions.
func (pf *promptFeature) runPrompt(ctx context.Context, pr *prompt, p *identity.Principal, extra *mcp.RequestExtra, given map[string]string) (*mcp.GetPromptResult, error) {
	data := toolcatalog.PromptData{Args: map[string]string{}, Limit: promptItems}
	for _, a := range pr.GetArguments() {
		v := strings.TrimSpace(given[a.GetName()])
		if v == "" {
			if a.GetRequired() {
				return nil, invalidArgument("prompt %s needs the argument %s", pr.GetName(), a.GetName())
			}
			continue
		}
		if choices := a.GetChoices(); len(choices) > 0 {
			i := slices.IndexFunc(choices, func(c *toolv1.PromptChoice) bool { return strings.EqualFold(c.GetValue(), v) })
			if i < 0 {
				var values []string
				for _, c := range choices {
					values = append(values, c.GetValue())
				}
				return nil, invalidArgument("%s must be %s, not %q", a.GetName(), strings.Join(values, " or "), given[a.GetName()])
			}
			v = choices[i].GetValue()
		}
		data.Args[a.GetName()] = v
	}
	var attached []*mcp.PromptMessage
	switch pr.GetEmbed() {
	case toolv1.PromptEmbed_PROMPT_EMBED_ONE:
		msg, err := pf.embedOne(ctx, pr.kind, p, extra, data.Args[pr.GetIdArgument()])
		if err != nil {
			return nil, err
		}
		attached = append(attached, msg)
	case toolv1.PromptEmbed_PROMPT_EMBED_CONTENT:
		var err error
		if attached, err = pf.embedContent(ctx, pr, p, extra, data.Args); err != nil {
			return nil, err
		}
	default:
		var err error
		if attached, err = pf.embedLists(ctx, pr, p, extra, &data); err != nil {
			return nil, err
		}
	}
	data.Count = len(attached)
	var text, desc strings.Builder
	if err := pr.Text.Execute(&text, data); err != nil {
		return nil, fmt.Errorf("prompt %s: %w", pr.GetName(), err)
	}
	if err := pr.Description.Execute(&desc, data); err != nil {
		return nil, fmt.Errorf("prompt %s: %w", pr.GetName(), err)
	}
	return &mcp.GetPromptResult{Description: desc.String(), Messages: append([]*mcp.PromptMessage{textMessage(text.String())}, attached...)}, nil
}

// embedContent calls the tool carrying pr as p, with the arguments given in
// their request fields, and returns the content blocks it answered, each
// as a message.
func (pf *promptFeature) embedContent(ctx context.Context, pr *prompt, p *identity.Principal, extra *mcp.RequestExtra, given map[string]string) ([]*mcp.PromptMessage, error) {
	args := map[string]any{}
	for _, a := range pr.GetArguments() {
		if v, ok := given[a.GetName()]; ok && a.GetListField() != "" {
			args[a.GetListField()] = listValue(a, v)
		}
	}
	env := pf.calls.callAs(ctx, pr.tool, p, extra, args)
	if env.IsError() {
		return nil, envelopeError(env)
	}
	blocks, _ := blocksOf(pr.tool.catalog, env)
	out := make([]*mcp.PromptMessage, 0, len(blocks))
	for _, b := range blocks {
		if c := mcpContent(b); c != nil {
			out = append(out, &mcp.PromptMessage{Role: "user", Content: c})
		}
	}
	return out, nil
}

// embedLists lists the items pr embeds — once, or once per choice of its
// each argument — and returns them as embedded resources; data learns the
// choices read and whether there were more.
func (pf *promptFeature) embedLists(ctx context.Context, pr *prompt, p *identity.Principal, extra *mcp.RequestExtra, data *toolcatalog.PromptData) ([]*mcp.PromptMessage, error) {
	base := map[string]any{}
	for k, v := range pr.ListArguments {
		base[k] = v
	}
	for _, a := range pr.GetArguments() {
		if v, ok := data.Args[a.GetName()]; ok && a.GetListField() != "" {
			base[a.GetListField()] = listValue(a, v)
		}
	}
	runs := []map[string]any{base}
	if a := pr.each; a != nil {
		if v, ok := data.Args[a.GetName()]; ok {
			data.Each = []string{v}
		} else {
			runs = nil
			for _, c := range a.GetChoices() {
				args := maps(base)
				args[a.GetListField()] = c.GetListValue()
				runs = append(runs, args)
				data.Each = append(data.Each, c.GetValue())
			}
		}
	}
	var out []*mcp.PromptMessage
	for _, args := range runs {
		msgs, more, err := pf.embedList(ctx, pr.kind, p, extra, args)
		if err != nil {
			return nil, err
		}
		out, data.More = append(out, msgs...), data.More || more
	}
	return out, nil
}

// listValue is what the list tool gets for v, a value of a.
func listValue(a *toolv1.PromptArgument, v string) string {
	for _, c := range a.GetChoices() {
		if c.GetValue() == v && c.GetListValue() != "" {
			return c.GetListValue()
		}
	}
	return v
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// embedList lists up to promptItems resources of k, with args, and returns
// them as embedded resources, and whether there are more.
func (pf *promptFeature) embedList(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, args map[string]any) ([]*mcp.PromptMessage, bool, error) {
	items, next, env := pf.res.listItems(ctx, k, p, extra, args, 0, promptItems)
	if env != nil {
		return nil, false, envelopeError(env)
	}
	msgs := make([]*mcp.PromptMessage, 0, len(items))
	for _, it := range items {
		msgs = append(msgs, embedded(k.URI(it.id), k.asRead(it.raw)))
	}
	return msgs, next >= 0, nil
}

// embedOne reads the resource of k with the given id and returns it
// embedded.
func (pf *promptFeature) embedOne(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, id string) (*mcp.PromptMessage, error) {
	uri := k.URI(id)
	env, err := pf.res.read(ctx, k, p, extra, uri)
	if err != nil {
		return nil, err
	}
	if env.IsError() {
		return nil, envelopeError(env)
	}
	return &mcp.PromptMessage{Role: "user", Content: &mcp.EmbeddedResource{Resource: resourceContents(k.get.catalog, uri, env)[0]}}, nil
}

func embedded(uri string, data json.RawMessage) *mcp.PromptMessage {
	return &mcp.PromptMessage{Role: "user", Content: &mcp.EmbeddedResource{Resource: contents(uri, data)}}
}

func textMessage(s string) *mcp.PromptMessage {
	return &mcp.PromptMessage{Role: "user", Content: &mcp.TextContent{Text: s}}
}

// invalidArgument refuses a prompt argument.
func invalidArgument(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}
