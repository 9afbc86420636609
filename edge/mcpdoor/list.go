package mcpdoor

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// view is what one set of permissions may see through one reach (a
// selection, a claim, the toolsets enabled), each list sorted by its key:
// the tools it lists, the resource templates and the prompts that read
// through the tools it reaches, and the toolsets of those tools. It is
// built once per permissions and reach and shared by every caller who has
// them, so a list request does no work proportional to the number of
// tools.
type view struct {
	tools []*listedTool
	// appTools are tools for a client that declares MCP Apps: a tool with
	// a view points at it (apps.go).
	appTools     []*listedTool
	toolNames    []string
	templates    []*mcp.ResourceTemplate
	templateURIs []string
	prompts      []*mcp.Prompt
	promptNames  []string
	// groups are the toolsets of the tools reached and callable, sorted by
	// name (tool search mode shows them).
	groups []*group
}

// maxViews bounds the cached views (one per distinct set of permissions
// and reach); past it, views are built per request.
const maxViews = 1024

// viewBuilder builds the views: what the tools, resource kinds and
// prompts show through each reach.
type viewBuilder struct {
	sorted   []*tool
	toolsets *toolsets
	kinds    []*resourceKind
	prompts  []*prompt
	tasks    *tasks
	// extendable: the edge extends MCP tasks (calls_extend_task is
	// listed).
	extendable bool
}

// listFeature serves the lists that depend on the caller and its reach:
// tools/list, resources/templates/list and prompts/list, paged from the
// caller's view.
type listFeature struct {
	views    *views
	resolve  *resolver
	pageSize int
	// ttl is how long a client may cache a list; public: the lists may be
	// shared by every caller (development mode).
	ttl    time.Duration
	public bool
}

type views struct {
	build func(p *identity.Principal, r *reach) *view
	mu    sync.Mutex
	m     map[string]*view
}

func (v *views) get(p *identity.Principal, r *reach) *view {
	key := p.PermissionKey() + "\x00" + r.key()
	v.mu.Lock()
	pv, ok := v.m[key]
	v.mu.Unlock()
	if ok {
		return pv
	}
	pv = v.build(p, r)
	v.mu.Lock()
	if len(v.m) < maxViews {
		v.m[key] = pv
	}
	v.mu.Unlock()
	return pv
}

// build makes what p may see through r.
func (vb *viewBuilder) build(p *identity.Principal, r *reach) *view {
	pv := &view{}
	groups := map[string]*group{}
	for _, t := range vb.sorted {
		if !r.has(t.catalog.Name) {
			continue
		}
		if ok, _ := p.MayCall(t.catalog); !ok {
			continue
		}
		g := groups[t.catalog.Toolset]
		if g == nil {
			g = &group{Toolset: vb.toolsets.byName[t.catalog.Toolset]}
			groups[t.catalog.Toolset] = g
			pv.groups = append(pv.groups, g)
		}
		g.tools = append(g.tools, t)
		if r.dynamic() && !r.isEnabled(t.catalog.Toolset) {
			continue
		}
		pv.tools = append(pv.tools, vb.listed(t, t.mcp))
		if t.app != nil {
			pv.appTools = append(pv.appTools, vb.listed(t, t.app))
		} else {
			pv.appTools = append(pv.appTools, pv.tools[len(pv.tools)-1])
		}
	}
	sort.Slice(pv.groups, func(i, j int) bool { return pv.groups[i].Name < pv.groups[j].Name })
	if vb.extendable {
		// The edge's own tool for its MCP tasks, in every selection
		// (extendtask.go).
		m := extendTaskTool()
		pv.tools = append(pv.tools, &listedTool{Tool: m})
		pv.appTools = append(pv.appTools, &listedTool{Tool: m})
	}
	if r.dynamic() {
		for _, m := range metaTools(pv.groups) {
			pv.tools = append(pv.tools, &listedTool{Tool: m})
			pv.appTools = append(pv.appTools, &listedTool{Tool: m})
		}
	}
	sort.Slice(pv.tools, func(i, j int) bool { return pv.tools[i].Name < pv.tools[j].Name })
	sort.Slice(pv.appTools, func(i, j int) bool { return pv.appTools[i].Name < pv.appTools[j].Name })
	for _, t := range pv.tools {
		pv.toolNames = append(pv.toolNames, t.Name)
	}
	for _, k := range vb.kinds {
		if k.template != nil && k.visible(p) && k.reached(r) {
			pv.templates = append(pv.templates, k.template)
		}
	}
	sort.Slice(pv.templates, func(i, j int) bool { return pv.templates[i].URITemplate < pv.templates[j].URITemplate })
	for _, t := range pv.templates {
		pv.templateURIs = append(pv.templateURIs, t.URITemplate)
	}
	for _, pr := range vb.prompts { // sorted by name
		if pr.visible(p) && pr.reached(r) {
			pv.prompts = append(pv.prompts, pr.prompt)
			pv.promptNames = append(pv.promptNames, pr.prompt.Name)
		}
	}
	return pv
}

