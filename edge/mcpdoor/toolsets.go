package mcpdoor

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// Toolsets: a client selects the groups of tools it wants (toolcatalog
// Toolset: a domain, unless the contracts say otherwise) instead of every
// tool its grants allow, so that a model's context holds the tools of the
// conversation and no more (docs/toolsets.md). One grammar, wherever a
// selection comes from: a comma-separated list of
//
//	all, default         every toolset; the toolsets the contracts mark default
//	<toolset>            a toolset ("tasks")
//	<tool>               one tool ("credits_balance"; tool names have a "_")
//	-<toolset>, -<tool>  leave it out ("all,-github", "default,-owner_answer")
//	dynamic              tool search mode (discover.go)
//
// A selection without any item to include starts from all. It comes from
// the URL path (/mcp/x/<selection>), the Toolmesh-Toolsets header, or —
// when a client makes none — the edge's default (Config.Toolsets, which is
// also the selection over stdio). A token's toolsets claim narrows it
// further, and the caller's grants further still: a selection never widens
// what the caller may call. Tools outside it are not listed and a call to
// one is refused like a call to an unknown tool, saying why; resources and
// prompts follow the tools they read through. A 2025-era session keeps the
// selection it was opened with (it lives on one replica, sessions.go); a
// stateless request carries its own. Parsed selections are cached by their
// text, and the lists of each selection are built once (list.go).

// Where selections come from.
const (
	// HeaderToolsets selects toolsets for one request, or for the session
	// its initialize opens.
	HeaderToolsets = "Toolmesh-Toolsets"
	// PathToolsets is the path a selection follows: /mcp/x/tasks.
	PathToolsets = "/mcp/x/"
	// MetaToolsets is the request _meta key that carries, in the stateless
	// era, the toolsets a client enabled in tool search mode.
	MetaToolsets = "dev.toolmesh/toolsets"
)

// The keywords of a selection; no toolset may be named like one.
const (
	keywordAll     = "all"
	keywordDefault = "default"
	keywordDynamic = "dynamic"
)

// maxSelectionLen bounds a selection's text; maxSelections bounds the
// parsed selections kept (past it, selections are parsed per request).
const (
	maxSelectionLen = 2048
	maxSelections   = 1024
)

// selection is a parsed selection: the tools it selects, by name, and
// whether it asks for tool search mode.
type selection struct {
	// key is its canonical text: the same for two selections with the
	// same items.
	key     string
	tools   map[string]bool
	dynamic bool
}

// toolsets are the toolsets of the door's tools and the selections parsed
// so far.
type toolsets struct {
	list   []*toolcatalog.Toolset
	byName map[string]*toolcatalog.Toolset
	tools  map[string]*tool
	// names lists the toolsets for error messages.
	names string
	// fallback is the selection of a client that makes none.
	fallback *selection

	mu     sync.Mutex
	parsed map[string]*selection
}

func newToolsets(list []*toolcatalog.Toolset, tools map[string]*tool, fallback string) (*toolsets, error) {
	ts := &toolsets{list: list, byName: map[string]*toolcatalog.Toolset{}, tools: tools, parsed: map[string]*selection{}}
	var names []string
	for _, s := range list {
		switch s.Name {
		case keywordAll, keywordDefault, keywordDynamic:
			return nil, fmt.Errorf("edge: toolset %q is named like a selection keyword; rename it in its service's toolset option", s.Name)
		}
		ts.byName[s.Name] = s
		names = append(names, s.Name)
	}
	ts.names = strings.Join(names, ", ")
	var err error
	if ts.fallback, err = ts.parse(fallback); err != nil {
		return nil, fmt.Errorf("edge: toolsets %q: %w", fallback, err)
	}
	return ts, nil
}

// selectionError is a selection that names what does not exist or selects
// nothing; unknown are the names it did not know.
type selectionError struct {
	msg     string
	unknown []string
}

func (e *selectionError) Error() string { return e.msg }

