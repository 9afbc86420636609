package mcpdoor

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client that declared roots is asked for them only when it is on the
// edge's machine: a request that did not come in on loopback (serveMCP
// marks it remote) offers no roots, and the rest of what it declared
// stands.
func TestRootsAreAskedOnlyOfLocalClients(t *testing.T) {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "projects_create", Meta: mcp.Meta{
		mcp.MetaKeyProtocolVersion:    ModernProtocol,
		mcp.MetaKeyClientCapabilities: map[string]any{"roots": map[string]any{}, "sampling": map[string]any{}},
	}}}
	if e := elicitationOf(context.Background(), req); !e.Roots || !e.Sampling {
		t.Errorf("a local client: roots %v, sampling %v; want both offered", e.Roots, e.Sampling)
	}
	remote := context.WithValue(context.Background(), remoteClientKey{}, true)
	if e := elicitationOf(remote, req); e.Roots || !e.Sampling {
		t.Errorf("a remote client: roots %v, sampling %v; want no roots, sampling offered", e.Roots, e.Sampling)
	}
}
