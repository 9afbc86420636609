package remoteagents_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// travelAgent is an A2A agent on the official Go SDK's server: it answers
// "quick ..." with a message, and opens a working task for anything else,
// which tasks/cancel cancels. It keeps the metadata of what it was sent.
type travelAgent struct {
	mu       sync.Mutex
	metadata []map[string]any
}

func (a *travelAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.mu.Lock()
	a.metadata = append(a.metadata, rc.Message.Metadata)
	a.mu.Unlock()
	text := a2alink.Text(rc.Message.Parts)
	if strings.HasPrefix(text, "quick") {
		return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "done: " + text}))
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (a *travelAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// serveAgent serves the agent's card at /.well-known/agent-card.json and
// JSON-RPC at /rpc; it returns the base URL.
func serveAgent(t *testing.T, a *travelAgent) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "travel", Description: "Books trips.", URL: srv.URL + "/rpc", Version: "1", ProtocolVersion: "0.3.0",
		PreferredTransport: a2a.TransportProtocolJSONRPC, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "book", Name: "Book", Description: "Books.", Tags: []string{"travel"}}}}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(a)))
	return srv.URL
}

var loopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// meshKeys is this mesh's depth key, published as an issuer would.
func meshKeys(t *testing.T) (*a2alink.DepthSigner, string) {
	t.Helper()
	seed := sha256.Sum256([]byte("worker test mesh"))
	key := ed25519.NewKeyFromSeed(seed[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(a2alink.Keys(key.Public().(ed25519.PublicKey)))
	}))
	t.Cleanup(srv.Close)
	s, err := a2alink.NewDepthSigner(key, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return s, srv.URL
}

func activities(t *testing.T) *remoteagents.Activities {
	signer, _ := meshKeys(t)
	return &remoteagents.Activities{HTTP: a2alink.HTTPClient(loopback, 10*time.Second, a2alink.MaxResponseBytes), Depth: signer}
}

func invokeInput(url, text string) *remoteagentsv1.InvokeWorkflowInput {
	return &remoteagentsv1.InvokeWorkflowInput{InvocationId: "inv_test", AgentId: "planner", Depth: 1, Url: url, Message: text,
		MessageId: "inv_01jd8xw00000000000000000" + text[:2], ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}
}

func TestSendSignsTheDepthAndReadsAMessageAnswer(t *testing.T) {
	agent := &travelAgent{}
	base := serveAgent(t, agent)
	acts := activities(t)
	in := invokeInput(base, "quick question")
	got, err := acts.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "completed" || got.Answer != "done: quick question" || got.TaskID != "" || got.Endpoint != base+"/rpc" {
		t.Errorf("SendMessage = %+v, want the agent's message as a completed answer", got)
	}
	// The agent got the depth, one deeper than the invoking call, signed
	// for its endpoint and this message.
	tok, _ := agent.metadata[0][a2alink.MetadataDepthToken].(string)
	d, err := a2alink.NewDepthVerifier(loopback).Verify(context.Background(), tok, base+"/rpc", in.GetMessageId())
	if err != nil || d.Depth != 2 || d.Agent != "planner" {
		t.Errorf("the agent's depth token: %+v, %v; want planner at depth 2", d, err)
	}
}

func TestATaskIsFollowedAndCancelled(t *testing.T) {
	base := serveAgent(t, &travelAgent{})
	acts := activities(t)
	sent, err := acts.SendMessage(context.Background(), invokeInput(base, "book me a flight"))
	if err != nil {
		t.Fatal(err)
	}
	if sent.TaskID == "" || sent.State != "working" {
		t.Fatalf("SendMessage = %+v, want a working task", sent)
	}
	ref := remoteagents.TaskRef{Endpoint: sent.Endpoint, TaskID: sent.TaskID}
	if got, err := acts.GetTask(context.Background(), ref); err != nil || got.State != "working" || got.TaskID != sent.TaskID {
		t.Errorf("GetTask = %+v, %v; want the working task", got, err)
	}
	if err := acts.CancelTask(context.Background(), ref); err != nil {
		// The SDK's server refuses a cancel that races the end of the send's
		// execution (a2a-go v0.3.3, "better handling for concurrent Execute()
		// and Cancel() calls"): a transient failure, which the workflow's
		// retry policy retries. So it must be retryable, and a retry works.
		if nonRetryable(err) {
			t.Fatalf("CancelTask: %v, a refusal no retry changes", err)
		}
		if err := acts.CancelTask(context.Background(), ref); err != nil {
			t.Fatalf("CancelTask retried: %v", err)
		}
	}
	if got, err := acts.GetTask(context.Background(), ref); err != nil || got.State != "canceled" {
		t.Errorf("GetTask after the cancel = %+v, %v; want canceled", got, err)
	}
	// A task the agent does not know is a refusal no retry changes.
	_, err = acts.GetTask(context.Background(), remoteagents.TaskRef{Endpoint: sent.Endpoint, TaskID: "no-such-task"})
	if !nonRetryable(err) {
		t.Errorf("GetTask of an unknown task: %v, want non-retryable", err)
	}
}

func nonRetryable(err error) bool {
	app, ok := errors.AsType[*temporal.ApplicationError](err)
	return ok && app.NonRetryable() && app.Type() == remoteagents.ErrTypeRefused
}

func TestSendFailuresAreClassified(t *testing.T) {
	acts := activities(t)
	noCard := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(noCard.Close)
	_, err := acts.SendMessage(context.Background(), invokeInput(noCard.URL, "hello"))
	if !nonRetryable(err) || !strings.Contains(err.Error(), "404") {
		t.Errorf("an agent without a card: %v, want non-retryable naming the 404", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	if _, err := acts.SendMessage(context.Background(), invokeInput(down.URL, "hello")); err == nil || nonRetryable(err) {
		t.Errorf("an agent that is down: %v, want a retryable error", err)
	}
	refused := &remoteagents.Activities{HTTP: a2alink.HTTPClient(egress.Policy{}, time.Second, a2alink.MaxResponseBytes)}
	if _, err := refused.SendMessage(context.Background(), invokeInput(noCard.URL, "hello")); !nonRetryable(err) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("an agent on a refused address: %v, want non-retryable naming loopback", err)
	}
}
