package mcpdoor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// Toolsets at the edge (edge/mcpdoor/toolsets.go): a client selects the
// groups of tools it wants, by path, header, token claim or — over stdio —
// the edge's default; it sees and may call exactly those (and only those its
// grants allow), at every protocol version, with the resources and prompts
// that read through them.

// productEdge serves an edge with the product's contracts; no service is
// behind them (calls answer not_supported), which is all that selecting
// needs.
func productEdge(t testing.TB, configure func(*edge.Config)) *edgetest.Fixture {
	t.Helper()
	return edgetest.NewFixture(t, func(c *edge.Config) {
		c.Contracts = toolcatalog.Contracts()
		if configure != nil {
			configure(c)
		}
	})
}

// headerTransport adds headers to every request, as a client configured
// with them does.
type headerTransport struct {
	h    http.Header
	base http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// dial opens a go-sdk client session at version to endpoint, sending
// headers with every request.
func dial(t *testing.T, endpoint, version string, h http.Header, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	transport := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: headerTransport{h, http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "toolsets-test", Version: "1"}, opts).Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func mustDial(t *testing.T, endpoint, version string, h http.Header, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := dial(t, endpoint, version, h, opts)
	if err != nil {
		t.Fatalf("connect at %s to %s with %v: %v", version, endpoint, h, err)
	}
	return cs
}

// toolsetTools are the names of the tools of the named toolsets, sorted.
func toolsetTools(t *testing.T, e *edge.Edge, names ...string) []string {
	t.Helper()
	var out []string
	for _, ts := range e.Registry().Toolsets() {
		if slices.Contains(names, ts.Name) {
			for _, tool := range ts.Tools {
				out = append(out, tool.Name)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no tools in toolsets %v", names)
	}
	sort.Strings(out)
	return out
}

func sorted(names []string) []string {
	out := slices.Clone(names)
	sort.Strings(out)
	return out
}

// refusal is the JSON-RPC error body of a refused HTTP request.
type refusal struct {
	Error struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

func TestToolsetSelectionAtEveryVersion(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	tasksAndMessages := toolsetTools(t, f.Edge, "tasks", "messages")
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"tasks, messages"}}, nil)
			if got := sorted(toolNames(t, cs)); !slices.Equal(got, tasksAndMessages) {
				t.Errorf("tools/list with tasks,messages = %v, want %v", got, tasksAndMessages)
			}
			if _, env := edgetest.Call(t, cs, "tasks_list", map[string]any{}); env.DomainCode != "not_supported" {
				t.Errorf("tasks_list (no backend) = %+v, want the pipeline's not_supported", env)
			}
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "credits_balance", Arguments: map[string]any{}})
			if err == nil || !strings.Contains(err.Error(), `tool credits_balance is outside this connection's toolset selection "messages,tasks"`) ||
				!strings.Contains(err.Error(), `toolset "credits"`) {
				t.Errorf("credits_balance outside the selection: err = %v, want a refusal naming the selection and the tool's toolset", err)
			}

			// One toolset by path; the keywords and exclusions by header.
			byPath := mustDial(t, f.HTTP.URL+edge.PathToolsets+"credits", v, nil, nil)
			if got, want := sorted(toolNames(t, byPath)), toolsetTools(t, f.Edge, "credits"); !slices.Equal(got, want) {
				t.Errorf("tools/list at /mcp/x/credits = %v, want %v", got, want)
			}
			def := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"default"}}, nil)
			if got, want := sorted(toolNames(t, def)), toolsetTools(t, f.Edge, "agents", "memory", "messages", "owner", "tasks"); !slices.Equal(got, want) {
				t.Errorf("tools/list with default = %v, want %v", got, want)
			}
			some := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"tasks,credits_balance,-tasks_cancel"}}, nil)
			want := append(slices.DeleteFunc(toolsetTools(t, f.Edge, "tasks"), func(n string) bool { return n == "tasks_cancel" }), "credits_balance")
			if got := sorted(toolNames(t, some)); !slices.Equal(got, sorted(want)) {
				t.Errorf("tools/list with tasks,credits_balance,-tasks_cancel = %v, want %v", got, sorted(want))
			}
			all := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"-github"}}, nil)
			if got := toolNames(t, all); len(got) != len(f.Edge.Registry().Tools())-12 || slices.Contains(got, "github_get_repo") {
				t.Errorf("tools/list with -github = %d tools, want every tool but the 12 of github", len(got))
			}
		})
	}
}

