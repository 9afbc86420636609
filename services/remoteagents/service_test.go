package remoteagents_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	"github.com/toolmesh/toolmesh/services/remoteagents"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
)

var loopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// fixture is the service over SQLite with fake workflows and a fake
// messages service.
type fixture struct {
	client   remoteagentsv1connect.RemoteAgentsServiceClient
	wf       *fakeEngine
	messages *fakeMessages
}

func start(t *testing.T, cfg remoteagents.Config) *fixture {
	t.Helper()
	st, err := remoteagentsstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "remoteagents.db")))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{wf: newFakeEngine(), messages: &fakeMessages{}}
	msgSrv := servertest.Start(t, servertestService(f.messages))
	if cfg.Engine == nil {
		cfg.Engine = f.wf
	}
	cfg.Messages = messagesv1connect.NewMessagesServiceClient(msgSrv.Client(), msgSrv.URL,
		connect.WithInterceptors(mesh.NewForwardingInterceptor(), remoteagents.NewIdempotencyInterceptor()))
	if cfg.Egress.Allow == nil && cfg.Egress.Lookup == nil {
		cfg.Egress = loopback
	}
	srv := servertest.Start(t, remoteagents.New(st, cfg).Registration())
	f.client = remoteagentsv1connect.NewRemoteAgentsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	return f
}

func at(agent string, depth int) context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Depth: depth}})
}

// remote is the sender of inbound messages as the A2A endpoint calls.
func remote(sender string, depth int) context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "partner", Agent: sender, Roles: []string{mesh.RoleService}, Depth: depth}})
}

func wait(n int32) *int32 { return &n }

const agentURL = "https://agents.example.com/a2a/agents/travel/"

func TestInvokeIsRefusedFromDepthThree(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	_, err := f.client.Invoke(at("planner", 3), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "one too deep"})
	if servertest.Code(t, err) != connect.CodeFailedPrecondition {
		t.Fatalf("error %v, want failed_precondition", err)
	}
	if msg := err.(*connect.Error).Message(); msg != "Cannot send message: invocation depth 3 exceeds maximum of 3." {
		t.Errorf("message %q, want the messages domain's sentence", msg)
	}
	if f.wf.starts != 0 {
		t.Errorf("%d workflows started for a refused call", f.wf.starts)
	}
	res, err := f.client.Invoke(at("planner", 2), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "just deep enough", WaitSeconds: wait(0)})
	if err != nil {
		t.Fatal(err)
	}
	inv := res.GetInvocation()
	if inv.GetDepth() != 3 || inv.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING {
		t.Errorf("invocation %v, want working, telling the remote agent depth 3", inv)
	}
	if in := f.wf.run(inv.GetWorkflowId()).in; in.GetDepth() != 2 || in.GetMessageId() != inv.GetInvocationId() || in.GetUrl() != agentURL ||
		in.GetTool() != "remoteagents_invoke" || in.GetAgentId() != "planner" {
		t.Errorf("workflow input %v, want the caller's depth 2 and the invocation's id as the message id", in)
	}
}

// publicLookup resolves every name to a public address, so the egress
// check passes for example.com.
func publicLookup(context.Context, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
}

func TestInvokeWaitsForTheOutcome(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	ctx := servertest.WithIdempotencyKey(at("planner", 0), "call-1")
	done := make(chan *remoteagentsv1.InvokeResponse, 1)
	go func() {
		res, err := f.client.Invoke(ctx, &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "Book a flight.", WaitSeconds: wait(10)})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	id := remoteagents.WorkflowID("planner", remoteagents.InvocationID("planner", "call-1", time.Now()))
	if !eventually(func() bool { return f.wf.run(id) != nil }) {
		t.Fatal("the invocation's workflow did not start")
	}
	f.wf.end(id, &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED, Answer: "Booked.",
		TaskId: "task-1", RemoteState: "completed", ResolveTime: timestamppb.Now()})
	inv := (<-done).GetInvocation()
	if inv.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED || inv.GetAnswer() != "Booked." || inv.GetTaskId() != "task-1" {
		t.Errorf("invocation %v, want completed with the answer", inv)
	}
	// A retry with the same key is the same invocation: nothing new runs.
	res, err := f.client.Invoke(ctx, &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "Book a flight."})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(res.GetInvocation(), inv) || len(f.wf.runs) != 1 {
		t.Errorf("retry = %v (%d runs), want the first invocation again", res.GetInvocation(), len(f.wf.runs))
	}
}

