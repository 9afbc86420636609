package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/nodetest"
	"github.com/toolmesh/toolmesh/internal/oauthtest"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/servertest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// These tests run the built binary, as separate processes, and probe its
// HTTP trust boundary from outside: credentials, scope challenges, answers
// for the calls in flight when a process stops or a dependency dies, and
// slow or oversized clients.

// buildToolmesh builds the binary for one test.
func buildToolmesh(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toolmesh")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build toolmesh: %v\n%s", err, out)
	}
	return bin
}

// testMeshDir writes the mesh key pair of servertest.MeshSigner, which
// every servertest service accepts, as a data directory's mesh.key and
// mesh.pub.
func testMeshDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	seed := sha256.Sum256([]byte("toolmesh servertest mesh key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	if !key.Public().(ed25519.PublicKey).Equal(servertest.MeshSigner().PublicKey()) {
		t.Fatal("the servertest mesh key changed")
	}
	priv, err := mesh.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := mesh.MarshalPublicKey(servertest.MeshSigner().PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, meshKeyFile, string(priv))
	writeFile(t, dir, meshPubKeyFile, string(pub))
	return dir
}

// binProcess is a running toolmesh process.
type binProcess struct {
	name string
	cmd  *exec.Cmd
	logs *logtest.Buffer
	done chan error
}

// startBin runs `bin args...` until the test ends and waits until health
// answers 200 (no wait when health is empty).
func startBin(t *testing.T, bin, health string, args ...string) *binProcess {
	t.Helper()
	p := &binProcess{name: strings.Join(args[:min(2, len(args))], " "), cmd: exec.Command(bin, args...), logs: &logtest.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.logs)
		}
	})
	if health != "" {
		if err := waitHealthy(context.Background(), health, nil, 60*time.Second); err != nil {
			t.Fatalf("%s did not become healthy: %v\n%s", p.name, err, p.logs)
		}
	}
	return p
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (p *binProcess) stop(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop after SIGTERM", p.name)
		return nil
	}
}