// readOnlyNote prefixes the description of tools that read-only mode
// refuses, so a model does not plan around them.
const readOnlyNote = "Unavailable: this edge runs in read-only mode. "

// mcpTool describes t for tools/list.
func mcpTool(t *toolcatalog.Tool, readOnlyMode bool) *mcp.Tool {
	readOnly := t.Kind == toolv1.Kind_KIND_READ
	destructive := t.Kind == toolv1.Kind_KIND_ADMIN
	desc := t.Description
	if readOnlyMode && !readOnly {
		desc = readOnlyNote + desc
	}
	return &mcp.Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  desc,
		InputSchema:  t.InputSchema,
		OutputSchema: t.OutputSchema,
		Annotations: &mcp.ToolAnnotations{
			Title:           t.Title,
			ReadOnlyHint:    readOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  readOnly,
			OpenWorldHint:   new(bool),
		},
	}
}

// listedTool is a tool as tools/list shows it: with execution.taskSupport
// when its calls may or must become MCP tasks (go-sdk v1.8 has no such
// field).
type listedTool struct {
	*mcp.Tool
	Execution *toolExecution `json:"execution,omitempty"`
}

type toolExecution struct {
	TaskSupport string `json:"taskSupport"`
}

func (vb *viewBuilder) listed(t *tool, m *mcp.Tool) *listedTool {
	l := &listedTool{Tool: m}
	if s := vb.tasks.support(t.catalog); s != "" {
		l.Execution = &toolExecution{TaskSupport: s}
	}
	return l
}

// toolsPage is a tools/list result of listed tools; its tools shadow the
// SDK's.
type toolsPage struct {
	mcp.ListToolsResult
	Tools []*listedTool `json:"tools"`
}

// page returns the items after cursor (the last key of the previous page,
// opaque to clients) and the cursor of the next page; keys are the items'
// sorted keys.
func page[T any](items []T, keys []string, cursor string, size int) ([]T, string, error) {
	start := 0
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(b) == 0 {
			return nil, "", fmt.Errorf("invalid cursor")
		}
		after := string(b)
		start = sort.SearchStrings(keys, after)
		if start < len(keys) && keys[start] == after {
			start++
		}
	}
	end := min(start+size, len(items))
	out := []T{} // never null on the wire
	if start < end {
		out = items[start:end]
	}
	next := ""
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(keys[end-1]))
	}
	return out, next, nil
}

// middleware serves the lists that depend on the caller and its selection,
// keeps the selection of each session it opens, refuses what a request's
// selection leaves out, and refuses the methods of capabilities the edge
// does not declare: they answer "method not found" rather than an empty
// list, so what a client discovers is exactly what is served.
func (d *Door) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if d.undeclared[method] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served by this edge", method)}
		}
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			if err == nil {
				d.instr.withInstructions(ctx, res)
				err = d.resolve.opened(ctx, req)
			}
			return res, err
		case "server/discover":
			res, err := next(ctx, method, req)
			if err == nil {
				d.instr.withInstructions(ctx, res)
			}
			return res, err
		case "notifications/initialized", "logging/setLevel", "notifications/cancelled":
			res, err := next(ctx, method, req)
			if err == nil {
				d.sessionEvent(method, req)
			}
			return res, err
		case "tools/list", "tools/call", "resources/templates/list", "resources/list", "resources/read",
			"resources/subscribe", "prompts/list", "prompts/get", "completion/complete", methodSkillsList, methodSkillsGet:
		default:
			return next(ctx, method, req)
		}
		r, err := d.resolve.reachOf(ctx, req)
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, reachKey{}, r)
		switch method {
		case "tools/list":
			return d.lists.listTools(req, r)
		case "resources/templates/list":
			return d.lists.listTemplates(req, r)
		case "prompts/list":
			return d.lists.listPrompts(req, r)
		case "resources/list":
			return d.res.listResources(ctx, req, r)
		case methodSkillsList, methodSkillsGet:
			return d.skills.serveSkills(method, req, r)
		case "tools/call":
			if err := d.calls.mayCall(r, req.(*mcp.CallToolRequest).Params.Name); err != nil {
				return nil, err
			}
		}
		return next(ctx, method, req)
	}
}

