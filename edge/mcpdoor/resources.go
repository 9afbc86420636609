package mcpdoor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// Resources are read-only views of the mesh: a READ tool whose contract
// carries a resource option (a URI template such as
// "toolmesh://tasks/{task_id}") is also served as a resource. Reading a URI
// calls that tool, as the reader, through the same path as tools/call, so a
// reader sees exactly what the tool would show it: the same identity,
// grants, rate limit and errors. The contents are the tool's data as JSON,
// or the content blocks it answers (content.go).
// resources/list pages through the items of each template's list tool
// (the caller's tasks, memories, asks, ...), plus the fixed resources.

// mimeJSON is the MIME type of every resource's contents.
const mimeJSON = "application/json"

// resourcesPageSize is the page size of resources/list; it is the default
// page of every list tool, within each one's bounds.
const resourcesPageSize = 50

// resourceKind is one resource template, or one fixed resource, of the
// edge.
type resourceKind struct {
	*toolcatalog.Resource
	get  *tool // reads a resource
	list *tool // lists the resources; nil for a fixed resource
	// template describes a templated kind, fixed a fixed resource; exactly
	// one is set.
	template *mcp.ResourceTemplate
	fixed    *mcp.Resource
	// readField is the one field of the read tool's data, holding an item
	// of the list ("task"); "" when the data is more than that.
	readField string
}

// asRead is a listed item as reading its resource shows it.
func (k *resourceKind) asRead(raw json.RawMessage) json.RawMessage {
	if k.readField == "" {
		return raw
	}
	b, err := json.Marshal(map[string]json.RawMessage{k.readField: raw})
	if err != nil {
		return raw
	}
	return b
}

// visible reports whether p may read, and list, resources of k.
func (k *resourceKind) visible(p *identity.Principal) bool {
	if ok, _ := p.MayCall(k.get.catalog); !ok {
		return false
	}
	if k.list == nil {
		return true
	}
	ok, _ := p.MayCall(k.list.catalog)
	return ok
}

// reached reports whether r reaches k: the tools that read and list it.
func (k *resourceKind) reached(r *reach) bool {
	return r.has(k.get.catalog.Name) && (k.list == nil || r.has(k.list.catalog.Name))
}

// refuse is the error of a request for a resource of k that r does not
// reach.
func (k *resourceKind) refuse(r *reach, uri string) error {
	t := k.get.catalog
	if !r.has(t.Name) || k.list == nil {
		return r.refuse("resource "+uri, t.Name, t.Toolset)
	}
	return r.refuse("resource "+uri, k.list.catalog.Name, k.list.catalog.Toolset)
}

// listable reports whether resources/list shows k to p: it may see k, and
// the services behind k are configured.
func (k *resourceKind) listable(p *identity.Principal) bool {
	return k.visible(p) && k.get.Binding().HasBackend() && (k.list == nil || k.list.Binding().HasBackend())
}

// resourceFeature serves the resources: a resource kind of each resource
// tool, read and listed through its tools as the caller, and subscribed
// to.
type resourceFeature struct {
	kinds   []*resourceKind
	calls   *toolFeature
	resolve *resolver
	// apps are the MCP Apps views, which resources/list shows too.
	apps *appFeature
	subs *subscriptions
	// ttl is how long a client may cache what it read.
	ttl time.Duration
}

// buildResources makes a resource kind of each resource tool.
func buildResources(sorted []*tool, tools map[string]*tool) []*resourceKind {
	var kinds []*resourceKind
	for _, dt := range sorted {
		t := dt.catalog
		r := t.Resource
		if r == nil {
			continue
		}
		k := &resourceKind{Resource: r, get: dt}
		mime := mimeJSON
		if t.ContentField != nil {
			// Its content blocks say what they are when they are read.
			mime = ""
		}
		if r.List == nil {
			k.fixed = &mcp.Resource{URI: r.URITemplate(), Name: t.Name, Title: r.Title, Description: t.Description, MIMEType: mime}
		} else {
			k.list = tools[r.List.Name]
			// A read that answers just the item ({"task": {...}}) shows a
			// listed item as {"task": item}.
			if out := t.Method.Output().Fields(); out.Len() == 1 {
				if f := out.Get(0); f.Message() != nil && !f.IsList() && f.Message().FullName() == r.Items.Message().FullName() {
					k.readField = string(f.Name())
				}
			}
			k.template = &mcp.ResourceTemplate{URITemplate: r.URITemplate(), Name: t.Name, Title: r.Title, Description: t.Description, MIMEType: mime}
		}
		kinds = append(kinds, k)
	}
	return kinds
}

