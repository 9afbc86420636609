package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/oauthtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
)

func TestCreditsToolsThroughTheEdge(t *testing.T) {
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "credits.db"))
	st, err := creditsstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, credits.New(st, credits.Config{}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	e, s := connectEdge(t, edge.Config{
		Services:   map[string]string{creditsv1connect.CreditsServiceName: srv.URL},
		DevAgent:   "agent-e2e",
		HTTPClient: edgeClient,
	})

	// The whole credits tool surface, whoever the caller is. Spend is an
	// RPC for services, not a tool.
	want := map[string]struct {
		kind       toolv1.Kind
		privileged bool
	}{
		"credits_balance":    {toolv1.Kind_KIND_READ, false},
		"credits_ledger":     {toolv1.Kind_KIND_READ, false},
		"credits_grant":      {toolv1.Kind_KIND_ADMIN, true},
		"credits_config_get": {toolv1.Kind_KIND_ADMIN, true},
		"credits_config_set": {toolv1.Kind_KIND_ADMIN, true},
	}
	for name, w := range want {
		tool, ok := e.Registry().Lookup(name)
		if !ok {
			t.Errorf("the edge has no tool %s", name)
			continue
		}
		if tool.Kind != w.kind || tool.Privileged != w.privileged {
			t.Errorf("%s: kind %v privileged %v, want %v %v", name, tool.Kind, tool.Privileged, w.kind, w.privileged)
		}
	}
	for _, tool := range e.Registry().Tools() {
		if tool.Method.FullName() == "toolmesh.credits.v1.CreditsService.Spend" {
			t.Errorf("Spend is exposed as tool %s; it is for services only", tool.Name)
		}
	}
	// Tools any agent may call are listed.
	tools := listTools(t, s)
	for _, name := range []string{"credits_balance", "credits_ledger"} {
		if tool, ok := tools[name]; !ok || !tool.Annotations.ReadOnlyHint {
			t.Errorf("tools/list: %s missing or not read-only", name)
		}
	}

	// Credits granted and spent over the service API show through the tools.
	c := creditsv1connect.NewCreditsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	if _, err := c.Grant(servertest.As(ctx, "ops"), &creditsv1.GrantRequest{Wallet: "agent-e2e", Amount: 120, Reference: "inv-e2e"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Spend(servertest.As(ctx, "agent-e2e"), &creditsv1.SpendRequest{Amount: 20, Reference: "job-e2e"}); err != nil {
		t.Fatal(err)
	}
	var bal struct {
		Wallet  string
		Balance string // int64 travels as a JSON string
		Low     bool
	}
	okData(t, callTool(t, s, "credits_balance", map[string]any{}), &bal)
	if bal.Wallet != "agent-e2e" || bal.Balance != "100" || bal.Low {
		t.Errorf("credits_balance data = %+v, want agent-e2e holding \"100\", not low", bal)
	}
	ledger := callTool(t, s, "credits_ledger", map[string]any{"limit": 1})
	var entries struct {
		Entries []struct{ Reference, Amount string }
	}
	okData(t, ledger, &entries)
	if len(entries.Entries) != 1 || entries.Entries[0].Reference != "job-e2e" || entries.Entries[0].Amount != "-20" ||
		ledger.Pagination == nil || ledger.Pagination.Total != 2 {
		t.Errorf("credits_ledger = %+v with pagination %+v, want the newest entry (the spend) and total 2", entries, ledger.Pagination)
	}
}

// TestCreditsRolesThroughTheEdge: the roles of a caller's token reach the
// credits service in the mesh token; the owner and admins read any wallet,
// an agent only its own.
func TestCreditsRolesThroughTheEdge(t *testing.T) {
	ctx := context.Background()
	st, err := creditsstore.Open(ctx, sqldbtest.Open(t, filepath.Join(t.TempDir(), "credits.db")))
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, credits.New(st, credits.Config{}).Registration())
	c := creditsv1connect.NewCreditsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	if _, err := c.Grant(servertest.As(ctx, "ops"), &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 42, Reference: "inv-roles"}); err != nil {
		t.Fatal(err)
	}
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	iss := hs256Issuer{url: "https://auth.example.com", resource: "http://127.0.0.1:7100/mcp", secret: []byte("credits-e2e-secret-0123456789abcdef")}
	e, err := edge.New(edge.Config{
		Services:   map[string]string{creditsv1connect.CreditsServiceName: srv.URL},
		HTTPClient: edgeClient,
		Mesh:       servertest.MeshSigner(),
		MCP:        edge.MCP{Addr: "127.0.0.1:7100"}, // HS256 tokens need a loopback edge; the test serves its handler
		Auth:       &identity.Config{Issuer: iss.url, Resource: iss.resource, HS256Secret: iss.secret},
	}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)

	for _, tc := range []struct {
		subject string
		roles   []string
		mayRead bool
	}{
		{"agent-b", nil, false},
		{"agent-b", []string{"auditor"}, false},
		{"agent-b", []string{mesh.RoleAdmin}, true},
		{"boss", []string{mesh.RoleOwner}, true},
	} {
		s := iss.session(t, hs.URL+"/mcp", tc.subject, tc.roles)
		for _, tool := range []string{"credits_balance", "credits_ledger"} {
			env := callTool(t, s, tool, map[string]any{"wallet": "agent-a"})
			switch {
			case tc.mayRead && (env.Status != "ok" || !strings.Contains(string(env.Data), `"agent-a"`)):
				t.Errorf("%s with roles %v: %s of agent-a = %+v, want agent-a's wallet", tc.subject, tc.roles, tool, env)
			case !tc.mayRead && env.DomainCode != "permission_denied":
				t.Errorf("%s with roles %v: %s of agent-a = %+v, want permission_denied", tc.subject, tc.roles, tool, env)
			}
		}
		var own struct{ Wallet string }
		okData(t, callTool(t, s, "credits_balance", map[string]any{}), &own)
		if own.Wallet != tc.subject {
			t.Errorf("%s with roles %v: its own balance names wallet %q", tc.subject, tc.roles, own.Wallet)
		}
	}
}

// hs256Issuer signs development (HS256) access tokens for an edge on
// loopback, as an authorization server would.
type hs256Issuer struct {
	url, resource string
	secret        []byte
}

// session opens an MCP session whose requests carry a read token for
// subject with roles.
func (i hs256Issuer) session(t *testing.T, endpoint, subject string, roles []string) *mcp.ClientSession {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: i.secret}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: i.url, Subject: subject, Audience: jwt.Audience{i.resource},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).
		Claims(map[string]any{"scope": "toolmesh:read", "roles": roles}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	h := oauthtest.NewStepUp("toolmesh:read", func(string) string { return tok })
	s, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect as %s: %v", subject, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
