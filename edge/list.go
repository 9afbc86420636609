package edge

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolView is the sorted list of tools one set of permissions may call,
// built once per set and shared by every caller who has it, so tools/list
// does no work proportional to the number of tools.
type toolView struct {
	tools []*mcp.Tool // sorted by name
	names []string
}

// maxViews bounds the cached views (one per distinct set of permissions);
// past it, views are built per request.
const maxViews = 1024

type views struct {
	e  *Edge
	mu sync.Mutex
	m  map[string]*toolView
}

func (v *views) forPrincipal(p *Principal) *toolView {
	v.mu.Lock()
	tv, ok := v.m[p.key]
	v.mu.Unlock()
	if ok {
		return tv
	}
	tv = &toolView{}
	for _, t := range v.e.reg.Tools() {
		if ok, _ := p.mayCall(t); ok {
			tv.tools = append(tv.tools, v.e.bindings[t.Name].mcpTool)
			tv.names = append(tv.names, t.Name)
		}
	}
	v.mu.Lock()
	if len(v.m) < maxViews {
		v.m[p.key] = tv
	}
	v.mu.Unlock()
	return tv
}

// page returns the tools after cursor (the last name of the previous page,
// opaque to clients) and the cursor of the next page.
func (tv *toolView) page(cursor string, size int) ([]*mcp.Tool, string, error) {
	start := 0
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(b) == 0 {
			return nil, "", fmt.Errorf("invalid cursor")
		}
		after := string(b)
		start = sort.SearchStrings(tv.names, after)
		if start < len(tv.names) && tv.names[start] == after {
			start++
		}
	}
	end := min(start+size, len(tv.tools))
	page := []*mcp.Tool{} // never null on the wire
	if start < end {
		page = tv.tools[start:end]
	}
	next := ""
	if end < len(tv.tools) {
		next = base64.RawURLEncoding.EncodeToString([]byte(tv.names[end-1]))
	}
	return page, next, nil
}

// undeclared are methods of capabilities the edge does not declare: they
// answer "method not found" rather than an empty list, so what a client
// discovers is exactly what is served.
var undeclared = map[string]bool{
	"prompts/list":             true,
	"prompts/get":              true,
	"resources/list":           true,
	"resources/read":           true,
	"resources/templates/list": true,
	"resources/subscribe":      true,
	"resources/unsubscribe":    true,
	"completion/complete":      true,
}

// middleware serves tools/list per caller and refuses undeclared methods.
func (e *Edge) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch {
		case method == "tools/list":
			return e.listTools(req)
		case undeclared[method]:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served by this edge", method)}
		}
		return next(ctx, method, req)
	}
}

func (e *Edge) listTools(req mcp.Request) (mcp.Result, error) {
	p := e.principal(req)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	cursor := ""
	if params, ok := req.GetParams().(*mcp.ListToolsParams); ok && params != nil {
		cursor = params.Cursor
	}
	tools, next, err := e.views.forPrincipal(p).page(cursor, e.cfg.ToolsPageSize)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	res := &mcp.ListToolsResult{Tools: tools, NextCursor: next}
	res.TTLMs = int(e.cfg.ListTTL.Milliseconds())
	// The list depends on who asks whenever callers are told apart.
	res.CacheScope = "private"
	if e.dev != nil {
		res.CacheScope = "public"
	}
	return res, nil
}
