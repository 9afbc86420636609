package mcpdoor_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// modernList is a complete stateless tools/list request.
const modernList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`

func withBearer(h http.Header, token string) http.Header {
	h = h.Clone()
	h.Set("Authorization", "Bearer "+token)
	return h
}

// forge builds a compact JWS from raw header and claims JSON, signed by sign
// (nil: no signature).
func forge(header, claims string, sign func([]byte) []byte) string {
	enc := base64.RawURLEncoding.EncodeToString
	in := enc([]byte(header)) + "." + enc([]byte(claims))
	if sign == nil {
		return in + "."
	}
	return in + "." + enc(sign([]byte(in)))
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	res := edgetest.ResourceFor(f.HTTP)
	metaURL := strings.TrimSuffix(f.HTTP.URL, "/") + "/.well-known/oauth-protected-resource/mcp"
	valid := iss.Valid(res, "alice", "toolmesh:read")
	expired, wrongAud, wrongIss, noExp := valid, valid, valid, valid
	expired.Expiry = time.Now().Add(-time.Hour)
	wrongAud.Audience = "https://other.example.com/mcp"
	wrongIss.Issuer = "https://evil.example.com"
	noExp.Expiry = time.Time{}
	noScope := valid
	noScope.Scope = "openid profile"

	claimsJSON, _ := json.Marshal(map[string]any{"sub": "alice", "aud": res, "iss": iss.URL, "exp": time.Now().Add(time.Hour).Unix(), "scope": "toolmesh:admin"})
	rsaPub, _ := x509.MarshalPKIXPublicKey(&iss.RSAKey.PublicKey)
	hmacWith := func(key []byte) func([]byte) []byte {
		return func(in []byte) []byte {
			m := hmac.New(sha256.New, key)
			m.Write(in)
			return m.Sum(nil)
		}
	}
	rsTok := iss.Sign(t, jose.RS256, valid)
	bobTok := iss.Sign(t, jose.RS256, iss.Valid(res, "bob", "toolmesh:admin"))
	critSigner, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: iss.RSAKey},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "rsa-1").WithHeader("crit", []string{"urn:example:binding"}).WithHeader("urn:example:binding", "x"))
	if err != nil {
		t.Fatal(err)
	}
	critTok := iss.Serialize(t, critSigner, valid)
	twoHeaders := func(values ...string) http.Header {
		h := edgetest.ModernHeaders("tools/list")
		h["Authorization"] = values
		return h
	}
	parts := strings.Split(rsTok, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(mustDecode(parts[1])), "toolmesh:read", "toolmesh:admin", 1))) + "." + parts[2]

	cases := []struct {
		name      string
		header    http.Header
		url       string
		status    int
		errorCode string // error= in WWW-Authenticate ("" for none)
		logged    bool
		message   string // in the JSON-RPC error, when set
	}{
		{"valid RS256", withBearer(edgetest.ModernHeaders("tools/list"), rsTok), f.URL, 200, "", false, ""},
		{"valid ES256", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.ES256, valid)), f.URL, 200, "", false, ""},
		{"missing token", edgetest.ModernHeaders("tools/list"), f.URL, 401, "", false, ""},
		{"basic credentials", http.Header{"Authorization": {"Basic YWxpY2U6cHc="}, "Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/list"}}, f.URL, 401, "", false, ""},
		{"token in query string", edgetest.ModernHeaders("tools/list"), f.URL + "?access_token=" + rsTok, 400, "invalid_request", false, ""},
		{"expired", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.RS256, expired)), f.URL, 401, "invalid_token", true, ""},
		{"wrong audience", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.RS256, wrongAud)), f.URL, 401, "invalid_token", true, ""},
		{"wrong issuer", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.RS256, wrongIss)), f.URL, 401, "invalid_token", true, ""},
		{"no expiry", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.RS256, noExp)), f.URL, 401, "invalid_token", true, ""},
		{"tampered claims", withBearer(edgetest.ModernHeaders("tools/list"), tampered), f.URL, 401, "invalid_token", true, ""},
		{"alg none", withBearer(edgetest.ModernHeaders("tools/list"), forge(`{"alg":"none","typ":"JWT"}`, string(claimsJSON), nil)), f.URL, 401, "invalid_token", true, ""},
		{"HS256 without a secret configured", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.HS256, valid)), f.URL, 401, "invalid_token", true, ""},
		// The classic confusion: HS256 keyed with the RSA public key.
		{"HS256 keyed with the RSA public key", withBearer(edgetest.ModernHeaders("tools/list"), forge(`{"alg":"HS256","typ":"JWT","kid":"rsa-1"}`, string(claimsJSON), hmacWith(rsaPub))), f.URL, 401, "invalid_token", true, ""},
		{"garbage", withBearer(edgetest.ModernHeaders("tools/list"), "not.a.jwt"), f.URL, 401, "invalid_token", true, ""},
		{"no toolmesh scope", withBearer(edgetest.ModernHeaders("tools/list"), iss.Sign(t, jose.RS256, noScope)), f.URL, 403, "insufficient_scope", false, ""},
		// Whoever reads another header (a proxy, a log) would disagree
		// with the edge about who is calling.
		{"alice's token then bob's", twoHeaders("Bearer "+rsTok, "Bearer "+bobTok), f.URL, 400, "invalid_request", true, "2 Authorization headers"},
		{"a valid token then junk", twoHeaders("Bearer "+rsTok, "junk"), f.URL, 400, "invalid_request", true, "2 Authorization headers"},
		{"two credentials in one header", twoHeaders("Bearer " + rsTok + ", Bearer " + bobTok), f.URL, 400, "invalid_request", true, "more than one credential"},
		{"two tokens after one scheme", twoHeaders("Bearer " + rsTok + " " + bobTok), f.URL, 400, "invalid_request", true, "more than one credential"},
		{"a critical header parameter", withBearer(edgetest.ModernHeaders("tools/list"), critTok), f.URL, 401, "invalid_token", true, "critical (crit)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.Logs.Events("boundary.validation_failed"))
			resp, body := edgetest.Post(t, c.url, c.header, modernList)
			if resp.StatusCode != c.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			after := len(f.Logs.Events("boundary.validation_failed"))
			if c.logged != (after-before == 1) || after-before > 1 {
				t.Errorf("boundary.validation_failed events = %d, want logged=%v (exactly one)", after-before, c.logged)
			}
			if c.status == 200 {
				return
			}
			www := resp.Header.Get("WWW-Authenticate")
			if !strings.HasPrefix(www, "Bearer ") || !strings.Contains(www, `resource_metadata="`+metaURL+`"`) {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge with resource_metadata=%q", www, metaURL)
			}
			if got := strings.Contains(www, `error="`); (c.errorCode != "") != got || (c.errorCode != "" && !strings.Contains(www, `error="`+c.errorCode+`"`)) {
				t.Errorf("WWW-Authenticate = %q, want error=%q", www, c.errorCode)
			}
			if c.errorCode == "insufficient_scope" && !strings.Contains(www, `scope="toolmesh:read"`) {
				t.Errorf("WWW-Authenticate = %q, want the scope to ask for", www)
			}
			var rpc struct {
				Error struct {
					Code    int
					Message string
				} `json:"error"`
			}
			if json.Unmarshal(body, &rpc) != nil || rpc.Error.Code == 0 || !strings.Contains(rpc.Error.Message, c.message) {
				t.Errorf("body = %s, want a JSON-RPC error mentioning %q", body, c.message)
			}
		})
	}
	if logs := f.Logs.String(); strings.Contains(logs, parts[2]) || strings.Contains(logs, rsTok) {
		t.Error("a bearer token reached the logs")
	}
}

