package mcpdoor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The server's instructions are what a client shows its model at the start
// of a session — often all it reads before it picks a tool (clients that
// defer tool definitions read only tool names and these). They say what
// the mesh is, every toolset with what it is for (its service's comment:
// the contracts, never a domain named here) and how to reach the others,
// what the endpoint lists, and how results, long-running calls, tasks and
// questions to the user work.
//
// They depend on the selection of the endpoint's path (/mcp/x/<toolset>)
// or, without one, the edge's default selection — never on a selection
// made by header: server/discover's answer is cached for the URL it was
// read from (cacheScope public), and a header is not part of it.

// MaxInstructions bounds the instructions of any selection, in bytes: a
// client puts them in every session's context.
const MaxInstructions = 4096

// maxToolsetLine bounds the description of one toolset in them.
const maxToolsetLine = 160

// pathSelectionKey carries the selection of a request's path (nil: none)
// from serveMCP to the handlers of initialize and server/discover.
type pathSelectionKey struct{}

// instructionsFeature composes the instructions of each selection, once.
type instructionsFeature struct {
	toolsets *toolsets
	sorted   []*tool
	cache    instructionsCache
}

// instructionsCache holds the instructions per selection key.
type instructionsCache struct {
	mu sync.Mutex
	m  map[string]string
}

// instructionsFor are the instructions of the selection a request's path
// makes, or the edge's default selection.
func (in *instructionsFeature) instructionsFor(ctx context.Context) string {
	sel, _ := ctx.Value(pathSelectionKey{}).(*selection)
	if sel == nil {
		sel = in.toolsets.fallback
	}
	return in.instructions(sel)
}

// instructions are sel's instructions, composed once per selection.
func (in *instructionsFeature) instructions(sel *selection) string {
	c := &in.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[sel.key]; ok {
		return s
	}
	if c.m == nil {
		c.m = map[string]string{}
	}
	s := in.composeInstructions(sel)
	if len(c.m) < maxSelections {
		c.m[sel.key] = s
	}
	return s
}

func (in *instructionsFeature) composeInstructions(sel *selection) string {
	var b strings.Builder
	b.WriteString("toolmesh serves agent-platform services as MCP tools, grouped in toolsets; each tool calls one service as you, with your grants. ")
	b.WriteString(`Every result is a JSON envelope: {"status":"ok","data":...} or {"status":"error","domain_code":...,"message":...}; ` +
		"on invalid_argument, fix the named fields and call again; admin tools need confirm: true and a reason.\n\n")
	var listed []string
	for _, ts := range in.toolsets.list {
		if in.toolsets.selects(sel, ts.Name) {
			listed = append(listed, ts.Name)
		}
	}
	switch {
	case sel.dynamic:
		b.WriteString("This endpoint is in tool search mode: find a tool with tools_search, call it with tools_call, or list a toolset's tools with toolsets_enable.")
	case len(listed) == len(in.toolsets.list):
		b.WriteString("This endpoint lists every toolset's tools.")
	default:
		fmt.Fprintf(&b, "This endpoint lists the tools of: %s.", strings.Join(listed, ", "))
	}
	fmt.Fprintf(&b, " Select toolsets at %s<toolset> or with the %s header (toolset names, default, all, or dynamic for tool search). Toolsets:\n", PathToolsets, HeaderToolsets)
	for _, ts := range in.toolsets.list {
		fmt.Fprintf(&b, "- %s: %s\n", ts.Name, clip(ts.Description, maxToolsetLine))
	}
	if in.anyLongRunning() {
		b.WriteString("\nLong-running tools say so in their description: they wait a short while, then answer with a handle to poll with the tool it names; " +
			"a client that declares the MCP Tasks extension gets a task instead. ")
	} else {
		b.WriteString("\n")
	}
	b.WriteString("A call that lacks an answer only the user can give (a field the tool may ask for, an admin confirmation) asks the user when the client supports elicitation; otherwise it says what is missing.")
	return b.String()
}

// selects reports whether sel lists any tool of the toolset named name.
func (ts *toolsets) selects(sel *selection, name string) bool {
	set := ts.byName[name]
	for _, t := range set.Tools {
		if sel.tools[t.Name] {
			return true
		}
	}
	return false
}

// anyLongRunning reports whether any tool is long-running.
func (in *instructionsFeature) anyLongRunning() bool {
	for _, t := range in.sorted {
		if t.catalog.LongRunning {
			return true
		}
	}
	return false
}

// withInstructions sets the instructions of an initialize or server/discover
// result to those of the request's path selection.
func (in *instructionsFeature) withInstructions(ctx context.Context, res mcp.Result) {
	switch r := res.(type) {
	case *mcp.InitializeResult:
		r.Instructions = in.instructionsFor(ctx)
	case *mcp.DiscoverResult:
		r.Instructions = in.instructionsFor(ctx)
	}
}

// Instructions are the instructions a client of the selection sel (path
// or default: "" is the edge's default) reads; for tests and the docs.
func (d *Door) Instructions(sel string) (string, error) {
	if sel == "" {
		return d.instr.instructions(d.toolsets.fallback), nil
	}
	s, err := d.toolsets.get(sel)
	if err != nil {
		return "", err
	}
	return d.instr.instructions(s), nil
}
