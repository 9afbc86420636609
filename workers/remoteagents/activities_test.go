package remoteagents_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2asrv03 "github.com/a2aproject/a2a-go/a2asrv"
	eventqueue03 "github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// travelAgent03 is an A2A 0.3 agent on the official Go SDK's 0.3 server:
// it answers "quick ..." with a message, and opens a working task for
// anything else, which tasks/cancel cancels. It keeps the metadata of what
// it was sent.
type travelAgent03 struct {
	mu       sync.Mutex
	metadata []map[string]any
}

func (a *travelAgent03) Execute(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue03.Queue) error {
	a.mu.Lock()
	a.metadata = append(a.metadata, rc.Message.Metadata)
	a.mu.Unlock()
	var text string
	for _, p := range rc.Message.Parts {
		if t, ok := p.(a2a03.TextPart); ok {
			text += t.Text
		}
	}
	if strings.HasPrefix(text, "quick") {
		return q.Write(ctx, a2a03.NewMessage(a2a03.MessageRoleAgent, a2a03.TextPart{Text: "done: " + text}))
	}
	ev := a2a03.NewStatusUpdateEvent(rc, a2a03.TaskStateWorking, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (a *travelAgent03) Cancel(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue03.Queue) error {
	ev := a2a03.NewStatusUpdateEvent(rc, a2a03.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (a *travelAgent03) sent() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metadata
}

// serveAgent03 serves the 0.3 agent's card at /.well-known/agent-card.json
// and JSON-RPC at /rpc; it returns the base URL and the endpoint.
func serveAgent03(t *testing.T, a *travelAgent03) (string, string) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a03.AgentCard{Name: "travel", Description: "Books trips.", URL: srv.URL + "/rpc", Version: "1", ProtocolVersion: "0.3.0",
		PreferredTransport: a2a03.TransportProtocolJSONRPC, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a03.AgentSkill{{ID: "book", Name: "Book", Description: "Books.", Tags: []string{"travel"}}}}
	mux.Handle(a2asrv03.WellKnownAgentCardPath, a2asrv03.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv03.NewJSONRPCHandler(a2asrv03.NewHandler(a)))
	return srv.URL, srv.URL + "/rpc"
}

// travelAgent10 is the same agent on the A2A 1.0 SDK (a2a-go/v2): a task
// it opens stays working until it is cancelled.
type travelAgent10 struct {
	mu       sync.Mutex
	metadata []map[string]any
}

func (a *travelAgent10) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		a.mu.Lock()
		a.metadata = append(a.metadata, ec.Message.Metadata)
		a.mu.Unlock()
		text := a2alink.Text(ec.Message.Parts)
		if strings.HasPrefix(text, "quick") {
			yield(a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("done: "+text)), nil)
			return
		}
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		<-ctx.Done()
	}
}

func (a *travelAgent10) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

func (a *travelAgent10) sent() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metadata
}

// serveAgent10 serves the 1.0 agent: its card, and JSON-RPC at /rpc and
// HTTP+JSON at /rest (1.0), listing REST first; it returns the base URL and
// the JSON-RPC endpoint, which the mesh prefers.
func serveAgent10(t *testing.T, a *travelAgent10) (string, string) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "travel", Description: "Books trips.", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(srv.URL+"/rest", a2a.TransportProtocolHTTPJSON),
			a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC),
		},
		Capabilities:      a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "book", Name: "Book", Description: "Books.", Tags: []string{"travel"}}}}
	h := a2asrv.NewHandler(a)
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(h))
	mux.Handle("/rest/", http.StripPrefix("/rest", a2asrv.NewRESTHandler(h)))
	return srv.URL, srv.URL + "/rpc"
}

// agent is a remote agent under test: its base URL, the endpoint the mesh
// speaks to, the version, and what it was sent.
type agent struct {
	version, base, endpoint string
	sent                    func() []map[string]any
}

