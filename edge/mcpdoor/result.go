package mcpdoor

import (
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// result renders an envelope as a tool result: structuredContent and the
// same JSON as text — but for the values of untrusted fields, which the
// text wraps in markers (toolcall.MarkedText), whichever way the result
// came: a direct call, an elicited one, or a task's.
func result(env *toolcall.Envelope) *mcp.CallToolResult {
	b, err := toolcall.Marshal(env)
	if err != nil {
		b = []byte(`{"status":"error","error_type":"InternalError","domain_code":"internal","message":"encode result"}`)
	}
	text := b
	if len(env.Untrusted) > 0 {
		if text, err = toolcall.MarkedText(env); err != nil {
			b = []byte(`{"status":"error","error_type":"InternalError","domain_code":"internal","message":"encode result"}`)
			text = b
		}
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
		StructuredContent: json.RawMessage(b),
		IsError:           env.IsError(),
	}
}

// stateRefused reports whether env refuses a call's requestState.
func stateRefused(env *toolcall.Envelope) bool {
	return env.DomainCode == toolcall.CodeInvalidArgument &&
		slices.ContainsFunc(env.Violations, func(v boundary.Violation) bool { return v.Rule == boundary.RequestState })
}

// stateError is the invalid-params error of a refused requestState, with
// the envelope's violations as its data.
func stateError(env *toolcall.Envelope) *jsonrpc.Error {
	data, err := json.Marshal(map[string]any{"violations": env.Violations})
	if err != nil {
		data = nil
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: env.Message, Data: data}
}
