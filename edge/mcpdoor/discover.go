package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema"
)

// Tool search mode (the selection keyword dynamic): tools/list shows four
// meta-tools, and the tools of the toolsets enabled so far, instead of
// every tool of the selection. The model finds what it needs by asking:
//
//   - toolsets_list: the toolsets, what each is for, its tools, whether it
//     is enabled;
//   - tools_search: the tools that best match a few words (BM25 over names,
//     titles, descriptions, toolsets and argument names; an index built at
//     start, toolcatalog.Index), each with its input schema;
//   - toolsets_enable: list a toolset's tools from now on. A 2025-era
//     session (and stdio) keeps what it enabled and hears
//     notifications/tools/list_changed; the stateless era keeps nothing, so
//     the answer hands the client the _meta it sends with tools/list
//     (MetaToolsets) from then on;
//   - tools_call: call any tool of the selection by name, listed or not.
//
// Their descriptions name the toolsets behind them, with what each is for:
// a model ignores a search tool that does not say what it searches. Every
// tool of the selection may be called directly whether its toolset is
// enabled or not; enabling is about what tools/list shows.

// The meta-tools.
const (
	metaToolsetsList = "toolsets_list"
	metaToolsEnable  = "toolsets_enable"
	metaToolsSearch  = "tools_search"
	metaToolsCall    = "tools_call"
)

// isMeta reports whether name is a meta-tool's.
func isMeta(name string) bool {
	switch name {
	case metaToolsetsList, metaToolsEnable, metaToolsSearch, metaToolsCall:
		return true
	}
	return false
}

// Search bounds.
const (
	defaultSearchHits = 5
	maxSearchHits     = 20
	maxQueryLen       = 500
)

// group is a toolset as one view shows it: the tools of it the caller
// reaches and may call.
type group struct {
	*toolcatalog.Toolset
	tools []*tool
}

// metaFeature serves the edge's own tools: the meta-tools of tool search
// mode and calls_extend_task.
type metaFeature struct {
	tools    map[string]*tool
	index    *toolcatalog.Index
	views    *views
	resolve  *resolver
	pipeline port.Pipeline
	// tasks carries MCP tasks and extend extends them; nil when the edge
	// carries none.
	tasks  port.Tasks
	extend port.TaskExtender
	// send sends a message to a client (the SDK's sending handler).
	send mcp.MethodHandler
	log  *slog.Logger
}

// addMetaTools registers the meta-tools with the SDK, which routes their
// calls; what tools/list shows of them is built per view (metaTools).
func (m *metaFeature) addMetaTools(server *mcp.Server) error {
	for _, name := range []string{metaToolsetsList, metaToolsEnable, metaToolsSearch, metaToolsCall} {
		if _, ok := m.tools[name]; ok {
			return fmt.Errorf("edge: tool %q is named like a meta-tool of tool search mode; rename it", name)
		}
	}
	obj := json.RawMessage(`{"type":"object"}`)
	server.AddTool(&mcp.Tool{Name: metaToolsetsList, InputSchema: obj}, m.listToolsets)
	server.AddTool(&mcp.Tool{Name: metaToolsEnable, InputSchema: obj}, m.enableToolsets)
	server.AddTool(&mcp.Tool{Name: metaToolsSearch, InputSchema: obj}, m.searchTools)
	server.AddTool(&mcp.Tool{Name: metaToolsCall, InputSchema: obj}, m.callByName)
	if m.extend != nil {
		if _, ok := m.tools[metaExtendTask]; ok {
			return fmt.Errorf("edge: tool %q is named like the edge's own; rename it", metaExtendTask)
		}
		server.AddTool(&mcp.Tool{Name: metaExtendTask, InputSchema: obj}, m.extendTask)
	}
	return nil
}