func TestGetAndCancelInvocation(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	res, err := f.client.Invoke(at("planner", 0), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "Book a flight.", WaitSeconds: wait(0)})
	if err != nil {
		t.Fatal(err)
	}
	inv := res.GetInvocation()
	get := func(agent string) (*remoteagentsv1.Invocation, error) {
		r, err := f.client.GetInvocation(at(agent, 0), &remoteagentsv1.GetInvocationRequest{InvocationId: inv.GetInvocationId()})
		return r.GetInvocation(), err
	}
	if _, err := get("someone-else"); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("another agent's GetInvocation: %v, want not_found", err)
	}
	// While it runs, the workflow says where the remote task is.
	f.wf.progress(inv.GetWorkflowId(), &remoteagentsv1.InvokeOutcome{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING,
		TaskId: "task-7", ContextId: "ctx-7", RemoteState: "working"})
	got, err := get("planner")
	if err != nil || got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING || got.GetTaskId() != "task-7" || got.GetRemoteState() != "working" {
		t.Errorf("GetInvocation while working = %v, %v; want working on task-7", got, err)
	}
	c, err := f.client.CancelInvocation(at("planner", 0), &remoteagentsv1.CancelInvocationRequest{InvocationId: inv.GetInvocationId()})
	if err != nil || c.GetInvocation().GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED {
		t.Fatalf("CancelInvocation = %v, %v; want cancelled", c, err)
	}
	if got, err := get("planner"); err != nil || got.GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED {
		t.Errorf("GetInvocation after the cancel = %v, %v", got, err)
	}
}

func TestListInvocations(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	for _, agent := range []string{"planner", "booker", "planner"} {
		if _, err := f.client.Invoke(at(agent, 0), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "Book a flight for " + agent + ".", WaitSeconds: wait(0)}); err != nil {
			t.Fatal(err)
		}
	}
	owner := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "alice", Agent: "local", Roles: []string{mesh.RoleOwner}}})
	list := func(ctx context.Context, req *remoteagentsv1.ListInvocationsRequest) ([]string, int32, error) {
		res, err := f.client.ListInvocations(ctx, req)
		var agents []string
		for _, inv := range res.GetInvocations() {
			agents = append(agents, inv.GetAgentId())
		}
		return agents, res.GetPage().GetTotal(), err
	}
	if got, total, err := list(at("planner", 0), &remoteagentsv1.ListInvocationsRequest{}); err != nil || total != 2 || strings.Join(got, ",") != "planner,planner" {
		t.Errorf("planner's invocations = %v (total %d), %v; want its own two", got, total, err)
	}
	if got, total, err := list(owner, &remoteagentsv1.ListInvocationsRequest{Limit: 2}); err != nil || total != 3 || strings.Join(got, ",") != "planner,booker" {
		t.Errorf("the owner's first page = %v (total %d), %v; want the newest two of all three", got, total, err)
	}
	if got, _, err := list(owner, &remoteagentsv1.ListInvocationsRequest{AgentId: "booker", Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING}); err != nil || strings.Join(got, ",") != "booker" {
		t.Errorf("the owner's working invocations of booker = %v, %v", got, err)
	}
	if got, _, err := list(owner, &remoteagentsv1.ListInvocationsRequest{Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED}); err != nil || len(got) != 0 {
		t.Errorf("completed invocations = %v, %v; want none", got, err)
	}
	if _, _, err := list(at("booker", 0), &remoteagentsv1.ListInvocationsRequest{AgentId: "planner"}); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("booker listing planner's invocations: %v, want permission_denied", err)
	}
}

func TestInvokeStartFailureLeavesNothing(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	f.wf.startErr = errStart
	ctx := servertest.WithIdempotencyKey(at("planner", 0), "call-2")
	_, err := f.client.Invoke(ctx, &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "hi"})
	if servertest.Code(t, err) != connect.CodeUnavailable {
		t.Fatalf("error %v, want unavailable", err)
	}
	id := remoteagents.InvocationID("planner", "call-2", time.Now())
	if _, err := f.client.GetInvocation(at("planner", 0), &remoteagentsv1.GetInvocationRequest{InvocationId: id}); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("the invocation whose workflow did not start is kept: %v", err)
	}
	f.wf.startErr = nil
	if _, err := f.client.Invoke(ctx, &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "hi", WaitSeconds: wait(0)}); err != nil {
		t.Errorf("retry after the failure: %v", err)
	}
}

