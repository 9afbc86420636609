package mcpdoor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// Tool search mode (the selection keyword dynamic, edge/mcpdoor/discover.go):
// tools/list shows four meta-tools; the model searches, enables a toolset
// and calls, at every protocol version.

var metaToolNames = []string{"tools_call", "tools_search", "toolsets_enable", "toolsets_list"}

// callMeta calls a tool and decodes its envelope's data into data (when
// not nil), failing the test on an error result.
func callMeta(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, data any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
	if res.IsError || env.Status != "ok" {
		t.Fatalf("%s(%v) = %s", tool, args, edgetest.Structured(t, res))
	}
	if data != nil {
		if err := json.Unmarshal(env.Data, data); err != nil {
			t.Fatal(err)
		}
	}
}

// listNames lists the tools with the request _meta meta (nil: none).
func listNames(t *testing.T, cs *mcp.ClientSession, meta mcp.Meta) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// searchHits are what tools_search answered.
type searchHits struct {
	Hits []searchHit
}

type searchHit struct {
	Name        string
	Toolset     string
	InputSchema struct {
		Properties map[string]any `json:"properties"`
	} `json:"input_schema"`
}

func TestToolSearchModeAtEveryVersion(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	credits := toolsetTools(t, f.Edge, "credits")
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			changed := make(chan struct{}, 8)
			cs := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"dynamic"}}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			})
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
				if tl.Name == "tools_search" && (!strings.Contains(tl.Description, "\n- credits: Credits: show a wallet's balance") || !strings.Contains(tl.Description, "\n- github: GitHub")) {
					t.Errorf("tools_search does not say what it searches: %s", tl.Description)
				}
			}
			if !slices.Equal(names, metaToolNames) {
				t.Fatalf("tools/list in tool search mode = %v, want the meta-tools %v", names, metaToolNames)
			}

			// Search: the words of a job find its tool, with its schema.
			var found searchHits
			callMeta(t, cs, "tools_search", map[string]any{"query": "give credits to an agent", "limit": 3}, &found)
			i := slices.IndexFunc(found.Hits, func(h searchHit) bool { return h.Name == "credits_grant" })
			if len(found.Hits) != 3 || i < 0 {
				t.Fatalf("tools_search give credits to an agent = %+v, want credits_grant in the top 3", found.Hits)
			}
			if h := found.Hits[i]; h.Toolset != "credits" || h.InputSchema.Properties["amount"] == nil || h.InputSchema.Properties["confirm"] == nil {
				t.Errorf("the credits_grant hit = %+v, want its toolset and its input schema (amount, confirm, ...)", h)
			}

			// A tool of the selection is called by name before anything is
			// enabled (no service here: the pipeline's not_supported).
			res2, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tools_call", Arguments: map[string]any{"name": "credits_balance", "arguments": map[string]any{}}})
			if env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res2)); err != nil || env.Tool != "credits_balance" || env.DomainCode != "not_supported" {
				t.Errorf("tools_call credits_balance = %v %s, want credits_balance's own not_supported", err, edgetest.Structured(t, res2))
			}

			// Enable: the toolset's tools are listed from then on.
			var enabled struct {
				Enabled []string
				Tools   []string
				Meta    map[string][]string `json:"_meta"`
			}
			callMeta(t, cs, "toolsets_enable", map[string]any{"toolsets": []string{"credits"}}, &enabled)
			if !slices.Equal(enabled.Enabled, []string{"credits"}) || !slices.Equal(enabled.Tools, credits) {
				t.Errorf("toolsets_enable credits = %+v, want credits and its tools %v", enabled, credits)
			}
			want := append(slices.Clone(metaToolNames), credits...)
			slices.Sort(want)
			var meta mcp.Meta
			if v >= edge.ModernProtocol {
				// No session: the client carries what it enabled.
				if got := enabled.Meta[edge.MetaToolsets]; !slices.Equal(got, []string{"credits"}) {
					t.Fatalf("stateless toolsets_enable _meta = %v, want %s [credits]", enabled.Meta, edge.MetaToolsets)
				}
				meta = mcp.Meta{edge.MetaToolsets: []string{"credits"}}
				if got := listNames(t, cs, nil); !slices.Equal(got, metaToolNames) {
					t.Errorf("tools/list without the _meta = %v, want the meta-tools only", got)
				}
			} else {
				select {
				case <-changed:
				case <-time.After(10 * time.Second):
					t.Fatal("no notifications/tools/list_changed after toolsets_enable")
				}
			}
			if got := listNames(t, cs, meta); !slices.Equal(got, want) {
				t.Errorf("tools/list after enabling credits = %v, want %v", got, want)
			}
			var listed struct {
				Toolsets []struct {
					Name        string
					Description string
					Tools       []string
					Enabled     bool
				}
			}
			res3, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "toolsets_list", Arguments: map[string]any{}, Meta: meta})
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(edgetest.EnvelopeJSON(t, edgetest.Structured(t, res3)).Data, &listed); err != nil || len(listed.Toolsets) != len(f.Edge.Registry().Toolsets()) {
				t.Fatalf("toolsets_list = %s, want every toolset", edgetest.Structured(t, res3))
			}
			for _, ts := range listed.Toolsets {
				if ts.Enabled != (ts.Name == "credits") || ts.Description == "" || len(ts.Tools) == 0 {
					t.Errorf("toolsets_list after enabling credits shows %+v", ts)
				}
				if ts.Name == "credits" && !slices.Equal(ts.Tools, credits) {
					t.Errorf("toolsets_list: credits has %v, want %v", ts.Tools, credits)
				}
			}
		})
	}
}

