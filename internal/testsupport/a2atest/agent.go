// Package a2atest runs a remote A2A agent for tests, on the official Go
// SDK's server (a2a-go/v2): an agent that streams its progress one step at
// a time, as the test lets it.
//
//	agent := a2atest.NewProgressAgent("Searching flights.", "Found 3 flights.")
//	base := a2atest.Serve(t, agent, true) // its card at base/.well-known/agent-card.json
//	agent.Step(3)                          // both steps, then the answer
package a2atest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// Answer and ArtifactName are what a ProgressAgent's task ends with: an
// artifact named ArtifactName holding Answer, then completed with the
// status message Done.
const (
	Answer       = "LH 400, seat 12A"
	ArtifactName = "itinerary"
	Done         = "Booked."
)

// ProgressAgent opens a task for each message and reports each of its
// steps as a working status with the step's text, each once the test lets
// it (Step); one more step sends the artifact and completes the task.
type ProgressAgent struct {
	steps []string
	gate  chan struct{}

	mu            sync.Mutex
	messages      []string
	cancels       int
	subscriptions int
	cut           int
}

// CutFirstStream makes the agent's server drop the connection of the first
// stream it serves after n events, as a proxy that fails would.
func (a *ProgressAgent) CutFirstStream(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cut = n
}

// NewProgressAgent is an agent that reports steps.
func NewProgressAgent(steps ...string) *ProgressAgent {
	return &ProgressAgent{steps: steps, gate: make(chan struct{}, 64)}
}

// Step lets the agent take n more steps (the last of its task's is the
// answer).
func (a *ProgressAgent) Step(n int) {
	for range n {
		a.gate <- struct{}{}
	}
}

// Executed are the ids of the messages the agent was sent, one per
// execution: a message sent twice is in it twice.
func (a *ProgressAgent) Executed() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.messages)
}

// Cancels is how often a task was cancelled.
func (a *ProgressAgent) Cancels() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cancels
}

// Subscriptions is how often a client subscribed to a task
// (SubscribeToTask) and was sent its first event, the task as it is: from
// then on the subscription sees every later event.
func (a *ProgressAgent) Subscriptions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.subscriptions
}

// Execute implements a2asrv.AgentExecutor.
func (a *ProgressAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		a.mu.Lock()
		a.messages = append(a.messages, ec.Message.ID)
		a.mu.Unlock()
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		next := func() bool {
			select {
			case <-a.gate:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, s := range a.steps {
			if !next() || !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(s))), nil) {
				return
			}
		}
		if !next() {
			return
		}
		art := a2a.NewArtifactEvent(ec, a2a.NewTextPart(Answer))
		art.Artifact.Name = ArtifactName
		if !yield(art, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(Done))), nil)
	}
}

// Cancel implements a2asrv.AgentExecutor.
func (a *ProgressAgent) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		a.mu.Lock()
		a.cancels++
		a.mu.Unlock()
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// Serve serves a over A2A 1.0 JSON-RPC at <base>/rpc until the test ends,
// its card saying whether it streams, and returns base.
func Serve(t testing.TB, a *ProgressAgent, streams bool) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "travel", Description: "Books trips.", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: streams},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "book", Name: "Book", Description: "Books trips.", Tags: []string{"travel"}}}}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(a, a2asrv.WithCapabilityChecks(&card.Capabilities)))
	mux.Handle("/rpc", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct{ Method string }
		_ = json.Unmarshal(body, &req)
		a.mu.Lock()
		cut := 0
		if req.Method == "SendStreamingMessage" || req.Method == "SubscribeToTask" {
			cut, a.cut = a.cut, 0
		}
		a.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &streamWriter{ResponseWriter: w, cut: cut}
		if req.Method == "SubscribeToTask" || req.Method == "tasks/resubscribe" {
			sw.first = func() {
				a.mu.Lock()
				a.subscriptions++
				a.mu.Unlock()
			}
		}
		rpc.ServeHTTP(sw, r)
	}))
	return srv.URL
}

// streamWriter watches a response's server-sent events (the SDK writes
// one per call): first is called after the first is sent, and with cut
// set the connection is dropped once cut are sent.
type streamWriter struct {
	http.ResponseWriter
	first func()
	cut   int
	sent  int
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	events := bytes.Count(p, []byte("data:"))
	if events == 0 {
		return n, err
	}
	w.Flush()
	w.sent += events
	if w.first != nil {
		w.first()
		w.first = nil
	}
	if w.cut > 0 && w.sent >= w.cut {
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (w *streamWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