func TestInvokeRefusesPrivateAddresses(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup, Allow: []netip.Prefix{}}})
	for _, u := range []string{"http://127.0.0.1:8080/agent", "http://10.1.2.3/agent", "http://169.254.169.254/latest"} {
		_, err := f.client.Invoke(at("planner", 0), &remoteagentsv1.InvokeRequest{Url: u, Message: "hi"})
		if servertest.Code(t, err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Invoke %s: %v, want invalid_argument: refused", u, err)
		}
	}
	if f.wf.starts != 0 {
		t.Errorf("%d workflows started for refused addresses", f.wf.starts)
	}
}

func TestRecordOutcomeIsForTheWorkflowOnly(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	res, err := f.client.Invoke(at("planner", 0), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "hi", WaitSeconds: wait(0)})
	if err != nil {
		t.Fatal(err)
	}
	req := &remoteagentsv1.RecordInvocationOutcomeRequest{InvocationId: res.GetInvocation().GetInvocationId(),
		Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED, Error: "unreachable", ResolveTime: timestamppb.Now()}
	if _, err := f.client.RecordInvocationOutcome(at("planner", 0), req); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent recording an outcome: %v, want permission_denied", err)
	}
	rec, err := f.client.RecordInvocationOutcome(remote("toolmesh-worker-remoteagents", 0), req)
	if err != nil || rec.GetInvocation().GetStatus() != remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED || rec.GetInvocation().GetError() != "unreachable" {
		t.Errorf("the workflow recording: %v, %v", rec, err)
	}
}

func TestDiscoverReadsTheCard(t *testing.T) {
	// A 0.3 card, as agents on the 0.3 SDKs serve it: its url, no
	// transport (JSON-RPC, 0.3 says).
	card := map[string]any{"name": "Travel agent", "description": "Books trips.", "url": "http://127.0.0.1:1/a2a", "version": "2.1",
		"protocolVersion": "0.3.0", "defaultInputModes": []string{"text/plain"}, "defaultOutputModes": []string{"text/plain", "application/json"},
		"provider":     map[string]any{"organization": "Example", "url": "https://example.com"},
		"capabilities": map[string]any{"streaming": true, "extensions": []any{map[string]any{"uri": a2alink.DepthExtension}}},
		"skills": []any{map[string]any{"id": "book", "name": "Book", "description": "Books a flight.", "tags": []string{"travel"},
			"examples": []string{"Fly me to Berlin"}}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/agents/travel/.well-known/agent-card.json" && r.URL.Path != "/cards/travel.json" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(card)
	}))
	t.Cleanup(srv.Close)
	f := start(t, remoteagents.Config{})
	want := &remoteagentsv1.AgentCard{Name: "Travel agent", Description: "Books trips.", Url: "http://127.0.0.1:1/a2a", Version: "2.1", ProtocolVersion: "0.3",
		PreferredTransport: "JSONRPC", Streaming: true, Provider: "Example", TakesDepth: true,
		InputModes: []string{"text/plain"}, OutputModes: []string{"text/plain", "application/json"},
		Skills:     []*remoteagentsv1.Skill{{Id: "book", Name: "Book", Description: "Books a flight.", Tags: []string{"travel"}, Examples: []string{"Fly me to Berlin"}}},
		Interfaces: []*remoteagentsv1.AgentInterface{{Url: "http://127.0.0.1:1/a2a", Binding: "JSONRPC", ProtocolVersion: "0.3.0"}},
		Signature:  &remoteagentsv1.CardSignature{}}
	for _, u := range []string{srv.URL + "/agents/travel", srv.URL + "/agents/travel/", srv.URL + "/cards/travel.json"} {
		res, err := f.client.Discover(at("planner", 0), &remoteagentsv1.DiscoverRequest{Url: u})
		if err != nil {
			t.Fatalf("Discover %s: %v", u, err)
		}
		if !proto.Equal(res.GetCard(), want) {
			t.Errorf("Discover %s = %v, want %v", u, res.GetCard(), want)
		}
	}
	_, err := f.client.Discover(at("planner", 0), &remoteagentsv1.DiscoverRequest{Url: srv.URL + "/nobody"})
	if servertest.Code(t, err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "404") {
		t.Errorf("Discover of an agent without a card: %v, want unavailable naming the 404", err)
	}
}