// data is what a client learns with the error: the names it got wrong and
// the ones it can use.
func (e *selectionError) data(ts *toolsets) map[string]any {
	names := make([]string, 0, len(ts.list))
	for _, s := range ts.list {
		names = append(names, s.Name)
	}
	return map[string]any{"unknown": e.unknown, "toolsets": names, "keywords": []string{keywordAll, keywordDefault, keywordDynamic}}
}

// get parses s, or returns it parsed already.
func (ts *toolsets) get(s string) (*selection, error) {
	ts.mu.Lock()
	sel, ok := ts.parsed[s]
	ts.mu.Unlock()
	if ok {
		return sel, nil
	}
	sel, err := ts.parse(s)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	if len(ts.parsed) < maxSelections {
		ts.parsed[s] = sel
	}
	ts.mu.Unlock()
	return sel, nil
}

// parse reads a selection (see the grammar above).
func (ts *toolsets) parse(s string) (*selection, error) {
	if len(s) > maxSelectionLen {
		return nil, &selectionError{msg: fmt.Sprintf("the toolset selection is longer than %d bytes", maxSelectionLen)}
	}
	sel := &selection{tools: map[string]bool{}}
	in, out := map[string]bool{}, map[string]bool{}
	var unknown, unknownTools []string
	for _, raw := range strings.Split(s, ",") {
		item := strings.TrimSpace(raw)
		name, exclude := strings.CutPrefix(item, "-")
		switch {
		case name == "":
			return nil, &selectionError{msg: fmt.Sprintf("the toolset selection %q has an empty item", s)}
		case name == keywordDynamic && exclude:
			return nil, &selectionError{msg: "-dynamic leaves nothing out: omit dynamic instead"}
		case name == keywordDynamic:
			sel.dynamic = true
			continue
		case name == keywordAll || name == keywordDefault || ts.byName[name] != nil:
		case strings.Contains(name, "_"):
			if ts.tools[name] == nil {
				unknownTools = append(unknownTools, name)
				continue
			}
		default:
			unknown = append(unknown, name)
			continue
		}
		if exclude {
			out[name] = true
		} else {
			in[name] = true
		}
	}
	if len(unknown) > 0 || len(unknownTools) > 0 {
		return nil, ts.unknownError(unknown, unknownTools)
	}
	if len(in) == 0 {
		in[keywordAll] = true
	}
	for name := range in {
		for _, t := range ts.expand(name) {
			sel.tools[t] = true
		}
	}
	for name := range out {
		for _, t := range ts.expand(name) {
			delete(sel.tools, t)
		}
	}
	if len(sel.tools) == 0 {
		return nil, &selectionError{msg: fmt.Sprintf("the toolset selection %q selects no tool", s)}
	}
	items := slices.Sorted(mapKeys(in))
	for _, name := range slices.Sorted(mapKeys(out)) {
		items = append(items, "-"+name)
	}
	if sel.dynamic {
		items = append([]string{keywordDynamic}, items...)
	}
	sel.key = strings.Join(items, ",")
	return sel, nil
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// unknownError names what a selection got wrong and what it can name.
func (ts *toolsets) unknownError(unknown, unknownTools []string) *selectionError {
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("unknown toolset %s", quoteAll(unknown)))
	}
	if len(unknownTools) > 0 {
		parts = append(parts, fmt.Sprintf("unknown tool %s", quoteAll(unknownTools)))
	}
	return &selectionError{
		msg: strings.Join(parts, " and ") + "; the toolsets are " + ts.names +
			`, the keywords all, default and dynamic; a tool is named by its name, and "-" before a name leaves it out`,
		unknown: append(unknown, unknownTools...),
	}
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// expand is the tools a selection item names.
func (ts *toolsets) expand(name string) []string {
	var out []string
	switch {
	case name == keywordAll:
		for n := range ts.tools {
			out = append(out, n)
		}
	case name == keywordDefault:
		for _, s := range ts.list {
			if s.Default {
				for _, t := range s.Tools {
					out = append(out, t.Name)
				}
			}
		}
	case ts.byName[name] != nil:
		for _, t := range ts.byName[name].Tools {
			out = append(out, t.Name)
		}
	default:
		out = append(out, name)
	}
	return out
}

