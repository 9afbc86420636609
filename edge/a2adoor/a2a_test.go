package a2adoor_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
)

// a2aFixture is an edge's A2A endpoint in front of the stand-ins, built
// as every edge is (edge.New with edge.Config.A2A).
type a2aFixture struct {
	base   string // the endpoint's base URL
	edge   *edge.Edge
	remote *inbound
	logs   *logtest.Buffer
}

// newA2AFixture serves an edge's A2A door on loopback (HTTP/1.1 and h2c,
// as the edge's listener does); configure adjusts the edge's
// configuration.
func newA2AFixture(t *testing.T, configure func(*edge.Config)) *a2aFixture {
	t.Helper()
	f := &a2aFixture{remote: newInbound(), logs: &logtest.Buffer{}}
	inboundSrv := servertest.Start(t, server.Register(inboundv1connect.InboundServiceName, inboundv1connect.InboundServiceHandler(f.remote),
		inboundv1connect.NewInboundServiceHandler, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "http://" + lis.Addr().String()
	log := logging.New(f.logs, logging.ParseLevel("debug"))
	cfg := edge.Config{
		Mesh:        servertest.MeshSigner(),
		HTTPClient:  servertest.HTTPClient(),
		CallTimeout: 5 * time.Second,
		Services:    map[string]string{inboundv1connect.InboundServiceName: inboundSrv.URL},
		A2A: &edge.A2A{
			Addr:   lis.Addr().String(),
			Egress: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			Key:    servertest.MeshKey(),
		},
	}
	if configure != nil {
		configure(&cfg)
	}
	e, err := edge.New(cfg, log)
	if err != nil {
		lis.Close()
		t.Fatal(err)
	}
	f.edge = e
	srv := server.NewHTTPServer(e.A2AHandler(), log, server.Limits{MaxBodyBytes: -1})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// rpc posts a JSON-RPC body to an agent and decodes the answer; a header
// may name the version.
func (f *a2aFixture) rpc(t *testing.T, agent, body string, header http.Header) (int, rpcAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+"/a2a/agents/"+agent, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a rpcAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return resp.StatusCode, a
}

type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (a rpcAnswer) code() int {
	if a.Error == nil {
		return 0
	}
	return a.Error.Code
}

// task03 is an A2A 0.3 task as a 0.3 JSON-RPC answer has it.
type task03 struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	History  []json.RawMessage `json:"history"`
	Metadata map[string]any    `json:"metadata"`
}

func (a rpcAnswer) task(t *testing.T) task03 {
	t.Helper()
	var task task03
	if err := json.Unmarshal(a.Result, &task); err != nil || task.Kind != "task" {
		t.Fatalf("result %s is not a task: %v", a.Result, err)
	}
	return task
}

var v10 = http.Header{"A2A-Version": {"1.0"}}

func sendBody(id any, msg string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"method":"message/send","params":{"message":%s}}`, id, msg)
}

func textMessage(id, text string) string {
	return fmt.Sprintf(`{"kind":"message","messageId":%q,"role":"user","parts":[{"kind":"text","text":%q}]}`, id, text)
}

// send10 is a 1.0 SendMessage of text.
func send10(id any, msgID, text string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"method":"SendMessage","params":{"message":{"messageId":%q,"role":"ROLE_USER","parts":[{"text":%q}]}}}`, id, msgID, text)
}