// A selection that names what the edge lacks is refused before any method
// runs: HTTP 400 with a JSON-RPC error that lists the toolsets there are.
func TestBadSelectionsAreRefusedBeforeAnyMethod(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, c := range []struct {
		name, path, header, want string
		unknown                  []any
	}{
		{"unknown toolset", "/mcp", "tasks,taks", `unknown toolset "taks"; the toolsets are ` + toolsetNames(f.Edge) + `, the keywords`, []any{"taks"}},
		{"unknown tool", "/mcp", "tasks_nope", `unknown tool "tasks_nope"`, []any{"tasks_nope"}},
		{"unknown by path", "/mcp/x/taks", "", `unknown toolset "taks"`, []any{"taks"}},
		{"empty path", "/mcp/x/", "", "name one toolset after /mcp/x/", nil},
		{"two segments", "/mcp/x/tasks/messages", "", "name one toolset after /mcp/x/", nil},
		{"path and header disagree", "/mcp/x/tasks", "messages", `the path selects "tasks" and the Toolmesh-Toolsets header "messages"`, nil},
		{"empty item", "/mcp", "tasks,,messages", "has an empty item", nil},
		{"nothing selected", "/mcp", "tasks,-tasks", "selects no tool", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}}
			if c.header != "" {
				h.Set(edge.HeaderToolsets, c.header)
			}
			res, body := edgetest.Post(t, f.HTTP.URL+c.path, h, initialize)
			var e refusal
			_ = json.Unmarshal(body, &e)
			if res.StatusCode != http.StatusBadRequest || e.Error.Code != -32600 || !strings.Contains(e.Error.Message, c.want) {
				t.Fatalf("status %d %s, want 400 with -32600 saying %q", res.StatusCode, body, c.want)
			}
			if c.unknown != nil && (!slices.Equal(e.Error.Data["unknown"].([]any), c.unknown) || len(e.Error.Data["toolsets"].([]any)) != len(f.Edge.Registry().Toolsets())) {
				t.Errorf("data = %v, want the unknown names %v and every toolset", e.Error.Data, c.unknown)
			}
		})
	}
	// The same selections spelled right are served.
	res, body := edgetest.Post(t, f.HTTP.URL+"/mcp/x/tasks", http.Header{"Mcp-Protocol-Version": {"2025-11-25"}, edge.HeaderToolsets: {"tasks"}}, initialize)
	if res.StatusCode != http.StatusOK {
		t.Errorf("a path and a header that agree: %d %s", res.StatusCode, body)
	}
	// The edge's default selection is checked at start.
	_, err := edge.New(edge.Config{Contracts: toolcatalog.Contracts(), Mesh: servertest.MeshSigner(), MCP: edge.MCP{Toolsets: "tasks,wallets"}}, logging.Discard())
	if err == nil || !strings.Contains(err.Error(), `edge: toolsets "tasks,wallets": unknown toolset "wallets"; the toolsets are agents,`) {
		t.Errorf("an edge whose default selection names an unknown toolset: New = %v", err)
	}
}

// toolsetNames lists e's toolsets as a refusal names them.
func toolsetNames(e *edge.Edge) string {
	var names []string
	for _, ts := range e.Registry().Toolsets() {
		names = append(names, ts.Name)
	}
	return strings.Join(names, ", ")
}
