package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/oauthtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// These tests run the built binary (binmesh_test.go) and probe its
// credentials and scope challenges from outside.

// oauthIssuer signs access tokens for an edge, as an authorization server
// would.
type oauthIssuer struct {
	url  string
	key  *rsa.PrivateKey
	jwks string // the JWKS file
}

func newOAuthIssuer(t *testing.T) *oauthIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &oauthIssuer{url: "https://auth.example.com", key: key, jwks: writeFile(t, t.TempDir(), "jwks.json", string(set))}
}

// token signs a token for subject with scope, for the edge at resource;
// header adds JOSE header parameters.
func (i *oauthIssuer) token(t *testing.T, resource, subject, scope string, header map[string]any) string {
	t.Helper()
	return i.sign(t, i.url, resource, subject, scope, header)
}

// tokenFrom is token as issued by the issuer at url.
func (i *oauthIssuer) tokenFrom(t *testing.T, url, resource, subject, scope string) string {
	t.Helper()
	return i.sign(t, url, resource, subject, scope, nil)
}

func (i *oauthIssuer) sign(t *testing.T, issuer, resource, subject, scope string, header map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1")
	for k, v := range header {
		opts = opts.WithHeader(jose.HeaderKey(k), v)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: i.key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Subject: subject, Issuer: issuer, Audience: jwt.Audience{resource},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour)), IssuedAt: jwt.NewNumericDate(time.Now())}).
		Claims(map[string]any{"scope": scope}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// authServer is an OAuth authorization server for one user, alice, who
// consents to whatever is asked: authorization code with PKCE, tokens
// signed by the issuer's key.
type authServer struct {
	*httptest.Server
	mu       sync.Mutex
	codes    map[string]authGrant
	requests []string // the scopes asked for, in order
}

type authGrant struct{ scope, challenge, resource string }

func (a *authServer) scopes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

func startAuthServer(t *testing.T, iss *oauthIssuer) *authServer {
	t.Helper()
	a := &authServer{codes: map[string]authGrant{}}
	mux := http.NewServeMux()
	a.Server = httptest.NewServer(mux)
	t.Cleanup(a.Close)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": a.URL, "authorization_endpoint": a.URL + "/authorize", "token_endpoint": a.URL + "/token",
			"registration_endpoint": a.URL + "/register", "response_types_supported": []string{"code"},
			"grant_types_supported": []string{"authorization_code"}, "code_challenge_methods_supported": []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"none"},
		})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		var meta map[string]any
		_ = json.NewDecoder(r.Body).Decode(&meta)
		meta["client_id"] = "ts-client"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(meta)
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" {
			http.Error(w, "PKCE S256 required", http.StatusBadRequest)
			return
		}
		code := fmt.Sprintf("code-%d", time.Now().UnixNano())
		a.mu.Lock()
		a.codes[code] = authGrant{scope: q.Get("scope"), challenge: q.Get("code_challenge"), resource: q.Get("resource")}
		a.requests = append(a.requests, q.Get("scope"))
		a.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+q.Get("state"), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		g, ok := a.codes[r.FormValue("code")]
		delete(a.codes, r.FormValue("code"))
		a.mu.Unlock()
		sum := sha256.Sum256([]byte(r.FormValue("code_verifier")))
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": iss.tokenFrom(t, a.URL, g.resource, "alice", g.scope),
			"token_type": "Bearer", "expires_in": 3600, "scope": g.scope})
	})
	return a
}

