package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// Toolsets and tool search through the edge in front of the tasks, messages
// and credits services as `toolmesh serve` builds them, with the go-sdk
// client at every protocol version (docs/toolsets.md).

// toolsetServices serves tasks, messages and credits, each on its own
// SQLite database, and returns the edge's service map and client.
func toolsetServices(t *testing.T) (map[string]string, *http.Client) {
	t.Helper()
	ctx := t.Context()
	var regs []server.Service
	for _, domain := range []string{"tasks", "messages", "credits"} {
		db, err := sqldb.Open(ctx, filepath.Join(t.TempDir(), domain+".db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		svc, err := domainBuild(t, domain, noEnv)(ctx, db, serveDeps{Getenv: noEnv, Log: logging.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, svc...)
	}
	srv := servertest.Start(t, regs...)
	client := servertest.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	return map[string]string{
		tasksv1connect.TasksServiceName:       srv.URL,
		messagesv1connect.MessagesServiceName: srv.URL,
		creditsv1connect.CreditsServiceName:   srv.URL,
	}, client
}

// withHeaders adds headers to every request of a client.
type withHeaders http.Header

func (h withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// dialWith opens a go-sdk client session at version, sending h with every
// request.
func dialWith(t *testing.T, endpoint, version string, h http.Header, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "toolsets-e2e", Version: "1"}, opts).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: withHeaders(h)}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect at %s with %v: %v", version, h, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func listedTools(t *testing.T, cs *mcp.ClientSession, meta mcp.Meta) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// A client that selects tasks,messages sees exactly those toolsets' tools,
// and of them only those its token allows; a call to a tool outside the
// selection is refused, saying why.
func TestToolsetsThroughTheEdge(t *testing.T) {
	services, client := toolsetServices(t)
	secret := []byte("toolsets-e2e-secret-0123456789abcdef")
	const issuer, resource = "https://auth.example.com", "http://127.0.0.1:7100/mcp"
	e, err := edge.New(edge.Config{
		Contracts:  topology.Contracts(),
		Services:   services,
		HTTPClient: client,
		Mesh:       servertest.MeshSigner(),
		MCP:        edge.MCP{Addr: "127.0.0.1:7100"}, // HS256 tokens need a loopback edge; the test serves its handler
		Auth:       &identity.Config{Issuer: issuer, Resource: resource, HS256Secret: secret},
	}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	token := func(subject, scope string) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: issuer, Subject: subject, Audience: jwt.Audience{resource},
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Claims(map[string]any{"scope": scope}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	everything := []string{"messages_get", "messages_list", "messages_send", "tasks_cancel", "tasks_create", "tasks_get", "tasks_list", "tasks_update_status"}
	reads := []string{"messages_get", "messages_list", "tasks_get", "tasks_list"}
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			selecting := func(subject, scope string) *mcp.ClientSession {
				return dialWith(t, hs.URL+"/mcp", v, http.Header{"Authorization": {"Bearer " + token(subject, scope)}, edge.HeaderToolsets: {"tasks,messages"}}, nil)
			}
			reader, writer := selecting("reader-"+v, "toolmesh:read"), selecting("writer-"+v, "toolmesh:write")
			if got := listedTools(t, reader, nil); !slices.Equal(got, reads) {
				t.Errorf("a READ caller selecting tasks,messages sees %v, want %v", got, reads)
			}
			if got := listedTools(t, writer, nil); !slices.Equal(got, everything) {
				t.Errorf("a WRITE caller selecting tasks,messages sees %v, want %v", got, everything)
			}
			// The selection's tools work.
			if env := callTool(t, writer, "tasks_create", map[string]any{"description": "written at " + v}); env.Status != "ok" {
				t.Errorf("tasks_create = %+v", env)
			}
			if env := callTool(t, reader, "tasks_list", map[string]any{}); env.Status != "ok" || env.Pagination == nil {
				t.Errorf("tasks_list = %+v", env)
			}
			// A tool outside it is refused like an unknown tool, saying why.
			for _, cs := range []*mcp.ClientSession{reader, writer} {
				_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "credits_balance", Arguments: map[string]any{}})
				if err == nil || !strings.Contains(err.Error(), `tool credits_balance is outside this connection's toolset selection "messages,tasks": it belongs to toolset "credits"`) {
					t.Errorf("credits_balance outside the selection: err = %v", err)
				}
			}
		})
	}
}