// Tool search mode searches and calls within the selection only; its
// meta-tools are not served outside it; bad arguments are the model's to
// fix.
func TestToolSearchModeStaysInItsSelection(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"dynamic,tasks,messages"}}, nil)
			var found searchHits
			callMeta(t, cs, "tools_search", map[string]any{"query": "give credits to an agent"}, &found)
			for _, h := range found.Hits {
				if h.Toolset != "tasks" && h.Toolset != "messages" {
					t.Errorf("tools_search found %s of toolset %s, outside the selection", h.Name, h.Toolset)
				}
			}
			for name, args := range map[string]map[string]any{
				"tools_call":      {"name": "credits_grant", "arguments": map[string]any{}},
				"toolsets_enable": {"toolsets": []string{"credits"}},
				"tools_search":    {"query": "  "},
			} {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					t.Fatal(err)
				}
				if env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res)); !res.IsError || env.DomainCode != "invalid_argument" {
					t.Errorf("%s %v = %s, want invalid_argument", name, args, edgetest.Structured(t, res))
				}
			}
			plain := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"tasks"}}, nil)
			_, err := plain.CallTool(context.Background(), &mcp.CallToolParams{Name: "tools_search", Arguments: map[string]any{"query": "tasks"}})
			if err == nil || !strings.Contains(err.Error(), `tool "tools_search" is a tool of tool search mode, which this connection's toolset selection "tasks" does not ask for`) {
				t.Errorf("tools_search outside tool search mode: err = %v", err)
			}
		})
	}
}

// toolsListBytes is the size of the tools/list result a client selecting
// toolsets gets, as JSON.
func toolsListBytes(tb testing.TB, f *edgetest.Fixture, toolsets string) int {
	tb.Helper()
	res, body := edgetest.Post(tb, f.URL, http.Header{"Mcp-Protocol-Version": {edge.ModernProtocol}, "Mcp-Method": {"tools/list"}, edge.HeaderToolsets: {toolsets}},
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"`+edge.ModernProtocol+`","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	data, ok := strings.CutPrefix(strings.TrimSpace(string(body)), "event: message\ndata: ")
	var msg struct {
		Result json.RawMessage `json:"result"`
	}
	if res.StatusCode != http.StatusOK || !ok || json.Unmarshal([]byte(data), &msg) != nil || len(msg.Result) == 0 {
		tb.Fatalf("tools/list with %s: %d %s", toolsets, res.StatusCode, body)
	}
	return len(msg.Result)
}

// The selection keeps a model's context small: the default toolsets list
// less than every tool, tool search mode less still.
func TestSelectionsShrinkToolsList(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	all, def, dynamic := toolsListBytes(t, f, "all"), toolsListBytes(t, f, "default"), toolsListBytes(t, f, "dynamic")
	if !(dynamic < def && def < all) {
		t.Errorf("tools/list bytes: all %d, default %d, dynamic %d; want dynamic < default < all", all, def, dynamic)
	}
	t.Logf("tools/list bytes: all %d, default %d, dynamic %d, dynamic,default %d", all, def, dynamic, toolsListBytes(t, f, "dynamic,default"))
}

// BenchmarkToolsList lists the product's tools (stateless, one page) for a
// client selecting all, the default toolsets, or tool search mode;
// bytes/list is the size of the result, what a model's context takes.
func BenchmarkToolsList(b *testing.B) {
	f := productEdge(b, nil)
	for _, sel := range []string{"all", "default", "dynamic"} {
		b.Run(sel, func(b *testing.B) {
			n := toolsListBytes(b, f, sel)
			b.ReportAllocs()
			for b.Loop() {
				toolsListBytes(b, f, sel)
			}
			b.ReportMetric(float64(n), "bytes/list")
		})
	}
}
