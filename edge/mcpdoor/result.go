package mcpdoor

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// result renders an envelope as a tool result: structuredContent and the
// same JSON as text.
func result(env *toolcall.Envelope) *mcp.CallToolResult {
	b, err := json.Marshal(env)
	if err != nil {
		b = []byte(`{"status":"error","error_type":"InternalError","domain_code":"internal","message":"encode result"}`)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
		IsError:           env.IsError(),
	}
}
