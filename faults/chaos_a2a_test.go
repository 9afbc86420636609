//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
)

// The A2A part of the chaos workload: a2a-go/v2's own client, over the
// JSON-RPC 1.0 binding, sends messages to the development agent as an
// agent of another mesh would; every fourth task is followed over a
// stream that resubscribes from its last event after every cut; a
// simulated agent answers each message in its thread through the edge,
// which completes the task.

// a2aSender is the sender the mesh sees: a loopback caller without a
// token is a2a-local (docs/a2a.md).
const a2aSender = "a2a-local"

// followedFor is how long the simulated agent leaves a followed task open
// before it answers.
const followedFor = 15 * time.Second

// a2aWait is an A2A task waiting for the simulated agent's answer.
type a2aWait struct {
	task        a2a.TaskID
	answerAfter time.Time
}

// a2aClient opens the client on the agent's JSON-RPC 1.0 interface.
func a2aClient(ctx context.Context, base string, hc *http.Client) (*a2aclient.Client, error) {
	card, err := a2alink.FetchCard(ctx, hc, base)
	if err != nil {
		return nil, err
	}
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolJSONRPC && i.ProtocolVersion == a2a.Version {
			return a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{i}, a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc))
		}
	}
	return nil, fmt.Errorf("the card of %s offers no JSON-RPC 1.0 interface", base)
}

// a2aAnswer is an A2A call's error as an outcome: an error the door says
// to try again (docs/a2a.md) or the agents directory's 503 is
// unavailable, another A2A error is its reason, anything else no answer.
func a2aAnswer(o outcome, err error) outcome {
	o.end = time.Now()
	var ae *a2a.Error
	switch {
	case err == nil:
		o.env = envelope{Status: "ok"}
	case errors.As(err, &ae) && ae.Details["retryable"] == true,
		strings.Contains(err.Error(), "unexpected HTTP status: 503"):
		o.env = envelope{Status: "error", DomainCode: "unavailable", Message: err.Error()}
	case errors.As(err, &ae):
		o.env = envelope{Status: "error", DomainCode: "a2a " + a2a.ErrorReason(ae.Err), Message: err.Error()}
	default:
		o.err = err
	}
	return o
}

// a2aSend sends one message, retried with the same message id until it is
// answered; the task it opened is acknowledged and waits for the
// simulated agent's answer.
func (w *chaosWorkload) a2aSend(n int) {
	id := fmt.Sprintf("%s-a2a-%d", w.tag, n)
	text := "chaos a2a " + id
	var task *a2a.Task
	retry(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
		msg.ID = id
		res, err := w.a2a.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
		cancel()
		o := w.record(a2aAnswer(outcome{tool: "a2a SendMessage", key: id, start: time.Now()}, err))
		if err == nil {
			task, _ = res.(*a2a.Task)
		}
		return o.ok() || o.err == nil && o.code() != "unavailable"
	})
	if task == nil {
		return
	}
	followed := n%4 == 0
	wait := a2aWait{task: task.ID}
	if followed {
		// A followed task stays open a while, so that faults cut its
		// stream.
		wait.answerAfter = time.Now().Add(followedFor)
	}
	w.mu.Lock()
	w.acked = append(w.acked, ackOf("a2a", string(task.ID), id, a2aSender))
	w.a2aPending[text] = wait
	w.mu.Unlock()
	if followed {
		last, _ := task.Metadata[a2alink.EventsExtension].(map[string]any)["last_event_id"].(string)
		w.a2aFollowed.Add(1)
		w.a2aStreams.Go(func() { w.follow(task.ID, last) })
	}
}