// mayCall refuses a call to a tool r does not reach, and to an unknown
// tool with the names of its would-be toolset's tools.
func (tc *toolFeature) mayCall(r *reach, name string) error {
	if isMeta(name) {
		if !r.dynamic() {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"tool %q is a tool of tool search mode, which this connection's toolset selection %q does not ask for (add %s to it)", name, r.sel.key, keywordDynamic)}
		}
		return nil
	}
	t := tc.tools[name]
	if t == nil {
		if name == metaExtendTask { // the edge's own: the SDK serves it, or refuses it where it is off
			return nil
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: tc.unknownTool(r, name)}
	}
	if !r.has(name) {
		return r.refuse("tool "+name, name, t.catalog.Toolset)
	}
	return nil
}

// unknownTool says that there is no tool name and, when its prefix names
// a toolset, which tools of it r reaches ("tasks_update": the tasks_
// tools), so that a model can pick the right one without listing again.
func (tc *toolFeature) unknownTool(r *reach, name string) string {
	msg := fmt.Sprintf("unknown tool %q", name)
	prefix, _, ok := strings.Cut(name, "_")
	if !ok || prefix == "" {
		return msg
	}
	var near []string
	for n := range tc.tools {
		if strings.HasPrefix(n, prefix+"_") && r.has(n) {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		return msg
	}
	slices.Sort(near)
	return msg + "; the " + prefix + "_ tools are: " + strings.Join(near, ", ")
}

// undeclaredMethods are the methods of the capabilities the edge does not
// declare: resources without resources, prompts without prompts, and
// completion without either.
func undeclaredMethods(resources, prompts bool) map[string]bool {
	m := map[string]bool{}
	if !resources {
		for _, method := range []string{"resources/list", "resources/read", "resources/templates/list", "resources/subscribe", "resources/unsubscribe"} {
			m[method] = true
		}
	}
	if !prompts {
		m["prompts/list"], m["prompts/get"] = true, true
	}
	if !resources && !prompts {
		m["completion/complete"] = true
	}
	return m
}

// listCacheable is how long, and by whom, a list that depends only on the
// caller's permissions may be cached: shared when callers are not told
// apart (development mode), else per caller.
func (l *listFeature) listCacheable(c *mcp.Cacheable) {
	c.TTLMs = int(l.ttl.Milliseconds())
	c.CacheScope = "private"
	if l.public {
		c.CacheScope = "public"
	}
}

// cursor is the cursor of a list request ("" for the first page).
func cursor(req mcp.Request) string {
	switch p := req.GetParams().(type) {
	case *mcp.ListToolsParams:
		if p != nil {
			return p.Cursor
		}
	case *mcp.ListResourceTemplatesParams:
		if p != nil {
			return p.Cursor
		}
	case *mcp.ListPromptsParams:
		if p != nil {
			return p.Cursor
		}
	case *mcp.ListResourcesParams:
		if p != nil {
			return p.Cursor
		}
	}
	return ""
}

// listFor pages one of the lists of the caller's view.
func listFor[T any](l *listFeature, req mcp.Request, r *reach, list func(*view) ([]T, []string)) ([]T, string, error) {
	p, err := l.resolve.caller(req)
	if err != nil {
		return nil, "", err
	}
	items, keys := list(l.views.get(p, r))
	out, next, err := page(items, keys, cursor(req), l.pageSize)
	if err != nil {
		return nil, "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	return out, next, nil
}

func (l *listFeature) listTools(req mcp.Request, r *reach) (mcp.Result, error) {
	ui := declaresUI(req)
	tools, next, err := listFor(l, req, r, func(v *view) ([]*listedTool, []string) {
		if ui {
			return v.appTools, v.toolNames
		}
		return v.tools, v.toolNames
	})
	if err != nil {
		return nil, err
	}
	res := &toolsPage{ListToolsResult: mcp.ListToolsResult{NextCursor: next}, Tools: tools}
	l.listCacheable(&res.Cacheable)
	if r.dynamic() {
		// What tool search mode lists changes as toolsets are enabled, by
		// what each request carries: never from a cache.
		res.TTLMs = 0
	}
	return res, nil
}

func (l *listFeature) listTemplates(req mcp.Request, r *reach) (mcp.Result, error) {
	templates, next, err := listFor(l, req, r, func(v *view) ([]*mcp.ResourceTemplate, []string) { return v.templates, v.templateURIs })
	if err != nil {
		return nil, err
	}
	res := &mcp.ListResourceTemplatesResult{ResourceTemplates: templates, NextCursor: next}
	l.listCacheable(&res.Cacheable)
	return res, nil
}

func (l *listFeature) listPrompts(req mcp.Request, r *reach) (mcp.Result, error) {
	prompts, next, err := listFor(l, req, r, func(v *view) ([]*mcp.Prompt, []string) { return v.prompts, v.promptNames })
	if err != nil {
		return nil, err
	}
	res := &mcp.ListPromptsResult{Prompts: prompts, NextCursor: next}
	l.listCacheable(&res.Cacheable)
	return res, nil
}