// agents are the same agent on A2A 0.3 and on 1.0.
func agents(t *testing.T) []agent {
	a03, a10 := &travelAgent03{}, &travelAgent10{}
	b03, e03 := serveAgent03(t, a03)
	b10, e10 := serveAgent10(t, a10)
	return []agent{{"0.3", b03, e03, a03.sent}, {"1.0", b10, e10, a10.sent}}
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
	for _, ag := range agents(t) {
		t.Run(ag.version, func(t *testing.T) {
			acts := activities(t)
			in := invokeInput(ag.base, "quick question")
			got, err := acts.SendMessage(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != "completed" || got.Answer != "done: quick question" || got.TaskID != "" || got.Endpoint != ag.endpoint ||
				got.Version != ag.version || got.Binding != "JSONRPC" {
				t.Errorf("SendMessage = %+v, want the agent's message as a completed answer, over JSON-RPC %s", got, ag.version)
			}
			// The agent got the depth, one deeper than the invoking call,
			// signed for its endpoint and this message.
			tok, _ := ag.sent()[0][a2alink.MetadataDepthToken].(string)
			d, err := a2alink.NewDepthVerifier(loopback).Verify(context.Background(), tok, in.GetMessageId(), ag.endpoint)
			if err != nil || d.Depth != 2 || d.Agent != "planner" {
				t.Errorf("the agent's depth token: %+v, %v; want planner at depth 2", d, err)
			}
		})
	}
}

func TestATaskIsFollowedAndCancelled(t *testing.T) {
	for _, ag := range agents(t) {
		t.Run(ag.version, func(t *testing.T) {
			acts := activities(t)
			sent, err := acts.SendMessage(context.Background(), invokeInput(ag.base, "book me a flight"))
			if err != nil {
				t.Fatal(err)
			}
			// A send that does not wait returns the task as it first is:
			// submitted (1.0) or working (this 0.3 agent's first event).
			if sent.TaskID == "" || (sent.State != "working" && sent.State != "submitted") {
				t.Fatalf("SendMessage = %+v, want a task in progress", sent)
			}
			ref := remoteagents.TaskRef{Endpoint: sent.Endpoint, Binding: sent.Binding, Version: sent.Version, TaskID: sent.TaskID}
			if got, err := acts.GetTask(context.Background(), ref); err != nil || (got.State != "working" && got.State != "submitted") ||
				got.TaskID != sent.TaskID || got.Version != ag.version {
				t.Errorf("GetTask = %+v, %v; want the task in progress", got, err)
			}
			// The SDKs' servers may refuse a cancel that races the end of
			// the send's execution, as not cancelable or as an internal
			// error: a transient failure, which the workflow's retry
			// policy retries (up to 3 attempts, a second apart). So every
			// failure must be retryable, and the attempts the policy makes
			// must cancel the task.
			for attempt := 1; ; attempt++ {
				err := acts.CancelTask(context.Background(), ref)
				if err == nil {
					break
				}
				if nonRetryable(err) {
					t.Fatalf("CancelTask: %v, a refusal no retry changes", err)
				}
				if attempt == 3 {
					t.Fatalf("CancelTask failed %d times: %v", attempt, err)
				}
				time.Sleep(time.Second)
			}
			if got, err := acts.GetTask(context.Background(), ref); err != nil || got.State != "canceled" {
				t.Errorf("GetTask after the cancel = %+v, %v; want canceled", got, err)
			}
			// A task the agent does not know is a refusal no retry changes.
			ref.TaskID = "no-such-task"
			if _, err = acts.GetTask(context.Background(), ref); !nonRetryable(err) {
				t.Errorf("GetTask of an unknown task: %v, want non-retryable", err)
			}
		})
	}
}

// TestAnOldTaskRefIsA03JSONRPCTask: a task followed by a workflow that
// started before the mesh spoke 1.0 names only its endpoint: it is read
// over JSON-RPC 0.3.
func TestAnOldTaskRefIsA03JSONRPCTask(t *testing.T) {
	base, _ := serveAgent03(t, &travelAgent03{})
	acts := activities(t)
	sent, err := acts.SendMessage(context.Background(), invokeInput(base, "book me a flight"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := acts.GetTask(context.Background(), remoteagents.TaskRef{Endpoint: sent.Endpoint, TaskID: sent.TaskID}); err != nil || got.State != "working" {
		t.Errorf("GetTask by endpoint alone = %+v, %v; want the working task", got, err)
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