// TestDiscoverVerifiesSignedCards: a 1.0 card signed with a key its host
// publishes verifies; a card changed after signing, or signed with a key
// published elsewhere, is signed but not verified.
func TestDiscoverVerifiesSignedCards(t *testing.T) {
	seed := sha256.Sum256([]byte("remote mesh"))
	key := ed25519.NewKeyFromSeed(seed[:])
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(a2alink.Keys(key.Public().(ed25519.PublicKey)))
	}))
	t.Cleanup(elsewhere.Close)
	card := a2a.AgentCard{Name: "Travel agent", Description: "Books trips.", Version: "2.1",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "book", Name: "Book", Description: "Books.", Tags: []string{"travel"}}}}
	raw, err := json.Marshal(card)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(jku string) []byte {
		signer, err := a2alink.NewCardSigner(key, jku)
		if err != nil {
			t.Fatal(err)
		}
		b, err := signer.Sign(raw)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	signed := sign(srv.URL + a2alink.KeysPath)
	tampered := []byte(strings.Replace(string(signed), "Books trips.", "Steals keys.", 1))
	cards := map[string][]byte{"signed": signed, "tampered": tampered, "foreign": sign(elsewhere.URL + a2alink.KeysPath), "plain": raw}
	mux.HandleFunc("GET /{name}/.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(cards[r.PathValue("name")]) })
	mux.HandleFunc("GET "+a2alink.KeysPath, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(a2alink.Keys(key.Public().(ed25519.PublicKey)))
	})
	f := start(t, remoteagents.Config{Egress: loopback})
	kid := mesh.KeyID(key.Public().(ed25519.PublicKey))
	for name, want := range map[string]*remoteagentsv1.CardSignature{
		"signed":   {Signed: true, Verified: true, KeyId: kid, KeysUrl: srv.URL + a2alink.KeysPath},
		"tampered": {Signed: true, KeyId: kid, KeysUrl: srv.URL + a2alink.KeysPath, Error: "the signature does not verify: the card was changed, or signed with another key"},
		"foreign": {Signed: true, KeyId: kid, KeysUrl: elsewhere.URL + a2alink.KeysPath,
			Error: "the signature's key set (jku " + elsewhere.URL + a2alink.KeysPath + ") is not at the card's origin " + srv.URL},
		"plain": {},
	} {
		res, err := f.client.Discover(at("planner", 0), &remoteagentsv1.DiscoverRequest{Url: srv.URL + "/" + name})
		if err != nil {
			t.Fatalf("Discover %s: %v", name, err)
		}
		if got := res.GetCard(); !proto.Equal(got.GetSignature(), want) || got.GetProtocolVersion() != "1.0" || got.GetUrl() != srv.URL+"/rpc" {
			t.Errorf("Discover of the %s card: %v, want signature %v over 1.0 at /rpc", name, got, want)
		}
	}
}

func TestBlankTextIsRefused(t *testing.T) {
	f := start(t, remoteagents.Config{})
	const blank = "\t \n"
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"invoke message", func() error {
			_, err := f.client.Invoke(at("alice", 0), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: blank})
			return err
		}, "message"},
		{"inbound text", func() error {
			_, err := f.client.DeliverInbound(remote("a2a-alice", 0), &remoteagentsv1.DeliverInboundRequest{AgentId: "bob", Text: blank, A2AMessageId: "m-1"})
			return err
		}, "text"},
		{"inbound message id", func() error {
			_, err := f.client.DeliverInbound(remote("a2a-alice", 0), &remoteagentsv1.DeliverInboundRequest{AgentId: "bob", Text: "hello", A2AMessageId: blank})
			return err
		}, "a2a_message_id"},
		{"inbound task id to get", func() error {
			_, err := f.client.GetInbound(remote("a2a-alice", 0), &remoteagentsv1.GetInboundRequest{TaskId: blank})
			return err
		}, "task_id"},
		{"inbound task id to cancel", func() error {
			_, err := f.client.CancelInbound(remote("a2a-alice", 0), &remoteagentsv1.CancelInboundRequest{TaskId: blank})
			return err
		}, "task_id"},
	} {
		if vs := servertest.Violations(t, tc.call()); !slices.Equal(vs[tc.field], []string{"string.non_blank"}) {
			t.Errorf("blank %s: violations %v, want %s: string.non_blank", tc.name, vs, tc.field)
		}
	}
	if n := len(f.messages.inbox("bob")); n != 0 {
		t.Errorf("bob's inbox holds %d messages after refused deliveries", n)
	}
}