// toolCall sends one stateless tools/call (the shape the edge's fast path
// serves) with optional extra headers and returns the status and body.
func toolCall(t *testing.T, client *http.Client, url, tool, args string, h http.Header) (*http.Response, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

// resultEnvelope reads the envelope of a tools/call answer (SSE or JSON).
func resultEnvelope(t *testing.T, body string) envelope {
	t.Helper()
	if i := strings.Index(body, "data: "); i >= 0 {
		body = body[i+len("data: "):]
	}
	var msg struct {
		Result struct {
			StructuredContent envelope `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &msg); err != nil {
		t.Fatalf("not a tools/call result: %s", body)
	}
	return msg.Result.StructuredContent
}

func mcpResultEnvelope(res *mcp.CallToolResult) envelope {
	var env envelope
	if len(res.Content) == 1 {
		if text, ok := res.Content[0].(*mcp.TextContent); ok {
			_ = json.Unmarshal([]byte(text.Text), &env)
		}
	}
	return env
}

// --- credentials ------------------------------------------------------------

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
	tasksAddr, edgeAddr := freeAddr(t), freeAddr(t)
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
		addr := freeAddr(t)
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

// --- calls in flight ----------------------------------------------------------

// slowTasks is a tasks service whose Get and Create block until their
// caller gives up, counting the calls that arrived.
type slowTasks struct {
	tasksv1connect.UnimplementedTasksServiceHandler
	arrived atomic.Int32
}

func (s *slowTasks) Get(ctx context.Context, _ *tasksv1.GetRequest) (*tasksv1.GetResponse, error) {
	s.arrived.Add(1)
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

func (s *slowTasks) Create(ctx context.Context, _ *tasksv1.CreateRequest) (*tasksv1.CreateResponse, error) {
	s.arrived.Add(1)
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

// waitArrived waits until n calls reached the slow service.
func (s *slowTasks) waitArrived(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.arrived.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls reached the service", s.arrived.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const getArgs = `{"task_id":"tsk_00000000000000000000000000"}`

// TestProcessesAnswerEveryCallInFlight stops a real edge process with
// SIGTERM while calls are in flight on both protocol eras and over stdio,
// and cuts a dependency's connections mid-call: every call gets one tool
// result (unavailable, saying how to retry), none a dropped connection.
func TestProcessesAnswerEveryCallInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	bin := buildToolmesh(t)
	data := testMeshDir(t)

	t.Run("SIGTERM", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		edgeAddr := freeAddr(t)
		edgeProc := startBin(t, bin, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off",
			"--service", "tasks="+svc.URL, "--shutdown-grace", "500ms")
		url := "http://" + edgeAddr + "/mcp"

		type answer struct {
			name string
			env  envelope
			err  error
		}
		answers := make(chan answer, 4)
		// The stateless era, in the shape the edge answers without the SDK.
		go func() {
			resp, body := toolCall(t, &http.Client{}, url, "tasks_get", getArgs, nil)
			if resp.StatusCode != http.StatusOK {
				answers <- answer{name: "2026-07-28 raw", err: fmt.Errorf("status %d: %s", resp.StatusCode, body)}
				return
			}
			answers <- answer{name: "2026-07-28 raw", env: resultEnvelope(t, body)}
		}()
		// SDK clients on every era; the write carries an idempotency key.
		for _, c := range []struct{ version, tool, args string }{
			{"2026-07-28", "tasks_create", `{"description":"held"}`},
			{"2025-11-25", "tasks_create", `{"description":"held"}`},
			{"2025-06-18", "tasks_get", getArgs},
		} {
			mc := mcp.NewClient(&mcp.Implementation{Name: "sigterm", Version: "1"}, nil)
			s, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: c.version})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			go func() {
				var args map[string]any
				_ = json.Unmarshal([]byte(c.args), &args)
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: args, Meta: mcp.Meta{"dev.toolmesh/idempotencyKey": "key-" + c.version}})
				if err != nil {
					answers <- answer{name: c.version, err: err}
					return
				}
				answers <- answer{name: c.version + " " + c.tool, env: mcpResultEnvelope(res)}
			}()
		}
		slow.waitArrived(t, 4)
		if err := edgeProc.stop(t); err != nil {
			t.Errorf("the edge exited with %v after SIGTERM, want status 0", err)
		}
		for range 4 {
			a := <-answers
			switch {
			case a.err != nil:
				t.Errorf("%s: %v, want a tool result", a.name, a.err)
			case a.env.DomainCode != "unavailable" || !strings.Contains(a.env.Message, "shutting down"):
				t.Errorf("%s: %+v, want unavailable because the edge is shutting down", a.name, a.env)
			case strings.Contains(a.name, "tasks_create") && !strings.Contains(a.env.Message, `"key-`):
				t.Errorf("%s: %q, want the advice to retry with the same idempotency key", a.name, a.env.Message)
			}
		}
		if !strings.Contains(edgeProc.logs.String(), "edge.calls_cut_short") {
			t.Error("the edge did not log edge.calls_cut_short")
		}
	})

	t.Run("SIGTERM over stdio", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		cmd := exec.Command(bin, "edge", "--stdio", "--data", data, "--service", "tasks="+svc.URL, "--shutdown-grace", "200ms")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		logs := &logtest.Buffer{}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for _, m := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"desktop","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tasks_get","arguments":` + getArgs + `}}`,
		} {
			fmt.Fprintln(stdin, m)
		}
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		slow.waitArrived(t, 1)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var got string
		for lines.Scan() {
			if strings.Contains(lines.Text(), `"id":2`) {
				got = lines.Text()
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("edge --stdio exited with %v, want status 0\n%s", err, logs)
		}
		if !strings.Contains(got, `\"domain_code\":\"unavailable\"`) || !strings.Contains(got, "shutting down") {
			t.Errorf("the answer to the call in flight = %q, want an unavailable result", got)
		}
	})

	t.Run("a dependency dies", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		proxy := servertest.StartCutProxy(t, svc.Addr)
		edgeAddr := freeAddr(t)
		startBin(t, bin, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off", "--service", "tasks=http://"+proxy.Addr)
		type result struct {
			resp *http.Response
			body string
		}
		done := make(chan result, 1)
		go func() {
			resp, body := toolCall(t, &http.Client{}, "http://"+edgeAddr+"/mcp", "tasks_create", `{"description":"d"}`, nil)
			done <- result{resp, body}
		}()
		slow.waitArrived(t, 1)
		proxy.Cut()
		r := <-done
		env := resultEnvelope(t, r.body)
		if r.resp.StatusCode != http.StatusOK || env.DomainCode != "unavailable" || !strings.Contains(env.Message, "may or may not have taken effect") {
			t.Errorf("a call whose service died = %d %+v, want an unavailable result with retry advice", r.resp.StatusCode, env)
		}
	})
}

// --- slow and oversized clients --------------------------------------------

// slowBodies opens n connections to addr that send the headers of a POST
// to path declaring a 100-byte body, then 10 bytes of it, and returns how
// long the server took to close the slowest of them (failing the test for
// one still open after limit, or answered without status).
func slowBodies(t *testing.T, addr, path string, n int, limit time.Duration, status string) time.Duration {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("open slow connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n%s", path, addr, `{"jsonrpc"`)
	}
	var slowest atomic.Int64
	var wg sync.WaitGroup
	var stillOpen, otherStatus atomic.Int32
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(start.Add(limit))
			answer, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				stillOpen.Add(1)
				return
			}
			if !bytes.HasPrefix(answer, []byte("HTTP/1.1 "+status)) {
				otherStatus.Add(1)
			}
			took := int64(time.Since(start))
			for {
				cur := slowest.Load()
				if took <= cur || slowest.CompareAndSwap(cur, took) {
					break
				}
			}
		})
	}
	wg.Wait()
	if n := stillOpen.Load(); n > 0 {
		t.Fatalf("%d of %d slow connections still open after %s", n, len(conns), limit)
	}
	if n := otherStatus.Load(); n > 0 {
		t.Errorf("%d of %d slow connections were not answered %q", n, len(conns), status)
	}
	return time.Duration(slowest.Load())
}