// metaTools are the meta-tools as a view with groups lists them.
func metaTools(groups []*group) []*mcp.Tool {
	names := make([]string, len(groups))
	var described strings.Builder
	for i, g := range groups {
		names[i] = g.Name
		fmt.Fprintf(&described, "\n- %s: %s", g.Name, g.Description)
	}
	list := strings.Join(names, ", ")
	str := func(desc string) toolschema.Schema { return toolschema.Schema{"type": "string", "description": desc} }
	nameEnum := toolschema.Schema{"type": "string", "enum": names}
	readOnly, notDestructive, closed := true, false, false
	ann := func(title string, ro bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: ro, DestructiveHint: &notDestructive, IdempotentHint: ro, OpenWorldHint: &closed}
	}
	return []*mcp.Tool{
		{
			Name:  metaToolsCall,
			Title: "Call a tool by name",
			Description: "Call any tool of the toolsets " + list + " by its name with its arguments, whether its toolset is enabled or not. " +
				"Find the tool and its input schema with tools_search first. Answers what the tool answers.",
			InputSchema: mustJSON(toolschema.Schema{"type": "object", "additionalProperties": false, "required": []string{"name"},
				"properties": toolschema.Schema{
					"name":      str("The tool's name, as tools_search found it."),
					"arguments": toolschema.Schema{"type": "object", "description": "The tool's arguments, as its input schema says."},
				}}),
			Annotations: &mcp.ToolAnnotations{Title: "Call a tool by name", OpenWorldHint: &closed},
		},
		{
			Name:  metaToolsSearch,
			Title: "Search tools",
			Description: "Find the tools for a job among the tools of this server that are not listed yet, by describing the job in a few words " +
				`("give credits to an agent"). Answers the best matches, each with its toolset and input schema; call one with tools_call, ` +
				"or enable its toolset with toolsets_enable to have its tools listed. The toolsets searched:" + described.String(),
			InputSchema: mustJSON(toolschema.Schema{"type": "object", "additionalProperties": false, "required": []string{"query"},
				"properties": toolschema.Schema{
					"query":   toolschema.Schema{"type": "string", "minLength": 1, "maxLength": maxQueryLen, "pattern": `\S`, "description": "What you want to do, in a few words."},
					"toolset": withDesc(nameEnum, "Search this toolset only."),
					"limit":   toolschema.Schema{"type": "integer", "minimum": 1, "maximum": maxSearchHits, "default": defaultSearchHits, "description": "How many matches at most."},
				}}),
			OutputSchema: envelopeSchema(toolschema.Schema{"hits": toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "object"}}}),
			Annotations:  ann("Search tools", readOnly),
		},
		{
			Name:  metaToolsEnable,
			Title: "Enable toolsets",
			Description: "Enable toolsets so that their tools are listed and can be called directly: one or more of " + list +
				". Enable a toolset when the task needs several of its tools; for a single call, tools_call does.",
			InputSchema: mustJSON(toolschema.Schema{"type": "object", "additionalProperties": false, "required": []string{"toolsets"},
				"properties": toolschema.Schema{
					"toolsets": toolschema.Schema{"type": "array", "minItems": 1, "uniqueItems": true, "items": nameEnum, "description": "The toolsets to enable."},
				}}),
			OutputSchema: envelopeSchema(toolschema.Schema{"enabled": toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "string"}},
				"tools": toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "string"}}}),
			Annotations: ann("Enable toolsets", false),
		},
		{
			Name:  metaToolsetsList,
			Title: "List toolsets",
			Description: "List the toolsets (groups of tools) of this server — " + list +
				" — with what each is for, its tools and whether it is enabled.",
			InputSchema:  mustJSON(toolschema.Schema{"type": "object", "additionalProperties": false, "properties": toolschema.Schema{}}),
			OutputSchema: envelopeSchema(toolschema.Schema{"toolsets": toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "object"}}}),
			Annotations:  ann("List toolsets", readOnly),
		},
	}
}

func withDesc(s toolschema.Schema, desc string) toolschema.Schema {
	out := toolschema.Schema{"description": desc}
	for k, v := range s {
		out[k] = v
	}
	return out
}

// envelopeSchema is the output schema of a meta-tool whose data has props:
// its success envelope or an error envelope, as every tool's.
func envelopeSchema(props toolschema.Schema) json.RawMessage {
	ok := toolschema.Schema{"title": "Success", "type": "object", "required": []string{"status", "data"},
		"properties": toolschema.Schema{"status": toolschema.Schema{"const": "ok"}, "data": toolschema.Schema{"type": "object", "properties": props}}}
	return mustJSON(toolschema.Schema{"$schema": toolschema.Draft, "type": "object", "required": []string{"status"},
		"properties": toolschema.Schema{"status": toolschema.Schema{"type": "string", "enum": []string{"ok", "error"}}},
		"oneOf":      []any{ok, toolcall.ErrorSchema()}})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the schemas above are maps of plain values
	}
	return b
}

