package edge

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// How deep a call is. A call an MCP client makes runs at depth 0, unless
// the client says it makes the call on behalf of an item it received — a
// message — by naming it in the request's _meta,
//
//	"_meta": {"dev.toolmesh/onBehalfOf": "msg_01hzy3d5q8w9x7v6t5s4r3p2n1"}
//
// and the call runs at that item's depth (for a message: the depth of its
// sender's call plus one, or, for one that came over A2A, the depth its
// sending mesh signed). So an agent that answers a message, or acts on it
// by sending or invoking further, does so one level deeper than whoever
// asked, and the tools that refuse from depth 3 on stop loops of agents.
//
// Which tool reads such items, and where their recipient and depth are,
// is the contract's (toolmesh.tool.v1 OnBehalfOf): the edge calls that
// tool, as the caller, and the item must be one the caller received.

// depthLookup reads the items calls are made on behalf of.
type depthLookup struct {
	*toolcatalog.OnBehalfOf
	b *binding
}

// newDepthLookup is the registry's depth lookup; nil when the contracts
// have no tool reading such items, or its service is not configured.
func newDepthLookup(reg *toolcatalog.Registry, bindings map[string]*binding) *depthLookup {
	ob := reg.OnBehalfOf()
	if ob == nil || !bindings[ob.Tool.Name].call.HasBackend() {
		return nil
	}
	return &depthLookup{OnBehalfOf: ob, b: bindings[ob.Tool.Name]}
}

var itemJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// depthOf returns the depth a call of tool by caller runs at, as its
// request's _meta says; an envelope when the _meta names no item the caller
// received.
func (p *pipeline) depthOf(ctx context.Context, tool string, caller *identity.Principal, meta map[string]any) (int, *toolcall.Envelope) {
	v, ok := meta[MetaOnBehalfOf]
	if !ok {
		return 0, nil
	}
	field := "_meta." + MetaOnBehalfOf
	d := p.depth
	if d == nil {
		return 0, toolcall.Fail(tool, toolcall.CodeNotSupported, "this edge has no service to look up "+field)
	}
	refuse := func(msg string) (int, *toolcall.Envelope) {
		vs := []boundary.Violation{{Field: field, Rule: d.IDField, Message: msg}}
		boundary.LogRejection(ctx, p.log, boundary.MCPTool, vs)
		return 0, toolcall.Invalid(tool, vs)
	}
	id, isString := v.(string)
	malformed := fmt.Sprintf("must be the id of a %s you received, e.g. %q", d.Noun, d.IDExample)
	if !isString {
		return refuse(malformed)
	}
	args, err := json.Marshal(map[string]string{d.IDField: id})
	if err != nil || len(d.b.call.Violations(args)) > 0 {
		return refuse(malformed)
	}
	msg, vs := d.b.call.Decode(ctx, args)
	if vs != nil {
		return refuse(malformed)
	}
	env := p.invoke(ctx, d.b, msg, mesh.Call{Caller: caller.Caller()}, nil)
	if env.DomainCode == toolcall.CodeNotFound {
		return refuse(fmt.Sprintf("no %s %s was sent to you", d.Noun, id))
	}
	if env.IsError() {
		out := *env
		out.Tool, out.Message = tool, "look up "+field+": "+env.Message
		return 0, &out
	}
	res := dynamicpb.NewMessage(d.Tool.Method.Output())
	if err := itemJSON.Unmarshal(env.Data, res); err != nil {
		return 0, toolcall.Unexpected(ctx, p.log, tool, fmt.Errorf("read the %s: %w", d.Noun, err))
	}
	item := res.Get(d.Item).Message()
	if item.Get(d.Recipient).String() != caller.Agent {
		return refuse(fmt.Sprintf("no %s %s was sent to you", d.Noun, id))
	}
	return int(item.Get(d.Depth).Int()), nil
}