// rss reads a process's resident memory in KiB.
func rss(t *testing.T, pid int) int { return procStatus(t, pid, "VmRSS") }

// TestSlowAndOversizedClientsAreCutOff opens 1,000 connections that send
// half a request body, against a real edge process and a real service
// process with a short body deadline: all are closed at the deadline, the
// processes' memory grows by a bounded amount, and another client is served
// meanwhile. A declared oversized body is refused at once with 413, and the
// connections one address may hold are capped.
func TestSlowAndOversizedClientsAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	const slow = 1000
	const deadline = 2 * time.Second
	bin := buildToolmesh(t)
	data := testMeshDir(t)
	tasksAddr, edgeAddr := freeAddr(t), freeAddr(t)
	limits := []string{"--body-timeout", deadline.String(), "--max-conns-per-client", "0"}
	tasksProc := startBin(t, bin, "http://"+tasksAddr+"/healthz", append([]string{"serve", "tasks", "--addr", tasksAddr, "--data", data}, limits...)...)
	edgeProc := startBin(t, bin, "http://"+edgeAddr+"/healthz", append([]string{"edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off",
		"--service", "tasks=http://" + tasksAddr}, limits...)...)
	url := "http://" + edgeAddr + "/mcp"

	// Another client, from another address, calls a tool through the edge
	// while the slow connections are open.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	callOther := func() error {
		resp, body := toolCall(t, other, url, "tasks_create", `{"description":"served"}`, nil)
		if env := resultEnvelope(t, body); resp.StatusCode != http.StatusOK || env.Status != "ok" {
			return fmt.Errorf("%d %+v", resp.StatusCode, env)
		}
		return nil
	}
	if err := callOther(); err != nil {
		t.Fatalf("before the slow clients: %v", err)
	}

	for _, target := range []struct {
		name, addr, path string
		pid              int
		status           string // the answer's status ("": any)
	}{
		{"edge", edgeAddr, "/mcp", edgeProc.cmd.Process.Pid, "408"},
		{"service", tasksAddr, "/" + tasksv1connect.TasksServiceName + "/Create", tasksProc.cmd.Process.Pid, ""},
	} {
		t.Run(target.name, func(t *testing.T) {
			before := rss(t, target.pid)
			stop := make(chan struct{})
			peak := samplePeak(t, target.pid, "VmRSS", stop)
			served := make(chan error, 1)
			go func() {
				// Once the slow connections are all open.
				time.Sleep(deadline / 2)
				served <- callOther()
			}()
			slowest := slowBodies(t, target.addr, target.path, slow, deadline+30*time.Second, target.status)
			close(stop)
			growth := <-peak - before
			t.Logf("%s: %d slow-body connections closed by %s (body deadline %s); RSS %d KiB before, grew by %d KiB at most (%.1f KiB per connection)",
				target.name, slow, slowest.Round(time.Millisecond), deadline, before, growth, float64(growth)/slow)
			if slowest < deadline {
				t.Errorf("a slow connection was closed after %s, before the %s deadline", slowest, deadline)
			}
			if growth > slow*64 {
				t.Errorf("RSS grew by %d KiB for %d connections, want at most 64 KiB each", growth, slow)
			}
			if err := <-served; err != nil {
				t.Errorf("another client during the slow connections: %v", err)
			}
		})
	}

	t.Run("declared oversized body", func(t *testing.T) {
		for name, addr := range map[string]string{"edge": edgeAddr, "service": tasksAddr} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n0123456789", addr, 5<<20)
			// Well before the body deadline.
			_ = c.SetReadDeadline(time.Now().Add(deadline / 2))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || !strings.Contains(line, "413") {
				t.Errorf("%s: a declared 5 MiB body got %q (%v), want 413 at once", name, line, err)
			}
		}
	})

	t.Run("connections per client", func(t *testing.T) {
		capped := freeAddr(t)
		startBin(t, bin, "http://"+capped+"/healthz", "edge", "--addr", capped, "--data", data, "--metrics-addr", "off",
			"--service", "tasks=http://"+tasksAddr, "--max-conns-per-client", "20")
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		var refused atomic.Int32
		for range 30 {
			c, err := net.Dial("tcp", capped)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		var wg sync.WaitGroup
		for _, c := range held {
			wg.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); err == io.EOF || isReset(err) {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		// The health check before may hold one connection of its own.
		if n := refused.Load(); n < 10 || n > 11 {
			t.Errorf("connections closed at once = %d of 30, want those over the cap of 20", n)
		}
		resp, body := toolCall(t, other, "http://"+capped+"/mcp", "tasks_list", `{}`, nil)
		if env := resultEnvelope(t, body); resp.StatusCode != http.StatusOK || env.Status != "ok" {
			t.Errorf("another address at the cap = %d %s, want served", resp.StatusCode, body)
		}
	})
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }
