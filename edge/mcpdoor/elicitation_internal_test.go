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

// The capabilities clients send are read from their decoded form (raw is
// not needed: nil here), with the offers decoding them gives.
func TestOffersOfCommonCapabilitiesNeedsNoSecondDecode(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{}`,
		`{"elicitation":{}}`,
		`{"elicitation":{"form":{}}}`,
		`{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{"listChanged":true}}`,
		`{"elicitation":{"url":{}},"roots":{}}`,
		`{"sampling":{},"roots":{"listChanged":false}}`,
	} {
		var caps map[string]any
		if err := json.Unmarshal([]byte(raw), &caps); err != nil {
			t.Fatal(err)
		}
		for _, version := range []string{"2025-03-26", ModernProtocol} {
			want, _ := decodeOffers(json.RawMessage(raw), version)
			got, ok := offersOf(caps, nil, version)
			if !ok || got != want {
				t.Errorf("offersOf(%s) at %s = %+v, %v; want %+v, true", raw, version, got, ok, want)
			}
		}
	}
}

// FuzzOffersOf holds offersOf to decodeOffers for any capabilities object.
func FuzzOffersOf(f *testing.F) {
	for _, raw := range []string{
		`{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{"listChanged":true}}`,
		`{"elicitation":{"form":{"applyDefaults":true}},"sampling":{"tools":{}},"roots":{"listChanged":"yes"}}`,
		`{"Sampling":{},"elicitation":null,"experimental":{"x":{}},"roots":{"other":1}}`,
		`{"sampling":null,"sampling":{},"elicitation":{"form":5}}`,
		`{"sampling":{"tools":5}}`,
		`{"roots":{"listChanged":1}}`,
	} {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var caps map[string]any
		if json.Unmarshal(raw, &caps) != nil || caps == nil {
			return
		}
		for _, version := range []string{"2025-03-26", ModernProtocol} {
			want, wantOK := decodeOffers(raw, version)
			got, ok := offersOf(caps, raw, version)
			if got != want || ok != wantOK {
				t.Fatalf("offersOf(%s) at %s = %+v, %v; decodeOffers gives %+v, %v", raw, version, got, ok, want, wantOK)
			}
		}
	})
}
