package mcpdoor

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/port"
)

// What a tools/call's client can do about questions (port.Elicitation),
// and the questions as MCP carries them: the door converts at its edge,
// so that the pipeline and edge/elicit speak no MCP.

// elicitationOf is what the client of req can do about questions: whether
// it declared form elicitation, the round it answers (requestState and
// inputResponses, 2026-07-28) and, for a client of the session era, how
// to ask it within the call (elicitation/create).
func elicitationOf(req *mcp.CallToolRequest) *port.Elicitation {
	e := &port.Elicitation{CanAsk: canElicit(req), State: req.Params.RequestState}
	for k, r := range req.Params.InputResponses {
		// Responses that are not elicitation results are left out (the
		// workflow asks again).
		if er, ok := r.(*mcp.ElicitResult); ok {
			if e.Answers == nil {
				e.Answers = map[string]port.Answer{}
			}
			e.Answers[k] = port.Answer{Action: er.Action, Content: er.Content}
		}
	}
	if req.ProtocolVersion() < ModernProtocol {
		e.Ask = func(ctx context.Context, q port.Question) (port.Answer, error) {
			if req.Session == nil {
				return port.Answer{}, errors.New("no session to ask over")
			}
			r, err := req.Session.Elicit(ctx, elicitParams(q))
			if err != nil {
				return port.Answer{}, err
			}
			return port.Answer{Action: r.Action, Content: r.Content}, nil
		}
	}
	return e
}

// canElicit reports whether the client of req declared form elicitation
// (an empty elicitation capability means form).
func canElicit(req *mcp.CallToolRequest) bool {
	if v := req.ProtocolVersion(); v != "" && v < elicitationSince {
		// A client of an older protocol has no elicitation to declare.
		return false
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// elicitationSince is the first protocol version with elicitation.
const elicitationSince = "2025-06-18"

// elicitParams is q as a form elicitation.
func elicitParams(q port.Question) *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "form", Message: q.Message, RequestedSchema: q.Schema}
}

// roundResult is r as an input_required result: its questions as input
// requests, with the state the client returns.
func roundResult(r *port.Round) *mcp.CallToolResult {
	requests := mcp.InputRequestMap{}
	for _, q := range r.Questions {
		requests[q.Key] = elicitParams(q)
	}
	return &mcp.CallToolResult{InputRequests: requests, RequestState: r.State}
}
