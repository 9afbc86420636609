package edge_test

import (
	"context"
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
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/a2a"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/a2adoor"
	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/servertest"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
)

// delivery is one DeliverInbound the inbound stand-in got.
type delivery struct {
	caller mesh.Caller
	req    *inboundv1.DeliverInboundRequest
}

// inbound stands in for the InboundService the remoteagents domain serves:
// it serves bob (active; sleepy is paused, so not served), keeps tasks in
// memory, and refuses delivery from depth 3 on as the messages service
// does.
type inbound struct {
	inboundv1connect.UnimplementedInboundServiceHandler
	mu         sync.Mutex
	deliveries []delivery
	tasks      map[string]*inboundv1.Inbound
}

func (f *inbound) GetAgent(_ context.Context, req *inboundv1.GetAgentRequest) (*inboundv1.GetAgentResponse, error) {
	if req.GetAgentId() == "bob" {
		return &inboundv1.GetAgentResponse{Agent: &inboundv1.Agent{AgentId: "bob", DisplayName: "Bob", Description: "Books trips."}}, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s not found", req.GetAgentId()))
}

func (f *inbound) DeliverInbound(ctx context.Context, req *inboundv1.DeliverInboundRequest) (*inboundv1.DeliverInboundResponse, error) {
	c := mesh.FromContext(ctx).Caller
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deliveries = append(f.deliveries, delivery{c, req})
	if c.Depth >= 3 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("Cannot send message: invocation depth %d exceeds maximum of 3.", c.Depth)) //nolint:staticcheck // the exact sentence
	}
	in := &inboundv1.Inbound{TaskId: fmt.Sprintf("tsk_%d", len(f.deliveries)), ContextId: "ctx_1", AgentId: req.GetAgentId(), Sender: c.Agent,
		A2AMessageId: req.GetA2AMessageId(), MessageId: "msg_1", ThreadId: "thr_1", Text: req.GetText(), Depth: int32(c.Depth) + 1,
		Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING, CreateTime: timestamppb.Now(), UpdateTime: timestamppb.Now()}
	f.tasks[in.GetTaskId()] = in
	return &inboundv1.DeliverInboundResponse{Inbound: in}, nil
}

func (f *inbound) task(ctx context.Context, id string) (*inboundv1.Inbound, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.tasks[id]
	if !ok || in.GetSender() != mesh.FromContext(ctx).Caller.Agent {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", id))
	}
	return in, nil
}

func (f *inbound) GetInbound(ctx context.Context, req *inboundv1.GetInboundRequest) (*inboundv1.GetInboundResponse, error) {
	in, err := f.task(ctx, req.GetTaskId())
	return &inboundv1.GetInboundResponse{Inbound: in}, err
}

func (f *inbound) CancelInbound(ctx context.Context, req *inboundv1.CancelInboundRequest) (*inboundv1.CancelInboundResponse, error) {
	in, err := f.task(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if in.GetStatus() == inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("task %s is completed", in.GetTaskId()))
	}
	in.Status = inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED
	return &inboundv1.CancelInboundResponse{Inbound: in}, nil
}

func (f *inbound) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.deliveries)
}

// a2aFixture is an edge's A2A endpoint in front of the stand-ins.
type a2aFixture struct {
	base   string // the endpoint's base URL
	remote *inbound
	logs   *logtest.Buffer
}

