package mcpdoor

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
)

// resolver finds, once per request, who calls and what the call reaches:
// the caller (the verified token's principal, or the local owner) and its
// reach (its selection, its token's claim and, in tool search mode, the
// toolsets enabled). The door's middleware resolves them before the
// request's handler runs; the handlers read the result (of).
type resolver struct {
	// dev is the local owner in development mode and over stdio.
	dev *identity.Principal
	// toolsets parse selections; states are the selections of this
	// process's sessions.
	toolsets *toolsets
	states   *sessionStates
	// now is the clock of the session fast path (sessionfast.go).
	now func() time.Time
}

// request is what a handler of a request that depends on its caller starts
// from: the caller and what it reaches.
type request struct {
	caller *identity.Principal
	reach  *reach
}

// of is the request value of req: its authenticated caller and what it
// reaches, as the middleware found them, or found now for a request of the
// SDK's own making. An unauthenticated request is refused.
func (q *resolver) of(ctx context.Context, req mcp.Request) (*request, error) {
	p, err := q.caller(req)
	if err != nil {
		return nil, err
	}
	r, err := q.reachFor(ctx, req)
	if err != nil {
		return nil, err
	}
	return &request{caller: p, reach: r}, nil
}

// principal is the caller of an MCP request: the verified token's principal
// over HTTP, or the local owner in development mode and over stdio.
func (q *resolver) principal(req mcp.Request) *identity.Principal {
	return q.principalOf(req.GetExtra())
}

// principalOf is the caller a request's extra names.
func (q *resolver) principalOf(x *mcp.RequestExtra) *identity.Principal {
	if x != nil && x.TokenInfo != nil {
		return identity.FromTokenInfo(x.TokenInfo)
	}
	return q.dev
}

// caller is the principal of a list request; an unauthenticated one is
// refused.
func (q *resolver) caller(req mcp.Request) (*identity.Principal, error) {
	p := q.principal(req)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	return p, nil
}

// requestSelection is the selection an HTTP request makes, by path or by
// header (nil when it makes none), and whether its path makes it; a
// request that makes one by both must make the same. It leaves the
// selection's canonical text in the header, where the request's MCP
// handlers read it.
func (q *resolver) requestSelection(r *http.Request) (sel *selection, fromPath bool, err error) {
	if rest, ok := strings.CutPrefix(r.URL.Path, PathToolsets); ok {
		if rest == "" || strings.Contains(rest, "/") {
			return nil, false, &selectionError{msg: fmt.Sprintf("name one toolset after %s, as in %stasks", PathToolsets, PathToolsets)}
		}
		if sel, err = q.toolsets.get(rest); err != nil {
			return nil, false, err
		}
		fromPath = true
	}
	if values := r.Header.Values(HeaderToolsets); len(values) > 0 {
		hs, err := q.toolsets.get(strings.Join(values, ","))
		if err != nil {
			return nil, false, err
		}
		if sel != nil && hs.key != sel.key {
			return nil, false, &selectionError{msg: fmt.Sprintf("the path selects %q and the %s header %q: select by one of them", sel.key, HeaderToolsets, hs.key)}
		}
		sel = hs
	}
	if sel != nil {
		r.Header.Set(HeaderToolsets, sel.key)
	}
	return sel, fromPath, nil
}

// claimOf is the selection p's token claims (nil when it claims none).
func (q *resolver) claimOf(p *identity.Principal) (*selection, error) {
	if p == nil || p.Toolsets == "" {
		return nil, nil
	}
	sel, err := q.toolsets.get(p.Toolsets)
	if err != nil {
		return nil, fmt.Errorf("the token's toolsets claim: %w", err)
	}
	return sel, nil
}

// opened keeps the selection of a session whose initialize succeeded.
func (q *resolver) opened(ctx context.Context, req mcp.Request) error {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss == nil {
		return nil
	}
	sel, err := q.selectionOf(ctx, req.GetExtra())
	if err != nil {
		return err
	}
	st := &sessionState{sel: sel}
	id := ""
	if streamable, _ := ctx.Value(streamableSessionKey{}).(bool); streamable && ss.ID() != "" {
		id = ss.ID()
		st.direct = newDirectSession(ss, req.GetExtra(), q.now)
	}
	s := q.states
	s.mu.Lock()
	s.m[ss] = st
	if id != "" {
		s.byID[id] = st
	}
	s.mu.Unlock()
	go func() {
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.m, ss)
		if id != "" {
			delete(s.byID, id)
		}
		s.mu.Unlock()
	}()
	return nil
}

// selectionOf is the selection a request carries: in its header (checked
// by serveMCP), or found for its HTTP request; else the default.
func (q *resolver) selectionOf(ctx context.Context, x *mcp.RequestExtra) (*selection, error) {
	if x != nil && x.Header.Get(HeaderToolsets) != "" {
		return q.toolsets.get(x.Header.Get(HeaderToolsets))
	}
	if sel, ok := ctx.Value(selectionKey{}).(*selection); ok {
		return sel, nil
	}
	return q.toolsets.fallback, nil
}

// reachFor is what req reaches: as the middleware found it, or found now
// for a request of the SDK's own making.
func (q *resolver) reachFor(ctx context.Context, req mcp.Request) (*reach, error) {
	if r, ok := ctx.Value(reachKey{}).(*reach); ok {
		return r, nil
	}
	return q.reachOf(ctx, req)
}

// reachOf finds what req reaches: its session's selection, or the one its
// header carries; its caller's claim; and in tool search mode the toolsets
// its session enabled and those its _meta says it enabled.
func (q *resolver) reachOf(ctx context.Context, req mcp.Request) (*reach, error) {
	r := &reach{}
	var err error
	if r.claim, err = q.claimOf(q.principal(req)); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	st := q.states.get(ss)
	if st == nil {
		if r.sel, err = q.selectionOf(ctx, req.GetExtra()); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
		}
	} else {
		r.sel = st.sel
		if x := req.GetExtra(); x != nil && x.Header.Get(HeaderToolsets) != "" && x.Header.Get(HeaderToolsets) != st.sel.key {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(
				"this session was opened with the toolset selection %q and keeps it; start a new session to select %q", st.sel.key, x.Header.Get(HeaderToolsets))}
		}
	}
	if !r.dynamic() {
		return r, nil
	}
	enabled := map[string]bool{}
	if st != nil {
		st.mu.Lock()
		for _, name := range st.enabled {
			enabled[name] = true
		}
		st.mu.Unlock()
	}
	names, err := metaToolsets(req)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	var unknown []string
	for _, name := range names {
		if q.toolsets.byName[name] == nil {
			unknown = append(unknown, name)
		}
		enabled[name] = true
	}
	if len(unknown) > 0 {
		e := q.toolsets.unknownError(unknown, nil)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "_meta " + MetaToolsets + ": " + e.msg}
	}
	r.enabled = slices.Sorted(mapKeys(enabled))
	return r, nil
}