// follow streams a task until it ends, resubscribing after every cut with
// the last event id it has: every later event must come once, in order —
// a gap or a repeat is a violation. It gives up after the drain's bound.
func (w *chaosWorkload) follow(id a2a.TaskID, last string) {
	seq := int64(1)
	if _, s, ok := strings.Cut(last, "/"); ok {
		_, _ = fmt.Sscan(s, &seq)
	}
	giveUp := time.Now().Add(*chaosDuration + 5*time.Minute)
	for pause := 100 * time.Millisecond; time.Now().Before(giveUp); pause = min(2*pause, 2*time.Second) {
		ctx := a2aclient.AttachServiceParams(context.Background(), a2aclient.ServiceParams{a2alink.ParamLastEventID: {fmt.Sprintf("%s/%d", id, seq)}})
		ctx, cancel := context.WithTimeout(ctx, *chaosDuration+3*time.Minute)
		o := outcome{tool: "a2a SubscribeToTask", key: string(id), start: time.Now()}
		var err error
		ended := false
		for ev, e := range w.a2a.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
			if e != nil {
				err = e
				break
			}
			var meta map[string]any
			switch e := ev.(type) {
			case *a2a.TaskStatusUpdateEvent:
				meta, ended = e.Metadata, e.Status.State.Terminal()
			case *a2a.TaskArtifactUpdateEvent:
				meta = e.Metadata
			default:
				continue // the snapshot
			}
			got, _ := meta[a2alink.EventsExtension].(map[string]any)["id"].(string)
			if want := fmt.Sprintf("%s/%d", id, seq+1); got != want {
				w.record(outcome{tool: "a2a SubscribeToTask", key: string(id), start: o.start, end: time.Now(),
					env: envelope{Status: "error", DomainCode: "event out of order", Message: fmt.Sprintf("event %q after %s/%d, want %q", got, id, seq, want)}})
			}
			seq++
		}
		cancel()
		w.record(a2aAnswer(o, err))
		if ended {
			return
		}
		time.Sleep(pause)
	}
	w.record(outcome{tool: "a2a SubscribeToTask", key: string(id), start: giveUp, end: time.Now(),
		env: envelope{Status: "error", DomainCode: "stream never ended", Message: fmt.Sprintf("task %s: no end after event %d", id, seq)}})
}

// a2aAgent is the simulated agent: it answers each A2A message still
// waiting in its thread (as the message's recipient, on behalf of the
// message), which completes its task; it returns how many wait.
func (w *chaosWorkload) a2aAgent() int {
	w.mu.Lock()
	waiting := len(w.a2aPending)
	w.mu.Unlock()
	// One reader of the inbox at a time: a read that takes longer than
	// the loop's period is not started twice.
	if !w.a2aReading.TryLock() {
		return waiting
	}
	defer w.a2aReading.Unlock()
	// The inbox lists newest first, and the workload's own messages pile
	// up in it: read it to the end while a message still waits.
	for offset := 0; waiting > 0; offset += 200 {
		var list messagesv1.ListResponse
		if protoData(w.record(callTool(w.plain, "messages_list", map[string]any{"offset": offset, "limit": 200}, "")), &list) != nil {
			return waiting
		}
		for _, m := range list.GetMessages() {
			w.mu.Lock()
			wait, ok := w.a2aPending[m.GetText()]
			w.mu.Unlock()
			if !ok || m.GetFromAgent() != a2aSender || time.Now().Before(wait.answerAfter) {
				continue
			}
			key := "answer-" + m.GetId()
			var answered outcome
			retry(func() bool {
				answered = w.record(callToolMeta(w.plain, "messages_send", map[string]any{"to_agent": m.GetFromAgent(), "thread_id": m.GetThreadId(), "message": "done: " + m.GetText()},
					mcp.Meta{edge.MetaIdempotencyKey: key, edge.MetaOnBehalfOf: m.GetId()}))
				return answered.ok() || !retryableCodes[answered.code()] && answered.code() != "transport"
			})
			if answered.ok() {
				w.mu.Lock()
				delete(w.a2aPending, m.GetText())
				waiting = len(w.a2aPending)
				w.mu.Unlock()
			}
		}
		if len(list.GetMessages()) < 200 {
			break
		}
	}
	return waiting
}