// reach is what one request reaches: the tools of its selection, narrowed
// by its caller's toolsets claim, and — in tool search mode — the toolsets
// it has enabled, whose tools tools/list shows.
type reach struct {
	sel   *selection
	claim *selection // nil: the token has no claim
	// enabled are the toolsets enabled in tool search mode, sorted.
	enabled []string
}

// dynamic reports whether the request is in tool search mode: its
// selection, or its caller's claim, asks for it.
func (r *reach) dynamic() bool { return r.sel.dynamic || r.claim != nil && r.claim.dynamic }

// has reports whether the request reaches the tool named name.
func (r *reach) has(name string) bool {
	return r.sel.tools[name] && (r.claim == nil || r.claim.tools[name])
}

// isEnabled reports whether tool search mode lists the tools of toolset.
func (r *reach) isEnabled(toolset string) bool {
	_, ok := slices.BinarySearch(r.enabled, toolset)
	return ok
}

// key names what the request reaches, for the cache of views.
func (r *reach) key() string {
	k := r.sel.key
	if r.claim != nil {
		k += "|" + r.claim.key
	}
	if r.dynamic() {
		k += "|+" + strings.Join(r.enabled, ",")
	}
	return k
}

// outside says why a request may not use what (a tool, a resource, a
// prompt) reading through tool, of toolset: its selection, or its caller's
// claim, leaves it out; and how to reach it.
func (r *reach) outside(what, tool, toolset string) string {
	why := fmt.Sprintf("%s is outside this connection's toolset selection %q", what, r.sel.key)
	if r.sel.tools[tool] {
		return fmt.Sprintf("%s is outside the toolsets the caller's token allows (%q): it belongs to toolset %q", what, r.claim.key, toolset)
	}
	return fmt.Sprintf("%s: it belongs to toolset %q; select that toolset (the %s header, the %s<toolset> path or --toolsets) to use it", why, toolset, HeaderToolsets, PathToolsets)
}

// refuse is the JSON-RPC error of a request for something outside its
// reach (see outside).
func (r *reach) refuse(what, tool, toolset string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: r.outside(what, tool, toolset)}
}

// sessionState is what a 2025-era session (or the stdio session) keeps of
// its selection: the selection it was opened with and, in tool search mode,
// the toolsets enabled since.
type sessionState struct {
	sel *selection
	// direct is what the session fast path needs (sessionfast.go); nil for
	// a session it does not serve (stdio).
	direct *directSession

	mu      sync.Mutex
	enabled []string // sorted
}

// sessionStates are the states of this process's sessions; a session's
// goes when it ends.
type sessionStates struct {
	mu sync.Mutex
	m  map[*mcp.ServerSession]*sessionState
	// byID are the states of the Streamable HTTP sessions, by session id.
	byID map[string]*sessionState
}

// byIDOf is the state of this process's Streamable HTTP session id (nil:
// none).
func (s *sessionStates) byIDOf(id string) *sessionState {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

func (s *sessionStates) get(ss *mcp.ServerSession) *sessionState {
	if ss == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[ss]
}

// selectionKey carries the selection serveMCP found to the handlers of a
// request the SDK makes itself (a subscriptions/listen stream subscribes
// with one), which carries no header.
type selectionKey struct{}

// reachKey carries a request's reach from the middleware to its handler.
type reachKey struct{}

// metaToolsets are the toolsets a request's _meta says its client enabled.
func metaToolsets(req mcp.Request) ([]string, error) {
	p := req.GetParams()
	if p == nil || reflect.ValueOf(p).IsNil() {
		return nil, nil
	}
	v, ok := p.GetMeta()[MetaToolsets]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("_meta %s must be a list of toolset names", MetaToolsets)
	}
	names := make([]string, 0, len(list))
	for _, x := range list {
		name, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("_meta %s must be a list of toolset names", MetaToolsets)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}