// newA2AFixture serves an A2A door on loopback; configure adjusts its
// configuration.
func newA2AFixture(t *testing.T, configure func(*a2adoor.Config)) *a2aFixture {
	t.Helper()
	f := &a2aFixture{remote: &inbound{tasks: map[string]*inboundv1.Inbound{}}, logs: &logtest.Buffer{}}
	inboundSrv := servertest.Start(t, server.Register(inboundv1connect.InboundServiceName, inboundv1connect.InboundServiceHandler(f.remote),
		inboundv1connect.NewInboundServiceHandler, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "http://" + lis.Addr().String()
	log := logging.New(f.logs, logging.ParseLevel("debug"))
	cfg := a2adoor.Config{
		Addr:     lis.Addr().String(),
		Egress:   egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Version:  edge.DefaultVersion,
		DevAgent: edge.DefaultDevAgent,
		Services: map[string]string{inboundv1connect.InboundServiceName: inboundSrv.URL},
		Clients:  meshclient.Config{HTTP: servertest.HTTPClient(), Signer: servertest.MeshSigner(), Timeout: 5 * time.Second},
		Log:      log,
	}
	if configure != nil {
		configure(&cfg)
	}
	// The edge's own Host and Origin check, which the door shares.
	gc := httpguard.Config{Log: log}
	if cfg.Auth != nil {
		gc.Resource = cfg.Auth.Resource
	}
	if cfg.Guard, err = httpguard.New(gc); err != nil {
		t.Fatal(err)
	}
	door, err := a2adoor.New(cfg)
	if err != nil {
		lis.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: door.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// rpc posts a JSON-RPC body to an agent and decodes the answer.
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
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (a rpcAnswer) code() int {
	if a.Error == nil {
		return 0
	}
	return a.Error.Code
}

func (a rpcAnswer) task(t *testing.T) a2a.Task {
	t.Helper()
	var task a2a.Task
	if err := json.Unmarshal(a.Result, &task); err != nil {
		t.Fatalf("result %s is not a task: %v", a.Result, err)
	}
	return task
}

func sendBody(id any, msg string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"method":"message/send","params":{"message":%s}}`, id, msg)
}

func textMessage(id, text string) string {
	return fmt.Sprintf(`{"kind":"message","messageId":%q,"role":"user","parts":[{"kind":"text","text":%q}]}`, id, text)
}

func TestA2AServesCardsOfActiveAgents(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	resp, err := http.Get(f.base + "/a2a/agents/bob/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card a2a.AgentCard
	err = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("card: %d, %v", resp.StatusCode, err)
	}
	if card.Name != "Bob" || card.Description != "Books trips." || card.URL != f.base+"/a2a/agents/bob" || card.ProtocolVersion != "0.3.0" ||
		card.PreferredTransport != a2a.TransportProtocolJSONRPC || len(card.Capabilities.Extensions) != 1 || card.Capabilities.Extensions[0].URI != a2alink.DepthExtension || len(card.Skills) != 1 || card.SecuritySchemes != nil {
		t.Errorf("card = %+v", card)
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
	// The mesh publishes the key its depth tokens are signed with.
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

func TestA2AParamsPassTheTypedBoundary(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	long := strings.Repeat("x", 10001)
	for _, tc := range []struct {
		name, body string
		status     int
		code       int
		rejected   bool // a params rejection: one boundary event
	}{
		{"not JSON", `{"jsonrpc":`, http.StatusOK, -32700, false},
		{"a batch", `[` + sendBody(1, textMessage("m", "hi")) + `]`, http.StatusOK, -32600, false},
		{"no id", `{"jsonrpc":"2.0","method":"message/send","params":{}}`, http.StatusOK, -32600, false},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}`, http.StatusOK, -32601, false},
		{"streaming", `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{}}`, http.StatusOK, -32004, false},
		{"push notifications", `{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{}}`, http.StatusOK, -32003, false},
		{"messageId a number", sendBody(1, `{"kind":"message","messageId":7,"role":"user","parts":[]}`), http.StatusOK, -32602, true},
		{"no message", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, http.StatusOK, -32602, true},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":[1]}`, http.StatusOK, -32602, true},
		{"an agent's message", sendBody(1, `{"kind":"message","messageId":"m","role":"agent","parts":[{"kind":"text","text":"hi"}]}`), http.StatusOK, -32602, true},
		{"no parts", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[]}`), http.StatusOK, -32602, true},
		{"an unknown part", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"video"}]}`), http.StatusOK, -32602, true},
		{"too much text", sendBody(1, textMessage("m", long)), http.StatusOK, -32602, true},
		{"a depth token that is no string", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}],"metadata":{"`+a2alink.MetadataDepthToken+`":3}}`), http.StatusOK, -32602, true},
		{"tasks/get without an id", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`, http.StatusOK, -32602, true},
		{"tasks/cancel with a numeric id", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":5}}`, http.StatusOK, -32602, true},
		{"a file", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"file","file":{"uri":"https://example.com/a.pdf"}}]}`), http.StatusOK, -32005, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.logs.Events("boundary.validation_failed"))
			status, a := f.rpc(t, "bob", tc.body, nil)
			if status != tc.status || a.code() != tc.code {
				t.Errorf("answer %d %+v, want %d with error %d", status, a.Error, tc.status, tc.code)
			}
			events := f.logs.Events("boundary.validation_failed")[before:]
			want := 0
			if tc.rejected {
				want = 1
			}
			if len(events) != want || (want == 1 && events[0]["boundary"] != "a2a.jsonrpc") {
				t.Errorf("boundary events %v, want %d at a2a.jsonrpc", events, want)
			}
		})
	}
	if n := f.remote.count(); n != 0 {
		t.Errorf("%d messages delivered from refused requests", n)
	}
	// The answer carries the request's id, a number or a string.
	if _, a := f.rpc(t, "bob", `{"jsonrpc":"2.0","id":"abc","method":"tasks/get","params":{}}`, nil); string(a.ID) != `"abc"` {
		t.Errorf("error answer id %s, want \"abc\"", a.ID)
	}
	// Content-Type must be JSON.
	req, _ := http.NewRequest(http.MethodPost, f.base+"/a2a/agents/bob", strings.NewReader(sendBody(1, textMessage("m", "hi"))))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d, want 415", resp.StatusCode)
	}
}

func TestA2ATasksThroughTheEndpoint(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	_, a := f.rpc(t, "bob", sendBody(1, textMessage("m-1", "hello bob")), nil)
	task := a.task(t)
	if task.Status.State != a2a.TaskStateWorking || task.ID != "tsk_1" || len(task.History) != 1 {
		t.Fatalf("message/send = %+v, want a working task", task)
	}
	d := f.remote.deliveries[0]
	// Without a depth token a message starts a new chain: its sender is at
	// depth 0. In development mode the sender is the local caller.
	if d.caller.Agent != "a2a-local" || d.caller.Depth != 0 || !d.caller.HasRole(mesh.RoleService) || d.req.GetText() != "hello bob" ||
		d.req.GetA2AMessageId() != "m-1" || d.req.GetAgentId() != "bob" {
		t.Errorf("delivered %+v as %+v", d.req, d.caller)
	}
	_, a = f.rpc(t, "bob", `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":"tsk_1","historyLength":0}}`, nil)
	if got := a.task(t); got.ID != "tsk_1" || len(got.History) != 0 {
		t.Errorf("tasks/get with historyLength 0 = %+v", got)
	}
	_, a = f.rpc(t, "bob", `{"jsonrpc":"2.0","id":3,"method":"tasks/cancel","params":{"id":"tsk_1"}}`, nil)
	if got := a.task(t); got.Status.State != a2a.TaskStateCanceled {
		t.Errorf("tasks/cancel = %+v, want canceled", got)
	}
	if _, a = f.rpc(t, "bob", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"id":"tsk_404"}}`, nil); a.code() != -32001 {
		t.Errorf("tasks/get of an unknown task: %+v, want -32001", a.Error)
	}
	f.remote.tasks["tsk_1"].Status = inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED
	if _, a = f.rpc(t, "bob", `{"jsonrpc":"2.0","id":5,"method":"tasks/cancel","params":{"id":"tsk_1"}}`, nil); a.code() != -32002 {
		t.Errorf("tasks/cancel of a completed task: %+v, want -32002", a.Error)
	}
	if status, a := f.rpc(t, "nobody", sendBody(6, textMessage("m-2", "anyone?")), nil); status != http.StatusNotFound || a.code() != -32600 {
		t.Errorf("message/send to an unknown agent: %d %+v, want 404", status, a.Error)
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
	if d := f.remote.deliveries[0]; d.caller.Depth != 1 {
		t.Errorf("delivered with the sender at depth %d, want 1 (the token's 2, less one)", d.caller.Depth)
	}
	if md, ok := a.task(t).Metadata[a2alink.DepthExtension].(map[string]any); !ok || md["depth"] != float64(2) {
		t.Errorf("task metadata %v, want depth 2", a.task(t).Metadata)
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

	// At depth 4 (the sender at 3) the mesh refuses, in its words.
	deep := mustSign(t, signer, bob, "m-4", 4)
	_, a = f.rpc(t, "bob", sendBody(3, withDepth("m-4", "too deep", deep)), nil)
	if a.code() != -32000 || a.Error.Message != "Cannot send message: invocation depth 3 exceeds maximum of 3." {
		t.Errorf("message/send at depth 4: %+v, want -32000 with the depth refusal", a.Error)
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
	iss := newIssuer(t)
	var resource string
	f := newA2AFixture(t, func(c *a2adoor.Config) {
		c.Auth = iss.authConfig(t)
		c.Auth.Resource = "http://edge.example/mcp"
		resource = "http://" + c.Addr
	})
	body := sendBody(1, textMessage("m-1", "hi"))
	if status, a := f.rpc(t, "bob", body, nil); status != http.StatusUnauthorized || a.code() != -32001 {
		t.Errorf("no token: %d %+v, want 401", status, a.Error)
	}
	readOnly := iss.sign(t, jose.RS256, iss.valid(resource, "partner@clients", "toolmesh:read"))
	if status, _ := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + readOnly}}); status != http.StatusForbidden {
		t.Errorf("a read-only token: %d, want 403", status)
	}
	mcpToken := iss.sign(t, jose.RS256, iss.valid("http://edge.example/mcp", "partner@clients", "toolmesh:write"))
	if status, _ := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + mcpToken}}); status != http.StatusUnauthorized {
		t.Errorf("a token for /mcp: %d, want 401 (another audience)", status)
	}
	ok := iss.sign(t, jose.RS256, iss.valid(resource, "partner@clients", "toolmesh:write"))
	if status, a := f.rpc(t, "bob", body, http.Header{"Authorization": {"Bearer " + ok}}); status != http.StatusOK || a.Error != nil {
		t.Fatalf("a write token: %d %+v", status, a.Error)
	}
	if d := f.remote.deliveries[0]; d.caller.Agent != "a2a-partner-clients-"+fmt.Sprintf("%x", sha256.Sum256([]byte("partner@clients")))[:8] || d.caller.Subject != "partner@clients" {
		t.Errorf("sender %+v, want a2a- and its subject", d.caller)
	}
	// The card tells clients to bring a bearer token.
	resp, err := http.Get(f.base + "/a2a/agents/bob/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card a2a.AgentCard
	_ = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if len(card.Security) != 1 || card.SecuritySchemes["bearer"] == nil {
		t.Errorf("card security %v / %v, want the bearer scheme", card.Security, card.SecuritySchemes)
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
	guard, err := httpguard.New(httpguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a2adoor.New(a2adoor.Config{
		Addr:     "0.0.0.0:8070",
		Services: map[string]string{inboundv1connect.InboundServiceName: "http://127.0.0.1:1"},
		Clients:  meshclient.Config{Signer: servertest.MeshSigner()},
		Guard:    guard,
		Log:      logging.Discard(),
	})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("an A2A endpoint on 0.0.0.0 without authentication: %v, want refused", err)
	}
}