// TestCredentialsAtTheProcessBoundary runs `toolmesh serve tasks` and an
// edge with OAuth on, and checks from outside: two credentials are 400
// invalid_request at the edge and at the service; a read token calling a
// write tool gets a step-up challenge naming the write scope, and the
// go-sdk client that answers it creates the task; a token with a critical
// header is refused, saying so.
func TestCredentialsAtTheProcessBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	bin := buildToolmesh(t)
	data := testMeshDir(t)
	iss := newOAuthIssuer(t)
	tasksAddr, edgeAddr := porttest.Addr(t), porttest.Addr(t)
	startBin(t, bin, "http://"+tasksAddr+"/healthz", "serve", "tasks", "--addr", tasksAddr, "--data", data)
	startBin(t, bin, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off",
		"--service", "tasks=http://"+tasksAddr, "--issuer", iss.url, "--jwks-file", iss.jwks)
	url := "http://" + edgeAddr + "/mcp"
	resource := url
	client := &http.Client{}

	t.Run("two credentials at the edge", func(t *testing.T) {
		alice := iss.token(t, resource, "alice", "toolmesh:write", nil)
		bob := iss.token(t, resource, "bob", "toolmesh:write", nil)
		for name, values := range map[string][]string{
			"alice then bob":         {"Bearer " + alice, "Bearer " + bob},
			"a valid token and junk": {"Bearer " + alice, "junk"},
			"two in one header":      {"Bearer " + alice + ", Bearer " + bob},
		} {
			resp, body := toolCall(t, client, url, "tasks_list", `{}`, http.Header{"Authorization": values})
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_request"`) || !strings.Contains(body, `"error"`) {
				t.Errorf("%s: %d %q %s, want 400 invalid_request with a JSON-RPC error", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
		}
	})

	t.Run("two mesh tokens at a service", func(t *testing.T) {
		signer := servertest.MeshSigner()
		mint := func(agent string) string {
			tok, err := signer.Mint(mesh.Caller{Subject: agent, Agent: agent}, time.Now(), time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+tasksAddr+"/"+tasksv1connect.TasksServiceName+"/List", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header["Authorization"] = []string{"Bearer " + mint("alice"), "Bearer " + mint("bob")}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
			t.Errorf("a Connect call with two mesh tokens = %d %s, want 400 invalid_request", resp.StatusCode, body)
		}
	})

	t.Run("step-up", func(t *testing.T) {
		resp, body := toolCall(t, client, url, "tasks_create", `{"description":"needs write"}`,
			http.Header{"Authorization": {"Bearer " + iss.token(t, resource, "alice", "toolmesh:read", nil)}})
		cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
		if resp.StatusCode != http.StatusForbidden || err != nil || len(cs) != 1 || cs[0].Params["error"] != "insufficient_scope" ||
			cs[0].Params["scope"] != "toolmesh:write" || cs[0].Params["resource_metadata"] != "http://"+edgeAddr+"/.well-known/oauth-protected-resource/mcp" {
			t.Errorf("tasks_create with a read token = %d %q, want 403 insufficient_scope naming toolmesh:write", resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
		}
		if !strings.Contains(body, `"id":7`) || !strings.Contains(body, `"error"`) {
			t.Errorf("body = %s, want a JSON-RPC error for the call", body)
		}
		for _, v := range []string{"2026-07-28", "2025-11-25"} {
			h := oauthtest.NewStepUp("toolmesh:read", func(scope string) string { return iss.token(t, resource, "alice", scope, nil) })
			mc := mcp.NewClient(&mcp.Implementation{Name: "step-up", Version: "1"}, nil)
			s, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, OAuthHandler: h}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "after step-up " + v}})
			s.Close()
			if err != nil {
				t.Fatalf("%s: tasks_create after the step-up: %v", v, err)
			}
			if env := mcpResultEnvelope(res); env.Status != "ok" || !strings.Contains(string(env.Data), "after step-up") || !slices.Equal(h.Challenged(), []string{"toolmesh:write"}) {
				t.Errorf("%s: tasks_create = %+v after challenges %q, want the task created after one challenge for toolmesh:write", v, env, h.Challenged())
			}
		}
	})

	t.Run("step-up with the TypeScript SDK", func(t *testing.T) {
		script := filepath.Join(nodetest.Install(t, filepath.Join("testdata", "tsclient")), "stepup.mjs")
		as := startAuthServer(t, iss)
		addr := porttest.Addr(t)
		startBin(t, bin, "http://"+addr+"/healthz", "edge", "--addr", addr, "--data", data, "--metrics-addr", "off",
			"--service", "tasks=http://"+tasksAddr, "--issuer", as.URL, "--jwks-file", iss.jwks)
		url := "http://" + addr + "/mcp"
		out, err := exec.Command("node", script, url, iss.tokenFrom(t, as.URL, url, "alice", "toolmesh:read"), "tasks_create", `{"description":"from typescript"}`).CombinedOutput()
		if err != nil {
			t.Fatalf("the TypeScript client failed: %v\n%s", err, out)
		}
		var challenged, created bool
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var step struct {
				Step   string `json:"step"`
				Scope  string `json:"scope"`
				Result *struct {
					IsError           bool     `json:"isError"`
					StructuredContent envelope `json:"structuredContent"`
				} `json:"result"`
			}
			if json.Unmarshal([]byte(line), &step) != nil {
				continue
			}
			challenged = challenged || (step.Step == "challenged" && step.Scope == "toolmesh:write")
			created = created || (step.Step == "result" && step.Result != nil && !step.Result.IsError && strings.Contains(string(step.Result.StructuredContent.Data), "from typescript"))
		}
		if !challenged || !created || !slices.Equal(as.scopes(), []string{"toolmesh:write"}) {
			t.Errorf("the TypeScript client printed\n%s\nand asked the authorization server for %q; want one step-up to toolmesh:write, then the task created", out, as.scopes())
		}
	})

	t.Run("critical header", func(t *testing.T) {
		tok := iss.token(t, resource, "alice", "toolmesh:read", map[string]any{"crit": []string{"urn:x"}, "urn:x": true})
		resp, body := toolCall(t, client, url, "tasks_list", `{}`, http.Header{"Authorization": {"Bearer " + tok}})
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "critical (crit)") || strings.Contains(body, "signature") {
			t.Errorf("a token with crit = %d %s, want 401 naming the critical header", resp.StatusCode, body)
		}
	})
}