func TestInboundDeliveryAndAnswer(t *testing.T) {
	f := start(t, remoteagents.Config{})
	deliver := func(ctx context.Context, msgID, text string) (*remoteagentsv1.Inbound, error) {
		res, err := f.client.DeliverInbound(ctx, &remoteagentsv1.DeliverInboundRequest{AgentId: "bob", Text: text, A2AMessageId: msgID})
		return res.GetInbound(), err
	}
	// Only the A2A endpoint (the mesh's service role) delivers.
	if _, err := deliver(at("mallory", 0), "m-0", "spoofed"); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent delivering: %v, want permission_denied", err)
	}
	in, err := deliver(remote("a2a-alice", 1), "m-1", "hello bob")
	if err != nil {
		t.Fatal(err)
	}
	inbox := f.messages.inbox("bob")
	if in.GetStatus() != remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING || in.GetDepth() != 2 || in.GetSender() != "a2a-alice" ||
		len(inbox) != 1 || inbox[0].GetId() != in.GetMessageId() || inbox[0].GetDepth() != 2 || inbox[0].GetFromAgent() != "a2a-alice" {
		t.Fatalf("task %v, inbox %v: want the message in bob's inbox from a2a-alice at depth 2", in, inbox)
	}
	// A redelivery opens nothing new and stores no second message.
	again, err := deliver(remote("a2a-alice", 1), "m-1", "hello bob")
	if err != nil || again.GetTaskId() != in.GetTaskId() || len(f.messages.inbox("bob")) != 1 {
		t.Errorf("redelivery: %v, %v, %d messages; want the first task and one message", again, err, len(f.messages.inbox("bob")))
	}
	// At the sender's depth 3 the messages service refuses.
	if _, err := deliver(remote("a2a-alice", 3), "m-deep", "too deep"); servertest.Code(t, err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "Cannot send message: invocation depth 3 exceeds maximum of 3.") {
		t.Errorf("delivery at depth 3: %v, want the depth refusal", err)
	}

	get := func(ctx context.Context) (*remoteagentsv1.Inbound, error) {
		r, err := f.client.GetInbound(ctx, &remoteagentsv1.GetInboundRequest{TaskId: in.GetTaskId()})
		return r.GetInbound(), err
	}
	if _, err := get(remote("a2a-carol", 0)); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("another sender's GetInbound: %v, want not_found", err)
	}
	if got, err := get(remote("a2a-alice", 0)); err != nil || got.GetStatus() != remoteagentsv1.InboundStatus_INBOUND_STATUS_WORKING {
		t.Errorf("GetInbound before an answer: %v, %v", got, err)
	}
	// Bob answers in the thread: the task completes with the answer.
	if _, err := f.messages.Send(mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "bob", Depth: 2}}),
		sendReq("a2a-alice", in.GetThreadId(), "hi alice")); err != nil {
		t.Fatal(err)
	}
	got, err := get(remote("a2a-alice", 0))
	if err != nil || got.GetStatus() != remoteagentsv1.InboundStatus_INBOUND_STATUS_COMPLETED || got.GetAnswer() != "hi alice" {
		t.Fatalf("GetInbound after the answer: %v, %v; want completed with it", got, err)
	}
	if _, err := f.client.CancelInbound(remote("a2a-alice", 0), &remoteagentsv1.CancelInboundRequest{TaskId: in.GetTaskId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
		t.Errorf("cancel of an answered task: %v, want failed_precondition", err)
	}

	// A task the agent has not answered is cancelled.
	other, err := deliver(remote("a2a-alice", 0), "m-2", "never mind")
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.client.CancelInbound(remote("a2a-alice", 0), &remoteagentsv1.CancelInboundRequest{TaskId: other.GetTaskId()})
	if err != nil || c.GetInbound().GetStatus() != remoteagentsv1.InboundStatus_INBOUND_STATUS_CANCELLED {
		t.Errorf("CancelInbound: %v, %v; want cancelled", c, err)
	}
}