func mustDecode(s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestHS256IsForLoopbackDevelopmentOnly(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	cfg := func(addr string) edge.Config {
		return edge.Config{Mesh: servertest.MeshSigner(), MCP: edge.MCP{Addr: addr}, Contracts: nil,
			Auth: &identity.Config{Issuer: iss.URL, Resource: "http://" + addr + "/mcp", HS256Secret: iss.HSSecret}}
	}
	if _, err := edge.New(cfg("0.0.0.0:7100"), logging.Discard()); err == nil {
		t.Error("an HS256 edge on 0.0.0.0 started")
	}
	if _, err := edge.New(cfg("127.0.0.1:7100"), logging.Discard()); err != nil {
		t.Errorf("an HS256 edge on loopback: %v", err)
	}
	f := edgetest.NewFixture(t, func(c *edge.Config) {
		c.MCP.Addr = "127.0.0.1:7100"
		c.Auth = &identity.Config{Issuer: iss.URL, Resource: "http://127.0.0.1:7100/mcp", HS256Secret: iss.HSSecret}
	})
	tok := iss.Sign(t, jose.HS256, iss.Valid("http://127.0.0.1:7100/mcp", "dev", "toolmesh:write"))
	if resp, body := edgetest.Post(t, f.URL, withBearer(edgetest.ModernHeaders("tools/list"), tok), modernList); resp.StatusCode != 200 {
		t.Errorf("HS256 token on a loopback edge = %d %s", resp.StatusCode, body)
	}
}

func TestDevelopmentModeIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	if _, err := edge.New(edge.Config{Mesh: servertest.MeshSigner(), MCP: edge.MCP{Addr: "0.0.0.0:7100"}}, logging.Discard()); err == nil ||
		!strings.Contains(err.Error(), "loopback") {
		t.Errorf("edge.New without auth on 0.0.0.0 = %v, want a refusal naming loopback", err)
	}
	if _, err := edge.New(edge.Config{Mesh: servertest.MeshSigner(), MCP: edge.MCP{Addr: "[::1]:7100"}}, logging.Discard()); err != nil {
		t.Errorf("edge.New without auth on [::1]: %v", err)
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, err := http.Get(f.HTTP.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource               string   `json:"resource"`
			AuthorizationServers   []string `json:"authorization_servers"`
			ScopesSupported        []string `json:"scopes_supported"`
			BearerMethodsSupported []string `json:"bearer_methods_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d (%v)", path, resp.StatusCode, err)
		}
		if meta.Resource != edgetest.ResourceFor(f.HTTP) || !slices.Equal(meta.AuthorizationServers, []string{iss.URL}) ||
			!slices.Contains(meta.ScopesSupported, identity.ScopeWrite) || !slices.Equal(meta.BearerMethodsSupported, []string{"header"}) {
			t.Errorf("GET %s = %+v", path, meta)
		}
	}
	dev := edgetest.NewFixture(t, nil)
	if resp, err := http.Get(dev.HTTP.URL + "/.well-known/oauth-protected-resource"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("metadata in development mode = %v, %v, want 404 (there is no authorization)", resp.StatusCode, err)
	}
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

func TestScopesAndGrantsDecideWhatACallerSeesAndMayCall(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	grants, err := identity.ParseGrants([]byte(`
subjects:
  alice:
    roles: [owner]
    tools: [testing_grant, testing_peek]
  carol:
    scopes: [toolmesh:admin]
`))
	if err != nil {
		t.Fatal(err)
	}
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t); c.Grants = grants })
	res := edgetest.ResourceFor(f.HTTP)
	tok := func(subject, scope string) string { return iss.Sign(t, jose.ES256, iss.Valid(res, subject, scope)) }
	cases := []struct {
		name        string
		token       string
		visible     []string
		refused     string // a tool the caller may not call
		refusalWhy  string // the scope a step-up challenge names, or why the call is refused
		callable    string
		callableArg map[string]any
	}{
		{"read scope", tok("bob", "toolmesh:read"), []string{"testing_echo", "testing_list_items", "testing_remind_preview", "testing_wait"},
			"testing_write", "toolmesh:write", "testing_echo", map[string]any{"message": "x"}},
		{"write scope", tok("bob", "toolmesh:write"), []string{"testing_echo", "testing_link", "testing_list_items", "testing_remind", "testing_remind_preview", "testing_summarize", "testing_wait", "testing_write"},
			"testing_purge", "toolmesh:admin", "testing_write", map[string]any{"note": "n"}},
		{"admin scope without grant", tok("bob", "toolmesh:read toolmesh:admin"), []string{"testing_echo", "testing_list_items", "testing_purge", "testing_remind_preview", "testing_wait"},
			"testing_grant", "explicit grant", "testing_purge", map[string]any{"agent_id": "a", "confirm": true, "reason": "r"}},
		{"grants file", tok("alice", "toolmesh:read"), []string{"testing_echo", "testing_grant", "testing_list_items", "testing_peek", "testing_remind_preview", "testing_wait"},
			"testing_write", "toolmesh:write", "testing_peek", map[string]any{}},
		{"grant by scope", tok("bob", "toolmesh:read toolmesh:tool:testing_peek"), []string{"testing_echo", "testing_list_items", "testing_peek", "testing_remind_preview", "testing_wait"},
			"testing_grant", "explicit grant", "testing_peek", map[string]any{}},
		{"scope from grants file", tok("carol", "toolmesh:read"), []string{"testing_echo", "testing_list_items", "testing_purge", "testing_remind_preview", "testing_wait"},
			"testing_peek", "explicit grant", "testing_purge", map[string]any{"agent_id": "a", "confirm": true, "reason": "r"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := f.Connect(t, "", c.token, nil)
			if got := toolNames(t, cs); !slices.Equal(got, c.visible) {
				t.Errorf("tools/list = %v, want %v", got, c.visible)
			}
			if strings.HasPrefix(c.refusalWhy, "toolmesh:") {
				// A scope would do: the call gets a step-up challenge.
				_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.refused, Arguments: map[string]any{}})
				if err == nil || !strings.Contains(err.Error(), "Forbidden: "+c.refused+" needs scope "+c.refusalWhy) {
					t.Errorf("calling %s = %v, want a 403 naming scope %s", c.refused, err, c.refusalWhy)
				}
			} else if _, env := edgetest.CallEnv(t, cs, c.refused, map[string]any{}); env.DomainCode != "permission_denied" || !strings.Contains(env.Message, c.refusalWhy) {
				t.Errorf("calling %s = %+v, want permission_denied mentioning %q", c.refused, env, c.refusalWhy)
			}
			if _, env := edgetest.CallEnv(t, cs, c.callable, c.callableArg); env.Status != "ok" {
				t.Errorf("calling %s = %+v, want ok", c.callable, env)
			}
		})
	}
	if n := f.Backend.Calls("Grant") + f.Backend.Calls("Peek"); n != 2 {
		t.Errorf("privileged calls reaching the service = %d, want only the 2 granted ones", n)
	}

	// The list depends on the caller, so clients may cache it only privately.
	resp, body := edgetest.Post(t, f.URL, withBearer(edgetest.ModernHeaders("tools/list"), tok("bob", "toolmesh:read")), modernList)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"cacheScope":"private"`) || !strings.Contains(string(body), `"ttlMs":`) {
		t.Errorf("tools/list = %s, want ttlMs and cacheScope private", body)
	}

	// Identity comes from the token: agent_id, roles from the grants file.
	agentTok := iss.Sign(t, jose.RS256, identitytest.Claims{Subject: "alice", AgentID: "agent-7", Audience: res, Issuer: iss.URL, Expiry: time.Now().Add(time.Hour), Scope: "toolmesh:read"})
	_, env := edgetest.CallEnv(t, f.Connect(t, "", agentTok, nil), "testing_echo", map[string]any{"message": "who", "agent_id": "someone-else"})
	if env.DomainCode != "invalid_argument" {
		t.Errorf("agent_id in tool arguments = %+v, want it refused as an unknown argument", env)
	}
	_, env = edgetest.CallEnv(t, f.Connect(t, "", agentTok, nil), "testing_echo", map[string]any{"message": "who"})
	if !strings.Contains(string(env.Data), `"agent_id":"agent-7"`) || !strings.Contains(string(env.Data), `"subject":"alice"`) || !strings.Contains(string(env.Data), `"roles":["owner"]`) {
		t.Errorf("identity at the service = %s, want agent-7 / alice / owner", env.Data)
	}

	// A token naming only an agent is no actor for admin tools.
	agentOnly := iss.Sign(t, jose.RS256, identitytest.Claims{AgentID: "bot-1", Audience: res, Issuer: iss.URL, Expiry: time.Now().Add(time.Hour), Scope: "toolmesh:admin"})
	_, env = edgetest.CallEnv(t, f.Connect(t, "", agentOnly, nil), "testing_purge", map[string]any{"agent_id": "a", "confirm": true, "reason": "r"})
	if env.DomainCode != "guardrail_violated" || env.Violation != "missing_actor" {
		t.Errorf("admin call without a subject = %+v, want missing_actor", env)
	}
}

func TestLegacySessionsAreBoundToTheirCaller(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	res := edgetest.ResourceFor(f.HTTP)
	alice := iss.Sign(t, jose.RS256, iss.Valid(res, "alice", "toolmesh:read"))
	mallory := iss.Sign(t, jose.RS256, iss.Valid(res, "mallory", "toolmesh:read"))
	resp, body := edgetest.Post(t, f.URL, withBearer(http.Header{}, alice), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize = %d %s", resp.StatusCode, body)
	}
	h := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	if resp, _ := edgetest.Post(t, f.URL, withBearer(h, alice), `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized = %d", resp.StatusCode)
	}
	if resp, body := edgetest.Post(t, f.URL, withBearer(h, mallory), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); resp.StatusCode != http.StatusForbidden || !json.Valid(body) {
		t.Errorf("another caller on alice's session = %d %s, want 403 with a JSON-RPC error", resp.StatusCode, body)
	}
	if resp, body := edgetest.Post(t, f.URL, withBearer(h, alice), `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); resp.StatusCode != 200 {
		t.Errorf("alice on her session = %d %s", resp.StatusCode, body)
	}
	// A call is bound the same way, the session fast path's included.
	const call = `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"mine"}}}`
	if resp, body := edgetest.Post(t, f.URL, withBearer(h, mallory), call); resp.StatusCode != http.StatusForbidden || f.Backend.Calls("Echo") != 0 {
		t.Errorf("another caller's call on alice's session = %d %s, %d calls at the service; want 403 and none", resp.StatusCode, body, f.Backend.Calls("Echo"))
	}
	if resp, body := edgetest.Post(t, f.URL, withBearer(h, alice), call); resp.StatusCode != 200 || !strings.Contains(string(body), `"subject":"alice"`) {
		t.Errorf("alice's call on her session = %d %s", resp.StatusCode, body)
	}
	if n := len(f.Logs.Events("mcp.session_call_served")); n != 1 {
		t.Errorf("the session fast path served %d calls, want alice's", n)
	}
}

func TestToolsListIsPaginated(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.MCP.ToolsPageSize = 3 })
	for _, v := range edgetest.AllVersions {
		cs := f.Connect(t, v, "", nil)
		first, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Tools) != 3 || first.NextCursor == "" {
			t.Errorf("%s: first page = %d tools, cursor %q; want 3 and a cursor", v, len(first.Tools), first.NextCursor)
		}
		if got := toolNames(t, cs); len(got) != 11 || !slices.IsSorted(got) {
			t.Errorf("%s: all pages = %v, want 11 sorted tools", v, got)
		}
		if _, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: "!!not-a-cursor"}); err == nil {
			t.Errorf("%s: a forged cursor was accepted", v)
		}
	}
}