// kindOf returns the resource kind whose template uri matches, and the
// value of its variable.
func (rs *resourceFeature) kindOf(uri string) (*resourceKind, string, bool) {
	for _, k := range rs.kinds {
		if v, ok := k.Match(uri); ok {
			return k, v, true
		}
	}
	return nil, "", false
}

func (rs *resourceFeature) readHandler(k *resourceKind) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		rq, err := rs.resolve.of(ctx, req)
		if err != nil {
			return nil, err
		}
		p, r := rq.caller, rq.reach
		if !k.reached(r) {
			return nil, k.refuse(r, req.Params.URI)
		}
		env, err := rs.read(ctx, k, p, req.Extra, req.Params.URI)
		if err != nil {
			return nil, err
		}
		if env.IsError() {
			return nil, envelopeError(env)
		}
		return &mcp.ReadResourceResult{Contents: resourceContents(k.get.catalog, req.Params.URI, env)}, nil
	}
}

// resourceContents are what reading uri shows: the content blocks its tool
// answered, or, when it answered none, its data.
func resourceContents(t *toolcatalog.Tool, uri string, env *toolcall.Envelope) []*mcp.ResourceContents {
	blocks, env := blocksOf(t, env)
	var out []*mcp.ResourceContents
	for _, b := range blocks {
		if c := readContents(uri, b); c != nil {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = append(out, contents(uri, env.Data))
	}
	return out
}

// contents are a resource's contents: data, compacted, so that the same
// data always reads the same.
func contents(uri string, data json.RawMessage) *mcp.ResourceContents {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		b.Reset()
		b.Write(data)
	}
	return &mcp.ResourceContents{URI: uri, MIMEType: mimeJSON, Text: b.String()}
}