// In tool search mode the words "give credits to an agent" find
// credits_grant among the top three hits; once its toolset is enabled it is
// listed, and a call to it grants the credits.
func TestToolSearchThroughTheEdge(t *testing.T) {
	services, client := toolsetServices(t)
	e, err := edge.New(edge.Config{Contracts: topology.Contracts(), Services: services, HTTPClient: client, Mesh: servertest.MeshSigner()}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			changed := make(chan struct{}, 4)
			cs := dialWith(t, hs.URL+edge.PathToolsets+"dynamic", v, nil, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			})
			metaTools := []string{"tools_call", "tools_search", "toolsets_enable", "toolsets_list"}
			if got := listedTools(t, cs, nil); !slices.Equal(got, metaTools) {
				t.Fatalf("tools/list in tool search mode = %v, want %v", got, metaTools)
			}
			var found struct {
				Hits []struct{ Name, Toolset string }
			}
			okData(t, callTool(t, cs, "tools_search", map[string]any{"query": "give credits to an agent", "limit": 3}), &found)
			if len(found.Hits) > 3 || !slices.ContainsFunc(found.Hits, func(h struct{ Name, Toolset string }) bool { return h.Name == "credits_grant" }) {
				t.Fatalf("tools_search give credits to an agent = %+v, want credits_grant in the top 3", found.Hits)
			}
			var enabled struct {
				Meta map[string][]string `json:"_meta"`
			}
			okData(t, callTool(t, cs, "toolsets_enable", map[string]any{"toolsets": []string{"credits"}}), &enabled)
			var meta mcp.Meta
			if v >= edge.ModernProtocol {
				meta = mcp.Meta{edge.MetaToolsets: enabled.Meta[edge.MetaToolsets]}
			} else {
				select {
				case <-changed:
				case <-time.After(10 * time.Second):
					t.Fatal("no notifications/tools/list_changed after toolsets_enable")
				}
			}
			if got := listedTools(t, cs, meta); !slices.Contains(got, "credits_grant") || len(got) != len(metaTools)+6 {
				t.Fatalf("tools/list after enabling credits (_meta %v) = %v, want the meta-tools and the 6 credits tools", meta, got)
			}
			wallet := "agent-" + strings.ReplaceAll(v, "-", "")
			env := callTool(t, cs, "credits_grant", map[string]any{"wallet": wallet, "amount": 25, "reference": "inv-" + v, "confirm": true, "reason": "found by tool search"})
			if env.Status != "ok" {
				t.Fatalf("credits_grant = %+v", env)
			}
			var bal struct{ Balance string }
			okData(t, callTool(t, cs, "credits_balance", map[string]any{"wallet": wallet}), &bal)
			if bal.Balance != "25" {
				t.Errorf("balance of %s after the grant = %q, want \"25\"", wallet, bal.Balance)
			}
		})
	}
}

// tsToolsetsReport is what testdata/tsclient/toolsets.mjs saw.
type tsToolsetsReport struct {
	Selected struct {
		Negotiated, Created, Outside string
		Tools                        []string
	}
	Search struct {
		Negotiated string
		Tools      []string
		Hits       []struct {
			Name, Toolset string
			HasSchema     bool
		}
		Enabled     []string
		ListChanged bool
		ToolsAfter  []string
		Granted     string
		Balance     string
	}
}

// A client we did not write, the official TypeScript SDK's, selects a
// toolset by the URL path (/mcp/x/tasks) and tool search mode by
// /mcp/x/dynamic, at each protocol version it speaks: it sees the tasks
// tools only and is refused credits_balance saying why; in tool search
// mode it finds credits_grant among the top three hits for "give credits
// to an agent", enables credits, hears notifications/tools/list_changed,
// sees the credits tools listed and grants credits.
func TestToolsetsThroughTheTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	dir := nodetest.Install(t, filepath.Join("testdata", "tsclient"))
	services, client := toolsetServices(t)
	e, err := edge.New(edge.Config{Contracts: topology.Contracts(), Services: services, HTTPClient: client, Mesh: servertest.MeshSigner()}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	tasks := []string{"tasks_cancel", "tasks_create", "tasks_get", "tasks_list", "tasks_update_status"}
	metaTools := []string{"tools_call", "tools_search", "toolsets_enable", "toolsets_list"}
	for _, v := range []string{"2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "toolsets.mjs", hs.URL, v)
			cmd.Dir = dir
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node toolsets.mjs: %v\n%s", err, stderr.String())
			}
			var r tsToolsetsReport
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("report %q: %v\n%s", out, err, stderr.String())
			}
			t.Logf("TypeScript SDK %s saw: %+v", v, r)
			sel := r.Selected
			if sel.Negotiated != v || !slices.Equal(sel.Tools, tasks) || sel.Created == "" {
				t.Errorf("at /mcp/x/tasks: negotiated %s, tools %v, created %q; want %s, %v and a task", sel.Negotiated, sel.Tools, sel.Created, v, tasks)
			}
			if !strings.Contains(sel.Outside, `tool credits_balance is outside this connection's toolset selection "tasks": it belongs to toolset "credits"`) {
				t.Errorf("credits_balance at /mcp/x/tasks: %s, want refused saying why", sel.Outside)
			}
			s := r.Search
			if s.Negotiated != v || !slices.Equal(s.Tools, metaTools) {
				t.Errorf("at /mcp/x/dynamic: negotiated %s, tools %v; want %s and the meta-tools %v", s.Negotiated, s.Tools, v, metaTools)
			}
			i := slices.IndexFunc(s.Hits, func(h struct {
				Name, Toolset string
				HasSchema     bool
			}) bool {
				return h.Name == "credits_grant"
			})
			if len(s.Hits) > 3 || i < 0 || s.Hits[i].Toolset != "credits" || !s.Hits[i].HasSchema {
				t.Fatalf("tools_search give credits to an agent = %+v, want credits_grant of credits, with its input schema, in the top 3", s.Hits)
			}
			if !slices.Equal(s.Enabled, []string{"credits"}) || !s.ListChanged || len(s.ToolsAfter) != len(metaTools)+6 || !slices.Contains(s.ToolsAfter, "credits_grant") {
				t.Errorf("after toolsets_enable: enabled %v, list changed %v, tools %v; want credits, the notification, the meta-tools and the 6 credits tools", s.Enabled, s.ListChanged, s.ToolsAfter)
			}
			if s.Granted != "ok" || s.Balance != "25" {
				t.Errorf("credits_grant = %s, balance through tools_call = %q; want ok and 25", s.Granted, s.Balance)
			}
		})
	}
}
