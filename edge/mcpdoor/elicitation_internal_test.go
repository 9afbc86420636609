package mcpdoor

import (
	"context"
	"encoding/json"
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

// TestDecodedOffersAreTheSDKs: what the fast path reads a client to offer
// from its capabilities as they came is what offers reads through the SDK,
// for every declaration it reads at all.
func TestDecodedOffersAreTheSDKs(t *testing.T) {
	t.Parallel()
	for _, caps := range []string{
		`{}`,
		`{"elicitation":{}}`,
		`{"elicitation":{"form":{}}}`,
		`{"elicitation":{"url":{}}}`,
		`{"elicitation":{"form":{},"url":{}}}`,
		`{"elicitation":{"form":null,"url":{}}}`,
		`{"elicitation":null,"sampling":null,"roots":null}`,
		`{"sampling":{},"roots":{"listChanged":true}}`,
		`{"roots":{}}`,
		`{"experimental":{"x":1},"sampling":{"tools":{}}}`,
		`{"roots":[]}`,
		`{"elicitation":"yes"}`,
		`{"roots":{"listChanged":"yes"},"sampling":{}}`,
	} {
		for _, version := range []string{ModernProtocol, "2025-03-26"} {
			var decoded any
			if err := json.Unmarshal([]byte(caps), &decoded); err != nil {
				t.Fatal(err)
			}
			req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "x", Meta: mcp.Meta{
				"io.modelcontextprotocol/protocolVersion":    version,
				"io.modelcontextprotocol/clientCapabilities": decoded,
			}}}
			form, url, sampling, roots := offers(req)
			want := clientOffers{form: form, url: url, sampling: sampling, roots: roots}
			got, ok := decodeOffers(json.RawMessage(caps), version)
			if ok && got != want {
				t.Errorf("%s at %s: decoded %+v, the SDK's %+v", caps, version, got, want)
			}
			if !ok && want != (clientOffers{}) {
				t.Errorf("%s at %s: not decoded, but the SDK reads %+v", caps, version, want)
			}
		}
	}
}