// read reads uri, a resource of kind k, as p: the envelope its tool
// answered.
func (rs *resourceFeature) read(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, uri string) (*toolcall.Envelope, error) {
	args := map[string]any{}
	if k.Variable != "" {
		v, ok := k.Match(uri)
		if !ok {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		args[k.Variable] = v
	}
	return rs.calls.callAs(ctx, k.get, p, extra, args), nil
}

// envelopeError is the JSON-RPC error of a resource read, prompt or
// completion whose tool call failed: the envelope is its data, so the
// caller learns exactly what the tool would have said. not_found and
// invalid_argument are the client's to fix (invalid params, as MCP answers
// an unknown resource); anything else is an internal error.
func envelopeError(env *toolcall.Envelope) error {
	code := int64(jsonrpc.CodeInternalError)
	switch env.DomainCode {
	case toolcall.CodeNotFound, toolcall.CodeInvalidArgument:
		code = jsonrpc.CodeInvalidParams
	}
	data, err := json.Marshal(env)
	if err != nil {
		data = nil
	}
	return &jsonrpc.Error{Code: code, Message: env.DomainCode + ": " + env.Message, Data: data}
}

// item is one resource a list tool listed: its id, its title and the item
// as the list tool answered it.
type item struct {
	id, title string
	raw       json.RawMessage
}

// listItems lists the items of k as p, one page of at most limit from
// offset, with args added to the list tool's arguments. next is the offset
// of the next page, or -1 after the last.
func (rs *resourceFeature) listItems(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, args map[string]any, offset, limit int32) (items []item, next int32, env *toolcall.Envelope) {
	all := map[string]any{"offset": offset, "limit": limit}
	for name, v := range args {
		all[name] = v
	}
	env = rs.calls.callAs(ctx, k.list, p, extra, all)
	if env.IsError() {
		return nil, -1, env
	}
	unreadable := toolcall.Fail(k.list.catalog.Name, toolcall.CodeInternal, "the list tool answered data the edge cannot read")
	var data map[string]json.RawMessage
	var rows []json.RawMessage
	if json.Unmarshal(env.Data, &data) != nil || json.Unmarshal(orNull(data[string(k.Items.Name())]), &rows) != nil {
		return nil, -1, unreadable
	}
	for _, raw := range rows {
		var row map[string]any
		if json.Unmarshal(raw, &row) != nil {
			return nil, -1, unreadable
		}
		id, _ := row[string(k.ItemID.Name())].(string)
		if id == "" {
			continue
		}
		it := item{id: id, raw: raw}
		if k.ItemTitle != nil {
			it.title, _ = row[string(k.ItemTitle.Name())].(string)
		}
		items = append(items, it)
	}
	next = -1
	if pg := env.Pagination; pg != nil && pg.NextOffset != nil && len(rows) > 0 {
		next = *pg.NextOffset
	}
	return items, next, nil
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// resource is how resources/list shows an item of k.
func (k *resourceKind) resource(it item) *mcp.Resource {
	title := oneLine(it.title, 120)
	if title == "" {
		title = k.Title + " " + it.id
	}
	return &mcp.Resource{URI: k.URI(it.id), Name: it.id, Title: title, MIMEType: k.template.MIMEType}
}

// oneLine shortens s to one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return httpguard.Truncate(s, n)
}

// resourceCursor is where the next page of resources/list starts: the kind,
// by its tool, and the offset in its list.
type resourceCursor struct {
	Tool   string `json:"t"`
	Offset int32  `json:"o,omitempty"`
}

// listResources pages through the resources the caller may read: each
// listable kind in turn, fixed resources as themselves, templated ones as
// the items of their list tool, called as the caller.
func (rs *resourceFeature) listResources(ctx context.Context, req mcp.Request, r *reach) (mcp.Result, error) {
	p, err := rs.resolve.caller(req)
	if err != nil {
		return nil, err
	}
	var kinds []*resourceKind
	for _, k := range rs.kinds {
		if k.listable(p) && k.reached(r) {
			kinds = append(kinds, k)
		}
	}
	pos, offset := 0, int32(0)
	if c := cursor(req); c != "" {
		var rc resourceCursor
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err == nil {
			err = json.Unmarshal(b, &rc)
		}
		for pos = 0; err == nil && pos < len(kinds) && kinds[pos].get.catalog.Name != rc.Tool; pos++ {
		}
		if err != nil || pos == len(kinds) || rc.Offset < 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor"}
		}
		offset = rc.Offset
	}
	extra := req.GetExtra()
	out := []*mcp.Resource{}
	if cursor(req) == "" && declaresUI(req) {
		// The views of the tools the caller may call begin the first page.
		out = append(out, rs.apps.appsVisible(p, r)...)
	}
	for pos < len(kinds) && len(out) < resourcesPageSize {
		k := kinds[pos]
		if k.list == nil {
			out = append(out, k.fixed)
			pos, offset = pos+1, 0
			continue
		}
		items, next, env := rs.listItems(ctx, k, p, extra, nil, offset, int32(resourcesPageSize-len(out)))
		if env != nil {
			return nil, envelopeError(env)
		}
		for _, it := range items {
			out = append(out, k.resource(it))
		}
		if next < 0 {
			pos, offset = pos+1, 0
		} else {
			offset = next
		}
	}
	res := &mcp.ListResourcesResult{Resources: out}
	if pos < len(kinds) {
		b, err := json.Marshal(resourceCursor{Tool: kinds[pos].get.catalog.Name, Offset: offset})
		if err != nil {
			return nil, fmt.Errorf("encode cursor: %w", err)
		}
		res.NextCursor = base64.RawURLEncoding.EncodeToString(b)
	}
	rs.resourceCacheable(&res.Cacheable)
	return res, nil
}

// resourceCacheable is how long a client may cache what it read or listed
// of the mesh's live state, for its caller only.
func (rs *resourceFeature) resourceCacheable(c *mcp.Cacheable) {
	c.TTLMs = int(rs.ttl.Milliseconds())
	c.CacheScope = "private"
}
