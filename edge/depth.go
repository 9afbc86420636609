package edge

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
)

// How deep a call is. A call an MCP client makes runs at depth 0, unless
// the client says it makes the call on behalf of a message it received:
// the request's _meta names the message,
//
//	"_meta": {"dev.toolmesh/onBehalfOf": "msg_01hzy3d5q8w9x7v6t5s4r3p2n1"}
//
// and the call runs at that message's depth (messages_get shows it: the
// depth of its sender's call plus one, or, for a message that came over
// A2A, the depth its sending mesh signed). So an agent that answers a
// message, or acts on it by sending or invoking further, does so one level
// deeper than whoever asked, and messages_send and remoteagents_invoke
// refuse from depth 3 on. The message must be one the caller received; the
// edge asks the messages service, as the caller, for it.

var messageIDRE = regexp.MustCompile(`^msg_[0-9a-z]{26}$`)

// depthTimeout bounds looking a message up.
const depthTimeout = 5 * time.Second

// depthLookup finds messages' depths in the messages service.
type depthLookup struct {
	messages messagesv1connect.MessagesServiceClient
}

func newDepthLookup(cfg Config, opt connect.ClientOption) *depthLookup {
	u := cfg.Services[messagesv1connect.MessagesServiceName]
	if u == "" {
		return nil
	}
	return &depthLookup{messages: messagesv1connect.NewMessagesServiceClient(cfg.HTTPClient, u, opt,
		connect.WithInterceptors(mesh.NewClientInterceptor(cfg.Mesh, depthTimeout)))}
}

// depthOf returns the depth a call of tool by p runs at, as its request's
// _meta says; an envelope when the _meta names no message p received.
func (p *pipeline) depthOf(ctx context.Context, tool string, caller *identity.Principal, meta map[string]any) (int, *toolcall.Envelope) {
	v, ok := meta[MetaOnBehalfOf]
	if !ok {
		return 0, nil
	}
	field := "_meta." + MetaOnBehalfOf
	id, isString := v.(string)
	if !isString || !messageIDRE.MatchString(id) {
		vs := []boundary.Violation{{Field: field, Rule: "message_id", Message: "must be the id of a message you received, e.g. \"msg_01hzy3d5q8w9x7v6t5s4r3p2n1\""}}
		boundary.LogRejection(ctx, p.log, boundary.MCPTool, vs)
		return 0, toolcall.Invalid(tool, vs)
	}
	if p.depth == nil {
		return 0, toolcall.Fail(tool, toolcall.CodeNotSupported, "this edge has no messages service to look up "+field)
	}
	lctx, cancel := context.WithTimeout(mesh.WithCall(ctx, mesh.Call{Caller: caller.Caller()}), depthTimeout)
	defer cancel()
	res, err := p.depth.messages.Get(lctx, &messagesv1.GetRequest{MessageId: id})
	if err == nil && res.GetMessage().GetToAgent() != caller.Agent {
		err = connect.NewError(connect.CodeNotFound, fmt.Errorf("message %s was not sent to you", id))
	}
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		vs := []boundary.Violation{{Field: field, Rule: "message_id", Message: fmt.Sprintf("no message %s was sent to you", id)}}
		boundary.LogRejection(ctx, p.log, boundary.MCPTool, vs)
		return 0, toolcall.Invalid(tool, vs)
	case err != nil:
		env := toolcall.FromError(lctx, p.log, tool, err)
		env.Message = "look up " + field + ": " + env.Message
		return 0, env
	}
	return int(res.GetMessage().GetDepth()), nil
}