// TestA2AServesSignedCardsOfBothVersions: an active agent's card lists
// every binding and version served, reads as a 0.3 card too, declares the
// mesh's extensions, and is signed with the key the door
// publishes.
func TestA2AServesSignedCardsOfBothVersions(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	resp, err := http.Get(f.base + "/a2a/agents/bob/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("card: %d, %v", resp.StatusCode, err)
	}
	// A 0.3 client reads its url, protocolVersion and preferredTransport.
	var legacy struct {
		URL, ProtocolVersion, PreferredTransport string
	}
	if err := json.Unmarshal(raw, &legacy); err != nil || legacy.URL != f.base+"/a2a/agents/bob" || legacy.ProtocolVersion != "0.3.0" || legacy.PreferredTransport != "JSONRPC" {
		t.Errorf("the card's 0.3 fields = %+v (%v)", legacy, err)
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(raw, &card); err != nil {
		t.Fatalf("the card %s does not read as a 1.0 card: %v", raw, err)
	}
	var ifaces []string
	for _, i := range card.SupportedInterfaces {
		ifaces = append(ifaces, fmt.Sprintf("%s %s %s %s", i.ProtocolBinding, i.ProtocolVersion, strings.TrimPrefix(i.URL, f.base), i.Tenant))
	}
	host := strings.TrimPrefix(f.base, "http://")
	want := []string{"JSONRPC 1.0 /a2a/agents/bob ", "HTTP+JSON 1.0 /a2a/agents/bob/rest ", "GRPC 1.0 " + host + " bob", "JSONRPC 0.3 /a2a/agents/bob "}
	if strings.Join(ifaces, "|") != strings.Join(want, "|") {
		t.Errorf("interfaces %q, want %q", ifaces, want)
	}
	var exts []string
	for _, e := range card.Capabilities.Extensions {
		exts = append(exts, e.URI)
	}
	if card.Name != "Bob" || card.Description != "Books trips." || !card.Capabilities.Streaming || !card.Capabilities.PushNotifications ||
		strings.Join(exts, " ") != a2alink.DepthExtension+" "+a2alink.EventsExtension || len(card.Skills) != 1 || card.SecuritySchemes != nil {
		t.Errorf("card = %+v", card)
	}
	// The signature verifies against the key the door publishes at the
	// card's origin.
	keySets := a2alink.NewKeySets(egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	v := a2alink.VerifyCard(t.Context(), keySets, &a2alink.Card{AgentCard: &card, Raw: raw, URL: f.base + "/a2a/agents/bob/.well-known/agent-card.json"})
	if !v.Signed || !v.Verified || v.KeyID != mesh.KeyID(servertest.MeshSigner().PublicKey()) {
		t.Errorf("card verification %+v, want signed and verified with the mesh key", v)
	}
	// A card changed after signing does not verify.
	forged := []byte(strings.Replace(string(raw), "Books trips.", "Books trips cheaply.", 1))
	if v := a2alink.VerifyCard(t.Context(), keySets, &a2alink.Card{AgentCard: &card, Raw: forged, URL: f.base + "/a2a/agents/bob/"}); !v.Signed || v.Verified {
		t.Errorf("a changed card: %+v, want signed and not verified", v)
	}
	for _, agent := range []string{"nobody", "sleepy"} {
		resp, err := http.Get(f.base + "/a2a/agents/" + agent + "/.well-known/agent-card.json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("card of %s: %d, want 404", agent, resp.StatusCode)
		}
	}
	// The mesh publishes the key its cards, pushes and depth tokens are
	// signed with.
	resp, err = http.Get(f.base + a2alink.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	var keys jose.JSONWebKeySet
	err = json.NewDecoder(resp.Body).Decode(&keys)
	resp.Body.Close()
	if err != nil || len(keys.Key(mesh.KeyID(servertest.MeshSigner().PublicKey()))) != 1 {
		t.Errorf("keys %+v (%v), want the mesh key", keys, err)
	}
}

// TestA2APublishesTheAuditKeyApartFromTheMeshKey: the audit checkpoint
// keys the door is given are served at their own path as signed-note
// verifier keys, never in the JWKS; a door given none answers 404 there.
func TestA2APublishesTheAuditKeyApartFromTheMeshKey(t *testing.T) {
	auditKey := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := auditKey.Public().(ed25519.PublicKey)
	f := newA2AFixture(t, func(c *edge.Config) { c.A2A.AuditKeys = []ed25519.PublicKey{pub} })
	resp, err := http.Get(f.base + auditcheckpoint.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	keys, err := auditcheckpoint.ParseKeys(string(body))
	if resp.StatusCode != http.StatusOK || err != nil || len(keys) != 1 || !keys[0].Equal(pub) ||
		resp.Header.Get("Content-Type") != auditcheckpoint.KeysContentType {
		t.Errorf("GET %s = %d %q %q (%v), want the audit key as a verifier key", auditcheckpoint.KeysPath, resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
	}
	resp, err = http.Get(f.base + a2alink.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	err = json.NewDecoder(resp.Body).Decode(&set)
	resp.Body.Close()
	if err != nil || len(set.Keys) != 1 || set.Keys[0].KeyID != mesh.KeyID(servertest.MeshSigner().PublicKey()) {
		t.Errorf("JWKS = %+v (%v), want the mesh key alone", set, err)
	}

	none := newA2AFixture(t, nil)
	resp, err = http.Get(none.base + auditcheckpoint.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s on a door without audit keys = %d, want 404", auditcheckpoint.KeysPath, resp.StatusCode)
	}
}

// depthIssuer is another mesh: it publishes a key and signs depth tokens.
func depthIssuer(t *testing.T, seed string) (*a2alink.DepthSigner, string) {
	t.Helper()
	s := sha256.Sum256([]byte(seed))
	key := ed25519.NewKeyFromSeed(s[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(a2alink.Keys(key.Public().(ed25519.PublicKey)))
	}))
	t.Cleanup(srv.Close)
	signer, err := a2alink.NewDepthSigner(key, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return signer, srv.URL
}

func withDepth(id, text, token string) string {
	return fmt.Sprintf(`{"kind":"message","messageId":%q,"role":"user","parts":[{"kind":"text","text":%q}],"extensions":[%q],"metadata":{%q:%q}}`,
		id, text, a2alink.DepthExtension, a2alink.MetadataDepthToken, token)
}

func TestA2ADepthIsTheOneTheSenderSigned(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	signer, _ := depthIssuer(t, "mesh-a")
	bob := f.base + "/a2a/agents/bob"
	tok, err := signer.Sign(bob, "alice", "m-deep", 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, a := f.rpc(t, "bob", sendBody(1, withDepth("m-deep", "from depth 1", tok)), nil)
	if a.Error != nil {
		t.Fatalf("message/send with a valid depth token: %+v", a.Error)
	}
	if d := f.remote.lastDelivery(); d.caller.Depth != 1 {
		t.Errorf("delivered with the sender at depth %d, want 1 (the token's 2, less one)", d.caller.Depth)
	}
	if md, ok := a.task(t).Metadata[a2alink.DepthExtension].(map[string]any); !ok || md["depth"] != float64(2) {
		t.Errorf("task metadata %v, want depth 2", a.task(t).Metadata)
	}
	// A token for the agent's REST endpoint is a token for the agent.
	rest := mustSign(t, signer, bob+"/rest", "m-rest", 1)
	if _, a := f.rpc(t, "bob", sendBody(2, withDepth("m-rest", "over REST's name", rest)), nil); a.Error != nil {
		t.Errorf("a token for bob's REST endpoint: %+v", a.Error)
	}

	// A token for another agent, for another message, or signed with a key
	// its issuer does not publish, is refused; nothing is delivered.
	forger, _ := depthIssuer(t, "mallory")
	forged, _ := a2alink.NewDepthSigner(ed25519.NewKeyFromSeed(make([]byte, 32)), strings.TrimSuffix(signerIssuer(t, signer), "/"))
	for name, tok := range map[string]string{
		"for carol":        mustSign(t, signer, f.base+"/a2a/agents/carol", "m-x", 0),
		"for another msg":  mustSign(t, signer, bob, "m-other", 0),
		"forged, lowered":  mustSign(t, forged, bob, "m-x", 0),
		"another issuer's": mustSign(t, forger, bob, "m-y", 0) + "x",
	} {
		before := f.remote.count()
		_, a := f.rpc(t, "bob", sendBody(2, withDepth(map[bool]string{true: "m-y", false: "m-x"}[strings.HasPrefix(name, "another issuer")], "lower me", tok)), nil)
		if a.code() != -32602 || f.remote.count() != before {
			t.Errorf("%s: %+v, %d deliveries; want -32602 and none", name, a.Error, f.remote.count()-before)
		}
	}

	// At depth 4 (the sender at 3) the mesh refuses, in its words: a
	// JSON-RPC server error, in either version.
	for _, h := range []http.Header{nil, v10} {
		deep := mustSign(t, signer, bob, "m-4", 4)
		body := sendBody(3, withDepth("m-4", "too deep", deep))
		if h != nil {
			body = fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"m-4","role":"ROLE_USER","parts":[{"text":"too deep"}],"metadata":{%q:%q}}}}`,
				a2alink.MetadataDepthToken, deep)
		}
		_, a = f.rpc(t, "bob", body, h)
		if a.code() != -32000 || a.Error.Message != "Cannot send message: invocation depth 3 exceeds maximum of 3." {
			t.Errorf("send at depth 4 (version %v): %+v, want -32000 with the depth refusal", h, a.Error)
		}
	}
}

func mustSign(t *testing.T, s *a2alink.DepthSigner, aud, msg string, depth int) string {
	t.Helper()
	tok, err := s.Sign(aud, "alice", msg, depth, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// signerIssuer reads the issuer a signer names, from a token it signs.
func signerIssuer(t *testing.T, s *a2alink.DepthSigner) string {
	t.Helper()
	tok, err := jose.ParseSignedCompact(mustSign(t, s, "x", "x", 0), []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Iss string }
	if err := json.Unmarshal(tok.UnsafePayloadWithoutVerification(), &c); err != nil {
		t.Fatal(err)
	}
	return c.Iss
}

func TestA2AAuthenticatesAsTheEdgeDoes(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	var resource string
	f := newA2AFixture(t, func(c *edge.Config) {
		c.Auth = iss.AuthConfig(t)
		c.Auth.Resource = "http://edge.example/mcp"
		resource = "http://" + c.A2A.Addr
	})
	body := sendBody(1, textMessage("m-1", "hi"))
	if status, a := f.rpc(t, "bob", body, nil); status != http.StatusUnauthorized || a.code() != -32001 {
		t.Errorf("no token: %d %+v, want 401", status, a.Error)
	}
	if status, a := f.rpc(t, "bob", send10(1, "m-1", "hi"), v10); status != http.StatusUnauthorized || a.code() != -31401 {
		t.Errorf("no token, 1.0: %d %+v, want 401 with -31401", status, a.Error)
	}
	readOnly := iss.Sign(t, jose.RS256, iss.Valid(resource, "partner@clients", "toolmesh:read"))
	if status, _ := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + readOnly}}); status != http.StatusForbidden {
		t.Errorf("a read-only token: %d, want 403", status)
	}
	mcpToken := iss.Sign(t, jose.RS256, iss.Valid("http://edge.example/mcp", "partner@clients", "toolmesh:write"))
	if status, _ := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + mcpToken}}); status != http.StatusUnauthorized {
		t.Errorf("a token for /mcp: %d, want 401 (another audience)", status)
	}
	ok := iss.Sign(t, jose.RS256, iss.Valid(resource, "partner@clients", "toolmesh:write"))
	if status, a := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + ok}}); status != http.StatusOK || a.Error != nil {
		t.Fatalf("a write token: %d %+v", status, a.Error)
	}
	if d := f.remote.lastDelivery(); d.caller.Agent != "a2a-partner-clients-"+fmt.Sprintf("%x", sha256.Sum256([]byte("partner@clients")))[:8] || d.caller.Subject != "partner@clients" {
		t.Errorf("sender %+v, want a2a- and its subject", d.caller)
	}
	// REST refuses without a token in its own shape.
	resp, err := http.Get(f.base + "/a2a/agents/bob/rest/tasks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("REST without a token: %d %v, want 401 with a challenge", resp.StatusCode, resp.Header)
	}
	// The card tells clients to bring a bearer token.
	resp, err = http.Get(f.base + "/a2a/agents/bob/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card a2a.AgentCard
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw, &card); err != nil {
		t.Fatalf("card %s: %v", raw, err)
	}
	if len(card.SecurityRequirements) != 1 || card.SecuritySchemes["bearer"] == nil {
		t.Errorf("card security %v / %v, want the bearer scheme: %s", card.SecurityRequirements, card.SecuritySchemes, raw)
	}
}

func TestA2ARefusesForeignHostsAndExposure(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	req, _ := http.NewRequest(http.MethodGet, f.base+"/a2a/agents/bob/.well-known/agent-card.json", nil)
	req.Host = "attacker.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Host: %d, want 403 (DNS rebinding)", resp.StatusCode)
	}
	// Development mode serves loopback only.
	_, err = edge.New(edge.Config{
		Mesh:     servertest.MeshSigner(),
		Services: map[string]string{inboundv1connect.InboundServiceName: "http://127.0.0.1:1"},
		A2A:      &edge.A2A{Addr: "0.0.0.0:8070", Key: servertest.MeshKey()},
	}, logging.Discard())
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("an A2A endpoint on 0.0.0.0 without authentication: %v, want refused", err)
	}
}

// TestA2ASaysWhenToTryAgain: a send the inbound service could not take
// for now (unavailable: down, restarting, busy) is an internal error whose
// words and data say to try again — A2A has no code for it — and a bug
// behind the door is an internal error that does not; neither shows the
// cause.
func TestA2ASaysWhenToTryAgain(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	for _, c := range []struct {
		text      string
		retryable bool
	}{{failUnavailable, true}, {failInternal, false}} {
		_, a := f.rpc(t, "bob", send10(1, "m-"+c.text, c.text), v10)
		if a.code() != -32603 {
			t.Errorf("%q: code %d, want -32603", c.text, a.code())
			continue
		}
		says := strings.Contains(a.Error.Message, "try again")
		flagged := strings.Contains(string(a.Error.Data), `"retryable":true`)
		if says != c.retryable || flagged != c.retryable || strings.Contains(a.Error.Message, "database") || strings.Contains(a.Error.Message, "bug") {
			t.Errorf("%q: message %q, data %s; want it to say to try again: %v, and no cause", c.text, a.Error.Message, a.Error.Data, c.retryable)
		}
	}
}
