package identity

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The edge's tests (edge/auth_test.go, edge/stepup_test.go) drive these
// rules over HTTP with RS256 and ES256 tokens; these tests pin each rule
// on its own.

const (
	testIssuer   = "https://auth.example.com"
	testResource = "https://mcp.example.com/mcp"
)

var testSecret = []byte("dev-secret-0123456789abcdef-0123456789")

func TestParseGrantsRefusesWhatWouldSilentlyGrantNothing(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown key":          "subjects:\n  alice:\n    tool: [x]\n",
		"not a toolmesh scope": "subjects:\n  alice:\n    scopes: [openid]\n",
		"empty role":           "subjects:\n  alice:\n    roles: [\"\"]\n",
		"empty subject":        "subjects:\n  \" \":\n    roles: [owner]\n",
	} {
		if _, err := ParseGrants([]byte(doc)); err == nil || !strings.HasPrefix(err.Error(), "grants file:") {
			t.Errorf("%s: ParseGrants = %v, want a grants file error", name, err)
		}
	}
	g, err := ParseGrants(nil)
	if err != nil || g.lookup("alice") != nil {
		t.Errorf("an empty grants file = %+v, %v; want one granting nothing", g, err)
	}
}

func TestGrantsMergeTheSubjectsEntryWithTheWildcard(t *testing.T) {
	g, err := ParseGrants([]byte(`
subjects:
  alice: {roles: [owner], tools: [credits_grant]}
  "*": {scopes: [toolmesh:read]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := g.lookup("alice"); !slices.Equal(got.Roles, []string{"owner"}) || !slices.Equal(got.Tools, []string{"credits_grant"}) || !slices.Equal(got.Scopes, []string{ScopeRead}) {
		t.Errorf("alice's grant = %+v", got)
	}
	for _, subject := range []string{"bob", ""} {
		if got := g.lookup(subject); got == nil || len(got.Roles) != 0 || !slices.Equal(got.Scopes, []string{ScopeRead}) {
			t.Errorf("grant of %q = %+v, want the wildcard's only", subject, got)
		}
	}
	known := func(name string) bool { return name == "credits_grant" }
	if err := g.Check(known); err != nil {
		t.Errorf("Check = %v", err)
	}
	if err := g.Check(func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), `"credits_grant"`) {
		t.Errorf("Check with the tool unknown = %v, want it named", err)
	}
}

func TestScopesAndGrantsDecideWhichToolsMayBeCalled(t *testing.T) {
	read := &toolcatalog.Tool{Name: "r", Kind: toolv1.Kind_KIND_READ}
	write := &toolcatalog.Tool{Name: "w", Kind: toolv1.Kind_KIND_WRITE}
	admin := &toolcatalog.Tool{Name: "a", Kind: toolv1.Kind_KIND_ADMIN}
	priv := &toolcatalog.Tool{Name: "p", Kind: toolv1.Kind_KIND_READ, Privileged: true}
	cases := []struct {
		name  string
		p     *Principal
		may   []*toolcatalog.Tool
		mayNo []*toolcatalog.Tool
	}{
		{"read", newPrincipal("s", "s", []string{ScopeRead}, nil, nil), []*toolcatalog.Tool{read}, []*toolcatalog.Tool{write, admin, priv}},
		{"write", newPrincipal("s", "s", []string{ScopeWrite}, nil, nil), []*toolcatalog.Tool{read, write}, []*toolcatalog.Tool{admin, priv}},
		{"admin", newPrincipal("s", "s", []string{ScopeAdmin}, nil, nil), []*toolcatalog.Tool{admin}, []*toolcatalog.Tool{read, write, priv}},
		{"grant by scope", newPrincipal("s", "s", []string{ScopeToolPrefix + "p"}, nil, nil), []*toolcatalog.Tool{priv}, []*toolcatalog.Tool{read}},
		{"grant by file", newPrincipal("s", "s", nil, nil, &Grant{Tools: []string{"p"}, Scopes: []string{ScopeWrite}}), []*toolcatalog.Tool{priv, read, write}, []*toolcatalog.Tool{admin}},
		{"development", Dev("local"), []*toolcatalog.Tool{read, write, admin, priv}, nil},
	}
	for _, c := range cases {
		// The grants a principal's mesh tokens carry permit what the
		// principal may call, no more: work done later on its behalf (a
		// workflow run) is held to them.
		grants := c.p.Caller().Grants
		for _, tool := range c.may {
			if ok, why := c.p.MayCall(tool); !ok {
				t.Errorf("%s: may not call %s: %s", c.name, tool.Name, why)
			}
			if ok, why := tool.PermittedBy(grants); !ok {
				t.Errorf("%s: its mesh grants %q do not permit %s: %s", c.name, grants, tool.Name, why)
			}
		}
		for _, tool := range c.mayNo {
			if ok, why := c.p.MayCall(tool); ok || why == "" {
				t.Errorf("%s: MayCall(%s) = %v %q, want a refusal saying why", c.name, tool.Name, ok, why)
			}
			if ok, why := tool.PermittedBy(grants); ok || why == "" {
				t.Errorf("%s: its mesh grants %q permit %s (%q), want a refusal saying why", c.name, grants, tool.Name, why)
			}
		}
	}
	a := newPrincipal("s", "s", []string{ScopeRead, ScopeToolPrefix + "p"}, nil, nil)
	b := newPrincipal("t", "t", []string{ScopeToolPrefix + "p", ScopeRead, "openid"}, []string{"owner"}, nil)
	if a.PermissionKey() != b.PermissionKey() || a.PermissionKey() == newPrincipal("s", "s", []string{ScopeRead}, nil, nil).PermissionKey() {
		t.Error("PermissionKey does not name exactly the permissions")
	}
}

func TestInsufficientScopeAsksForWhatWouldHelp(t *testing.T) {
	write := &toolcatalog.Tool{Name: "tasks_create", Kind: toolv1.Kind_KIND_WRITE}
	priv := &toolcatalog.Tool{Name: "credits_grant", Kind: toolv1.Kind_KIND_ADMIN, Privileged: true}
	reader := newPrincipal("s", "s", []string{ScopeRead, ScopeAdmin, "openid"}, nil, nil)
	f := InsufficientScope(reader, write, false)
	if f == nil || f.Status != http.StatusForbidden || f.Code != "insufficient_scope" || f.Scope != "toolmesh:write toolmesh:admin" ||
		f.Text() != "Forbidden: tasks_create needs scope toolmesh:write" {
		t.Errorf("a reader calling a WRITE tool = %+v, want a step-up keeping its admin scope", f)
	}
	if f := InsufficientScope(reader, write, true); f != nil {
		t.Errorf("on a read-only edge = %+v, want none (no scope helps)", f)
	}
	if f := InsufficientScope(reader, priv, false); f != nil {
		t.Errorf("a privileged tool = %+v, want none (only a grant helps)", f)
	}
	none := newPrincipal("s", "s", []string{"openid"}, nil, nil)
	if f := InsufficientScope(none, nil, false); f == nil || f.Scope != ScopeRead {
		t.Errorf("a token without toolmesh scopes = %+v, want a step-up to %s", f, ScopeRead)
	}
}

func testToken(t *testing.T, c jwt.Claims, extra map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: testSecret}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(c).Claims(extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAuthenticateTurnsATokenIntoAPrincipal(t *testing.T) {
	grants, err := ParseGrants([]byte("subjects:\n  alice: {roles: [owner]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Issuer: testIssuer, Resource: testResource, HS256Secret: testSecret}, grants, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	valid := jwt.Claims{Issuer: testIssuer, Subject: "alice", Audience: jwt.Audience{testResource}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	expired := valid
	expired.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	request := func(token, query string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/mcp"+query, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}

	p, info, fail := a.Authenticate(request(testToken(t, valid, map[string]any{"agent_id": "agent-7", "scope": "toolmesh:read"}), ""))
	if fail != nil {
		t.Fatalf("a valid token: %+v", fail)
	}
	if p.Subject != "alice" || p.Agent != "agent-7" || !slices.Equal(p.Roles, []string{"owner"}) || !slices.Equal(p.Scopes, []string{ScopeRead}) {
		t.Errorf("principal = %+v, want alice acting as agent-7, owner by the grants file", p)
	}
	if FromTokenInfo(info) != p || info.UserID != "s:alice" || FromTokenInfo(nil) != nil {
		t.Errorf("token info = %+v, want it to carry the principal", info)
	}

	for _, c := range []struct {
		name, token, query string
		status             int
		code               string
	}{
		{"no token", "", "", http.StatusUnauthorized, ""},
		{"token in the query", "", "?access_token=x", http.StatusBadRequest, "invalid_request"},
		{"expired", testToken(t, expired, nil), "", http.StatusUnauthorized, "invalid_token"},
		{"no agent", testToken(t, jwt.Claims{Issuer: testIssuer, Audience: jwt.Audience{testResource}, Expiry: valid.Expiry}, nil), "", http.StatusUnauthorized, "invalid_token"},
	} {
		_, _, fail := a.Authenticate(request(c.token, c.query))
		if fail == nil || fail.Status != c.status || fail.Code != c.code {
			t.Errorf("%s: failure = %+v, want %d %q", c.name, fail, c.status, c.code)
			continue
		}
		if ch := a.Challenge(fail); !strings.HasPrefix(ch, "Bearer ") || !strings.HasSuffix(ch, `resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"`) {
			t.Errorf("%s: challenge = %s", c.name, ch)
		}
	}
	if got := a.MetadataPaths(); !slices.Equal(got, []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"}) {
		t.Errorf("MetadataPaths = %v", got)
	}
}

func TestNewRefusesWeakConfiguration(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no issuer":           {Resource: testResource, HS256Secret: testSecret},
		"relative resource":   {Issuer: testIssuer, Resource: "/mcp", HS256Secret: testSecret},
		"short HS256 secret":  {Issuer: testIssuer, Resource: testResource, HS256Secret: []byte("short")},
		"no keys":             {Issuer: testIssuer, Resource: testResource},
		"JWKS that is no set": {Issuer: testIssuer, Resource: testResource, JWKS: []byte("[]")},
	} {
		if _, err := New(cfg, nil, logging.Discard()); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