// metaCall is the state every meta-tool call starts from: its caller, what
// it reaches and the caller's view.
func (m *metaFeature) metaCall(ctx context.Context, req *mcp.CallToolRequest) (*identity.Principal, *reach, *view, *toolcall.Envelope) {
	name := req.Params.Name
	p := m.resolve.principal(req)
	if p == nil {
		return nil, nil, nil, toolcall.Fail(name, toolcall.CodeUnauthenticated, "the caller is not authenticated")
	}
	rc, err := m.resolve.reachFor(ctx, req)
	if err != nil {
		return nil, nil, nil, toolcall.Fail(name, toolcall.CodeInvalidArgument, err.Error())
	}
	return p, rc, m.views.get(p, rc), nil
}

// decodeArgs reads a meta-tool's arguments into v; unknown ones are an
// error, as for every tool.
func decodeArgs(name string, raw json.RawMessage, v any) *toolcall.Envelope {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return toolcall.Fail(name, toolcall.CodeInvalidArgument, "arguments: "+err.Error())
	}
	return nil
}

// ok renders data as a success result.
func ok(name string, data any) *mcp.CallToolResult {
	b, err := json.Marshal(data)
	if err != nil {
		return result(toolcall.Fail(name, toolcall.CodeInternal, "encode result"))
	}
	return result(toolcall.OK(b, nil))
}

// groupNames names the groups, for errors.
func groupNames(groups []*group) string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	return strings.Join(names, ", ")
}

func (m *metaFeature) listToolsets(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	_, rc, v, fail := m.metaCall(ctx, req)
	if fail == nil {
		fail = decodeArgs(metaToolsetsList, req.Params.Arguments, &struct{}{})
	}
	if fail != nil {
		return result(fail), nil
	}
	type toolsetOut struct {
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Tools       []string `json:"tools"`
		Enabled     bool     `json:"enabled"`
	}
	out := []toolsetOut{}
	for _, g := range v.groups {
		ts := toolsetOut{Name: g.Name, Description: g.Description, Enabled: rc.isEnabled(g.Name)}
		for _, t := range g.tools {
			ts.Tools = append(ts.Tools, t.catalog.Name)
		}
		out = append(out, ts)
	}
	return ok(metaToolsetsList, map[string]any{"toolsets": out}), nil
}

