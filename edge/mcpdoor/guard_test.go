package mcpdoor_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// send is post with a chosen Host and Origin.
func send(t *testing.T, url, host, origin string, h http.Header, body string) (*http.Response, []byte) {
	t.Helper()
	h = h.Clone()
	if origin != "" {
		h.Set("Origin", origin)
	}
	if host != "" {
		h.Set("X-Test-Host", host)
	}
	return edgetest.Post(t, url, h, body)
}

func TestOriginAndHostMatrix(t *testing.T) {
	t.Parallel()
	// A loopback edge in development mode.
	local := edgetest.NewFixture(t, func(c *edge.Config) {
		c.AllowedHosts = []string{"mcp.internal"}
		c.AllowedOrigins = []string{"https://app.example.com"}
	})
	port := local.HTTP.Listener.Addr().String()[strings.LastIndex(local.HTTP.Listener.Addr().String(), ":"):]

	// A non-loopback edge (bound to every interface, behind a public name):
	// served here on loopback, it must still apply the non-loopback rules.
	iss := identitytest.NewIssuer(t)
	const resource = "https://mcp.example.com/mcp"
	public := edgetest.NewFixture(t, func(c *edge.Config) {
		c.MCP.Addr = "0.0.0.0:8443"
		c.Auth = iss.AuthConfig(t)
		c.Auth.Resource = resource
		c.AllowedHosts = []string{"edge.internal:8443"}
		c.AllowedOrigins = []string{"https://app.example.com"}
	})
	token := iss.Sign(t, jose.ES256, iss.Valid(resource, "alice", "toolmesh:read"))

	cases := []struct {
		name   string
		f      *edgetest.Fixture
		host   string
		origin string
		want   int
	}{
		{"loopback: 127.0.0.1", local, "127.0.0.1" + port, "", 200},
		{"loopback: localhost", local, "localhost" + port, "", 200},
		{"loopback: [::1]", local, "[::1]" + port, "", 200},
		{"loopback: configured host", local, "mcp.internal", "", 200},
		{"loopback: rebinding name", local, "attacker.example" + port, "", 403},
		{"loopback: loopback lookalike", local, "127.0.0.1.attacker.example", "", 403},
		{"loopback: local page origin", local, "", "http://localhost:6274", 200},
		{"loopback: local IP origin", local, "", "http://127.0.0.1:3000", 200},
		{"loopback: configured origin", local, "", "https://app.example.com", 200},
		{"loopback: foreign origin", local, "", "https://attacker.example", 403},
		{"loopback: null origin", local, "", "null", 403},
		{"loopback: origin with a path", local, "", "http://localhost:6274/x", 403},

		{"public: resource host", public, "mcp.example.com", "", 200},
		{"public: configured host and port", public, "edge.internal:8443", "", 200},
		{"public: configured host, other port", public, "edge.internal:9999", "", 403},
		{"public: loopback IP", public, "127.0.0.1" + port, "", 403},
		{"public: localhost", public, "localhost" + port, "", 403},
		{"public: rebinding name", public, "attacker.example", "", 403},
		{"public: resource origin", public, "mcp.example.com", "https://mcp.example.com", 200},
		{"public: configured origin", public, "mcp.example.com", "https://app.example.com", 200},
		{"public: local page origin", public, "mcp.example.com", "http://localhost:6274", 403},
		{"public: foreign origin", public, "mcp.example.com", "https://attacker.example", 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := edgetest.ModernHeaders("tools/list")
			if c.f == public {
				h = withBearer(h, token)
			}
			resp, body := send(t, c.f.URL, c.host, c.origin, h, modernList)
			if resp.StatusCode != c.want {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			if c.want == 403 && !json.Valid(body) {
				t.Errorf("403 body = %s, want a JSON-RPC error", body)
			}
			if c.want == 200 && c.origin != "" && resp.Header.Get("Access-Control-Allow-Origin") != c.origin {
				t.Errorf("Access-Control-Allow-Origin = %q, want %q", resp.Header.Get("Access-Control-Allow-Origin"), c.origin)
			}
		})
	}

	// CORS preflight: allowed origins get the headers, others a 403.
	for origin, want := range map[string]int{"http://localhost:6274": 204, "https://attacker.example": 403} {
		req, _ := http.NewRequest(http.MethodOptions, local.URL, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := edgetest.TestClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("preflight from %s = %d, want %d", origin, resp.StatusCode, want)
		}
		if want == 204 && !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Mcp-Protocol-Version") {
			t.Errorf("preflight allow headers = %q", resp.Header.Get("Access-Control-Allow-Headers"))
		}
	}
}

func TestRequestBodyCap(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.MCP.MaxBodyBytes = 2048 })
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"` + strings.Repeat("x", 4096) + `"}}}`
	for name, h := range map[string]http.Header{
		"stateless": {"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"testing_echo"}},
		"legacy":    {},
	} {
		resp, body := edgetest.Post(t, f.URL, h, big)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"code":-32600`) {
			t.Errorf("%s: oversized body = %d %s, want 413 with a JSON-RPC error", name, resp.StatusCode, body)
		}
	}
	if n := f.Backend.Calls("Echo"); n != 0 {
		t.Errorf("an oversized call reached the service")
	}
}

func TestSecretsNeverReachErrorsOrLogs(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.CallTimeout = 2 * time.Second })
	cs := f.Connect(t, "", "", nil)
	secrets := []string{"sk-live0123456789abcdefghijkl", "hunter2hunter2", "ghp_abcdefghijklmnopqrstuvwx", "pa55w0rd", "hunter2-db-secret",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlLXZhbHVl"}
	calls := []map[string]any{
		{"message": "x", "fail": "sk-live0123456789abcdefghijkl"},                                           // echoed by the decoder
		{"message": "x", "password=hunter2hunter2": "ghp_abcdefghijklmnopqrstuvwx"},                         // an unknown argument
		{"message": strings.Repeat("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlLXZhbHVl ", 5)}, // too long
		{"message": "x", "fail": "FAILURE_INTERNAL_SECRET"},                                                 // a service error quoting secrets
	}
	for _, args := range calls {
		res, env := edgetest.CallEnv(t, cs, "testing_echo", args)
		if !res.IsError {
			t.Fatalf("call %v = %+v, want an error", args, env)
		}
		out, _ := json.Marshal(res)
		for _, s := range secrets {
			if strings.Contains(string(out), s) {
				t.Errorf("result %s contains %q", out, s)
			}
		}
	}
	if !strings.Contains(testingsvc.SecretInError, "hunter2") {
		t.Fatal("the test service no longer puts a secret in its error")
	}
	logs := f.Logs.String()
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the edge's log contains %q", s)
		}
	}
	if len(f.Logs.Events("boundary.validation_failed")) != 3 {
		t.Errorf("boundary.validation_failed events = %d, want one per rejected call (3)", len(f.Logs.Events("boundary.validation_failed")))
	}
}