// TestAnswerLeavingTheMeshHasNoSecrets: an agent that pastes a token into
// its answer to another mesh's agent leaks nothing: the task the sender
// reads carries "[REDACTED:<rule>]" instead, and one guardrail event names
// the rule, never the token.
func TestAnswerLeavingTheMeshHasNoSecrets(t *testing.T) {
	var logs bytes.Buffer
	f := start(t, remoteagents.Config{Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	res, err := f.client.DeliverInbound(remote("a2a-alice", 0), &remoteagentsv1.DeliverInboundRequest{AgentId: "bob", Text: "the deploy token?", A2AMessageId: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	in := res.GetInbound()
	// A token of GitHub's shape, made up for the test (no real one is
	// committed).
	token := "ghp_" + rand.Text()[:26] + "Ab3Cd5Ef7G"
	if _, err := f.messages.Send(mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "bob", Depth: 1}}),
		sendReq("a2a-alice", in.GetThreadId(), "here it is: "+token)); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.GetInbound(remote("a2a-alice", 0), &remoteagentsv1.GetInboundRequest{TaskId: in.GetTaskId()})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.GetInbound().GetAnswer(); a != "here it is: [REDACTED:github-pat]" {
		t.Errorf("the answer the sender reads = %q, want the token redacted", a)
	}
	events := strings.Count(logs.String(), `"msg":"guardrail"`)
	if events != 1 || strings.Contains(logs.String(), token) || !strings.Contains(logs.String(), "github-pat") {
		t.Errorf("%d guardrail events, token logged %v; want one event naming github-pat and no token:\n%s", events, strings.Contains(logs.String(), token), logs.String())
	}
}

// TestExtendInvocation: the invoking agent moves its working invocation's
// expiry later, and a retry of the same call extends once; another agent
// cannot, nor can anyone past the longest lifetime or after the end.
func TestExtendInvocation(t *testing.T) {
	f := start(t, remoteagents.Config{Egress: egress.Policy{Lookup: publicLookup}})
	res, err := f.client.Invoke(at("planner", 0), &remoteagentsv1.InvokeRequest{Url: agentURL, Message: "Book a flight.", TimeoutSeconds: 600, WaitSeconds: wait(0)})
	if err != nil {
		t.Fatal(err)
	}
	inv := res.GetInvocation()
	first := inv.GetExpireTime().AsTime()
	extend := func(ctx context.Context, seconds int32) (*remoteagentsv1.Invocation, error) {
		r, err := f.client.ExtendInvocation(ctx, &remoteagentsv1.ExtendInvocationRequest{InvocationId: inv.GetInvocationId(), ExtendSeconds: seconds, Reason: "the agent books slowly"})
		return r.GetInvocation(), err
	}
	if _, err := extend(at("someone-else", 0), 3600); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("another agent's extension: %v, want not_found", err)
	}
	key := servertest.WithIdempotencyKey(at("planner", 0), "ext-1")
	got, err := extend(key, 3600)
	if err != nil || !got.GetExpireTime().AsTime().Equal(first.Add(time.Hour)) {
		t.Fatalf("extension = %v, %v; want the expiry an hour later", got, err)
	}
	if again, err := extend(key, 3600); err != nil || !again.GetExpireTime().AsTime().Equal(first.Add(time.Hour)) {
		t.Errorf("the retried extension = %v, %v; want the same expiry, not two hours", again, err)
	}
	if in := f.wf.run(inv.GetWorkflowId()).in; !in.GetExpireTime().AsTime().Equal(first.Add(time.Hour)) || len(f.wf.extends) != 1 {
		t.Errorf("the workflow follows until %v after %d updates, want the new expiry after one", in.GetExpireTime().AsTime(), len(f.wf.extends))
	}
	if _, err := extend(at("planner", 0), 7*24*3600); servertest.Code(t, err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "at most 168h0m0s from its start") {
		t.Errorf("an extension past the longest lifetime: %v, want invalid_argument naming it", err)
	}
	if _, err := f.client.ExtendInvocation(at("planner", 0), &remoteagentsv1.ExtendInvocationRequest{InvocationId: inv.GetInvocationId(), ExtendSeconds: 3600}); servertest.Code(t, err) != connect.CodeInvalidArgument {
		t.Errorf("an extension without a reason: %v, want invalid_argument", err)
	}
	f.wf.end(inv.GetWorkflowId(), &remoteagentsv1.InvokeOutcome{InvocationId: inv.GetInvocationId(), Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED,
		Answer: "Booked.", ResolveTime: timestamppb.Now()})
	if _, err := f.client.RecordInvocationOutcome(remote("remoteagents-worker", 0), &remoteagentsv1.RecordInvocationOutcomeRequest{InvocationId: inv.GetInvocationId(),
		Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED, Answer: "Booked.", ResolveTime: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := extend(at("planner", 0), 600); servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("extending an ended invocation: %v, want failed_precondition: has ended", err)
	}
}
