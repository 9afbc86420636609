package mcpdoor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/oauthtest"
)

// callBody is a complete stateless tools/call request of tool.
func callBody(id int, tool, args string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
		"name": tool, "arguments": json.RawMessage(args),
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}},
	}})
	return string(b)
}

// callHeaders are the headers of a stateless tools/call of tool.
func callHeaders(tool string) http.Header {
	h := edgetest.ModernHeaders("tools/call")
	h.Set("Mcp-Name", tool)
	return h
}

// challengeOf parses the Bearer challenge of a response.
func challengeOf(t *testing.T, resp *http.Response) map[string]string {
	t.Helper()
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
		t.Fatalf("WWW-Authenticate = %q (%v), want one Bearer challenge", resp.Header.Values("WWW-Authenticate"), err)
	}
	return cs[0].Params
}

// TestStepUpChallengesNameTheScopesACallNeeds: a tools/call whose tool
// needs a scope the token lacks gets 403 with an insufficient_scope
// challenge naming that scope (and the toolmesh scopes the token already
// holds that it does not cover), and a JSON-RPC error; a privileged tool
// keeps its permission_denied envelope, since no scope would help.
func TestStepUpChallengesNameTheScopesACallNeeds(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	res := edgetest.ResourceFor(f.HTTP)
	metaURL := strings.TrimSuffix(f.HTTP.URL, "/") + "/.well-known/oauth-protected-resource/mcp"
	tok := func(scope string) string { return iss.Sign(t, jose.ES256, iss.Valid(res, "alice", scope)) }
	cases := []struct {
		name, scope, tool, args string
		want                    string // the challenged scopes
	}{
		{"read token, write tool", "toolmesh:read", "testing_write", `{"note":"n"}`, "toolmesh:write"},
		{"read and admin token, write tool", "toolmesh:read toolmesh:admin", "testing_write", `{"note":"n"}`, "toolmesh:write toolmesh:admin"},
		{"write token, admin tool", "toolmesh:write", "testing_purge", `{"agent_id":"a","confirm":true,"reason":"r"}`, "toolmesh:admin toolmesh:write"},
		{"admin token, read tool", "toolmesh:admin", "testing_echo", `{"message":"m"}`, "toolmesh:read toolmesh:admin"},
		{"a tool grant is kept", "toolmesh:read toolmesh:tool:testing_peek", "testing_write", `{"note":"n"}`, "toolmesh:write toolmesh:tool:testing_peek"},
		{"no toolmesh scope at all", "openid", "testing_write", `{"note":"n"}`, "toolmesh:write"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := edgetest.Post(t, f.URL, withBearer(callHeaders(c.tool), tok(c.scope)), callBody(i+1, c.tool, c.args))
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status = %d, want 403: %s", resp.StatusCode, body)
			}
			ch := challengeOf(t, resp)
			if ch["error"] != "insufficient_scope" || ch["scope"] != c.want || ch["resource_metadata"] != metaURL {
				t.Errorf("challenge = %v, want insufficient_scope, scope %q, resource_metadata %q", ch, c.want, metaURL)
			}
			var rpc struct {
				ID    int `json:"id"`
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(body, &rpc) != nil || rpc.ID != i+1 || rpc.Error.Code == 0 || !strings.Contains(rpc.Error.Message, c.tool) {
				t.Errorf("body = %s, want a JSON-RPC error for id %d naming %s", body, i+1, c.tool)
			}
		})
	}
	if n := f.Backend.Calls("Write") + f.Backend.Calls("Purge") + f.Backend.Calls("Echo"); n != 0 {
		t.Errorf("calls reaching the service = %d, want none", n)
	}

	t.Run("privileged tool without a grant", func(t *testing.T) {
		resp, body := edgetest.Post(t, f.URL, withBearer(callHeaders("testing_grant"), tok("toolmesh:admin")), callBody(9, "testing_grant", `{}`))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `\"domain_code\":\"permission_denied\"`) || !strings.Contains(string(body), "explicit grant") {
			t.Errorf("a privileged tool without a grant = %d %s, want 200 with a permission_denied envelope", resp.StatusCode, body)
		}
	})
	t.Run("tools/list still hides what the caller may not call", func(t *testing.T) {
		names := toolNames(t, f.Connect(t, "", tok("toolmesh:read"), nil))
		if slices.Contains(names, "testing_write") || !slices.Contains(names, "testing_echo") {
			t.Errorf("tools/list for a read token = %v", names)
		}
	})
	t.Run("read-only edge", func(t *testing.T) {
		ro := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t); c.ReadOnly = true })
		tok := iss.Sign(t, jose.ES256, iss.Valid(edgetest.ResourceFor(ro.HTTP), "alice", "toolmesh:read"))
		// No scope makes a write tool run on a read-only edge.
		resp, body := edgetest.Post(t, ro.URL, withBearer(callHeaders("testing_write"), tok), callBody(1, "testing_write", `{"note":"n"}`))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("WWW-Authenticate") != "" {
			t.Errorf("a write tool on a read-only edge = %d %s, want a tool result and no challenge", resp.StatusCode, body)
		}
	})
}

// TestAClientStepsUpAndRetries: the go-sdk client, given an OAuth handler,
// answers the challenge with a wider token and its retried call runs, on
// every protocol era; a 2025-era session carries on with the new token.
func TestAClientStepsUpAndRetries(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	res := edgetest.ResourceFor(f.HTTP)
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			h := oauthtest.NewStepUp("toolmesh:read", func(scope string) string { return iss.Sign(t, jose.RS256, iss.Valid(res, "alice", scope)) })
			client := mcp.NewClient(&mcp.Implementation{Name: "step-up", Version: "1"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: f.URL, OAuthHandler: h}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			before := f.Backend.Calls("Write")
			if _, env := edgetest.CallEnv(t, cs, "testing_write", map[string]any{"note": "n"}); env.Status != "ok" {
				t.Errorf("testing_write after the step-up = %+v, want ok", env)
			}
			if f.Backend.Calls("Write") != before+1 || !slices.Equal(h.Challenged(), []string{"toolmesh:write"}) {
				t.Errorf("writes = %d, challenges = %q; want one write after one challenge for toolmesh:write", f.Backend.Calls("Write")-before, h.Challenged())
			}
			// The wider token serves what the narrow one did.
			if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "m"}); env.Status != "ok" || len(h.Challenged()) != 1 {
				t.Errorf("testing_echo with the new token = %+v (challenges %q), want ok without another challenge", env, h.Challenged())
			}
		})
	}
}