func (m *metaFeature) searchTools(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Query   string `json:"query"`
		Toolset string `json:"toolset"`
		Limit   *int   `json:"limit"`
	}
	p, rc, v, fail := m.metaCall(ctx, req)
	if fail == nil {
		fail = decodeArgs(metaToolsSearch, req.Params.Arguments, &args)
	}
	limit := defaultSearchHits
	if fail == nil {
		if args.Limit != nil {
			limit = *args.Limit
		}
		switch {
		case strings.TrimSpace(args.Query) == "":
			fail = toolcall.Fail(metaToolsSearch, toolcall.CodeInvalidArgument, "query: say in a few words what you want to do")
		case len(args.Query) > maxQueryLen:
			fail = toolcall.Fail(metaToolsSearch, toolcall.CodeInvalidArgument, fmt.Sprintf("query: at most %d bytes", maxQueryLen))
		case limit < 1 || limit > maxSearchHits:
			fail = toolcall.Fail(metaToolsSearch, toolcall.CodeInvalidArgument, fmt.Sprintf("limit: from 1 to %d", maxSearchHits))
		case args.Toolset != "" && !slices.ContainsFunc(v.groups, func(g *group) bool { return g.Name == args.Toolset }):
			fail = toolcall.Fail(metaToolsSearch, toolcall.CodeInvalidArgument, fmt.Sprintf("toolset: no toolset %q here; the toolsets are %s", args.Toolset, groupNames(v.groups)))
		}
	}
	if fail != nil {
		return result(fail), nil
	}
	allow := func(t *toolcatalog.Tool) bool {
		if !rc.has(t.Name) || args.Toolset != "" && t.Toolset != args.Toolset {
			return false
		}
		may, _ := p.MayCall(t)
		return may
	}
	type hitOut struct {
		Name        string          `json:"name"`
		Title       string          `json:"title"`
		Toolset     string          `json:"toolset"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Score       float64         `json:"score"`
	}
	hits := []hitOut{}
	for _, h := range m.index.Search(args.Query, allow, limit) {
		t := m.tools[h.Tool.Name]
		hits = append(hits, hitOut{Name: h.Tool.Name, Title: h.Tool.Title, Toolset: h.Tool.Toolset, Description: t.mcp.Description,
			InputSchema: h.Tool.InputSchema, Score: math.Round(h.Score*100) / 100})
	}
	return ok(metaToolsSearch, map[string]any{"hits": hits}), nil
}

func (m *metaFeature) enableToolsets(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Toolsets []string `json:"toolsets"`
	}
	_, rc, v, fail := m.metaCall(ctx, req)
	if fail == nil {
		fail = decodeArgs(metaToolsEnable, req.Params.Arguments, &args)
	}
	if fail == nil && len(args.Toolsets) == 0 {
		fail = toolcall.Fail(metaToolsEnable, toolcall.CodeInvalidArgument, "toolsets: name at least one of "+groupNames(v.groups))
	}
	var added []*group
	for _, name := range args.Toolsets {
		i := slices.IndexFunc(v.groups, func(g *group) bool { return g.Name == name })
		if fail == nil && i < 0 {
			fail = toolcall.Fail(metaToolsEnable, toolcall.CodeInvalidArgument, fmt.Sprintf("toolsets: no toolset %q here; the toolsets are %s", name, groupNames(v.groups)))
		}
		if i >= 0 {
			added = append(added, v.groups[i])
		}
	}
	if fail != nil {
		return result(fail), nil
	}
	enabled := map[string]bool{}
	for _, name := range rc.enabled {
		enabled[name] = true
	}
	var tools []string
	for _, g := range added {
		enabled[g.Name] = true
		for _, t := range g.tools {
			tools = append(tools, t.catalog.Name)
		}
	}
	names := slices.Sorted(mapKeys(enabled))
	out := map[string]any{"enabled": names, "tools": tools}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if st := m.resolve.states.get(ss); st != nil {
		st.mu.Lock()
		st.enabled = slices.Sorted(mapKeys(enabled))
		st.mu.Unlock()
		if err := m.toolsChanged(ctx, ss); err != nil {
			m.log.WarnContext(ctx, "mcp.list_changed_failed", "error", err)
		}
		out["note"] = "These tools are listed from now on in this session (notifications/tools/list_changed was sent)."
	} else {
		out["_meta"] = map[string]any{MetaToolsets: names}
		out["note"] = "This server keeps no session: send _meta {\"" + MetaToolsets + "\": " + string(mustJSON(names)) +
			"} with tools/list to have these tools listed; they can be called by name meanwhile."
	}
	return ok(metaToolsEnable, out), nil
}

// toolsChanged tells one session that the tools it may list changed.
func (m *metaFeature) toolsChanged(ctx context.Context, ss *mcp.ServerSession) error {
	_, err := m.send(ctx, "notifications/tools/list_changed", &mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: ss, Params: &mcp.ToolListChangedParams{}})
	return err
}

func (m *metaFeature) callByName(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	_, rc, _, fail := m.metaCall(ctx, req)
	if fail == nil {
		fail = decodeArgs(metaToolsCall, req.Params.Arguments, &args)
	}
	var t *tool
	if fail == nil {
		t = m.tools[args.Name]
		switch {
		case args.Name == "":
			fail = toolcall.Fail(metaToolsCall, toolcall.CodeInvalidArgument, "name: the tool to call, as tools_search found it")
		case isMeta(args.Name):
			fail = toolcall.Fail(metaToolsCall, toolcall.CodeInvalidArgument, fmt.Sprintf("name: %s is a tool of tool search mode; call it directly", args.Name))
		case t == nil:
			fail = toolcall.Fail(metaToolsCall, toolcall.CodeInvalidArgument, fmt.Sprintf("name: no tool %q; find one with tools_search", args.Name))
		case !rc.has(args.Name):
			fail = toolcall.Fail(metaToolsCall, toolcall.CodeInvalidArgument, "name: "+rc.outside("tool "+args.Name, args.Name, t.catalog.Toolset))
		}
	}
	if fail != nil {
		return result(fail), nil
	}
	inner := *req.Params
	inner.Name, inner.Arguments = args.Name, args.Arguments
	if len(inner.Arguments) == 0 {
		inner.Arguments = json.RawMessage("{}")
	}
	return t.handler(ctx, &mcp.CallToolRequest{Session: req.Session, Extra: req.Extra, Params: &inner})
}
