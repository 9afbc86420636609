//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/chaoslog"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// Classes of an answer in a chaos run.
const (
	answerOK        = "ok"
	answerRetryable = "retryable" // a documented retryable error (docs/errors.md), or no answer while the edge was down
	answerViolation = "violation" // anything else: a 5xx, internal, a transport error with the edge up
	// answerLate is a call the client gave up on after callTimeout without
	// an answer: how long an answer takes hangs on the machine's load, so
	// it is reported, not asserted.
	answerLate = "late"
)

// retryableCodes are the codes a client is told to retry (docs/errors.md).
var retryableCodes = map[string]bool{"unavailable": true, "deadline_exceeded": true}

// chaosWorkload drives the mixed workload of a chaos run through the edge
// (and credits spends directly, as a service would) and keeps the log of
// what the mesh acknowledged.
type chaosWorkload struct {
	m         *mesh
	tag       string
	agent     string // the edge's dev agent: every call acts as it
	plain     *mcp.ClientSession
	eliciting *mcp.ClientSession // answers the edge's elicitation: confirmed
	credits   creditsv1connect.CreditsServiceClient
	workflow  string // the id of the agent's workflow the runs start
	a2a       *a2aclient.Client

	a2aStreams  sync.WaitGroup // the followers of streamed A2A tasks
	a2aFollowed atomic.Int64   // how many were followed
	a2aReading  sync.Mutex     // held by the simulated agent while it reads its inbox

	mu         sync.Mutex
	acked      []chaoslog.Ack
	calls      []outcome
	violations []outcome // answers classed as violations
	classes    map[string]int
	codes      map[string]int
	frontDown  func(front string, start, end time.Time) bool // the call met a fault of the process it was sent to
	console    *consoleOwner
	a2aPending map[string]a2aWait // A2A tasks the simulated agent has not answered, by their text
}

// ack logs a write the mesh acknowledged, with its key as the service
// keeps it (a client's key behind the edge's prefix).
func (w *chaosWorkload) ack(domain, id, key string) {
	w.mu.Lock()
	w.acked = append(w.acked, ackOf(domain, id, key, w.agent))
	w.mu.Unlock()
}

func ackOf(domain, id, key, agent string) chaoslog.Ack {
	return chaoslog.Ack{Domain: domain, ID: id, Key: key, Agent: agent, At: time.Now()}
}

// record classifies one answer; expected are domain codes the caller
// expects as an answer (a conflict on an answer already given).
func (w *chaosWorkload) record(o outcome, expected ...string) outcome {
	class := answerViolation
	switch code := o.code(); {
	case o.ok():
		class = answerOK
	case retryableCodes[code]:
		class = answerRetryable
	case code == "transport" && w.frontDown(o.frontName(), o.start, o.end):
		class = answerRetryable
	case code == "transport" && errors.Is(o.err, context.DeadlineExceeded):
		class = answerLate
	default:
		for _, e := range expected {
			if code == e {
				class = answerOK
			}
		}
	}
	w.mu.Lock()
	w.calls = append(w.calls, o)
	w.classes[class]++
	if class == answerViolation {
		w.violations = append(w.violations, o)
	}
	w.codes[o.code()]++
	w.mu.Unlock()
	return o
}

// keyed makes a write with an idempotency key, retried with the same key
// until it is answered with something other than a retryable error (or a
// minute passes); it returns the last outcome.
func (w *chaosWorkload) keyed(cs *mcp.ClientSession, tool string, args map[string]any, key string, expected ...string) outcome {
	var last outcome
	retry(func() bool {
		last = w.record(callTool(cs, tool, args, key), expected...)
		return last.ok() || !retryableCodes[last.code()] && last.code() != "transport"
	})
	return last
}

// The workload's loops: each runs until stop is closed.

func (w *chaosWorkload) tasks(n int) {
	key := fmt.Sprintf("%s-task-%d", w.tag, n)
	var res tasksv1.CreateResponse
	if o := w.keyed(w.plain, "tasks_create", map[string]any{"description": "chaos " + key}, key); protoData(o, &res) == nil {
		w.ack("tasks", res.GetTask().GetId(), edge.ClientKeyPrefix+key)
		w.record(callTool(w.plain, "tasks_get", map[string]any{"task_id": res.GetTask().GetId()}, ""))
	}
}

func (w *chaosWorkload) memory(n int) {
	key := fmt.Sprintf("%s-mem-%d", w.tag, n)
	if w.keyed(w.plain, "memory_save", map[string]any{"key": key, "content": "chaos memory " + key}, key).ok() {
		w.ack("memory", "", key)
	}
	w.record(callTool(w.plain, "memory_recall", map[string]any{"query": "chaos memory", "limit": 3}, ""))
}

// messages sends to the agent itself; every third message repeats the one
// before it with a key of its own, which the dedup window answers with
// the first message.
func (w *chaosWorkload) messages(n int) {
	key := fmt.Sprintf("%s-msg-%d", w.tag, n)
	body := fmt.Sprintf("chaos message %s-%d", w.tag, n-n%3)
	var res messagesv1.SendResponse
	if o := w.keyed(w.plain, "messages_send", map[string]any{"to_agent": w.agent, "message": body}, key); protoData(o, &res) == nil {
		w.ack("messages", res.GetMessage().GetId(), edge.ClientKeyPrefix+key)
	}
}

// grants are elicited admin calls: the edge asks the client to confirm,
// in a second round.
func (w *chaosWorkload) grants(n int) {
	ref := fmt.Sprintf("%s-grant-%d", w.tag, n)
	var res creditsv1.GrantResponse
	if o := w.keyed(w.eliciting, "credits_grant", map[string]any{"wallet": w.agent, "amount": "3", "reference": ref}, ref); protoData(o, &res) == nil {
		w.ack("credits", res.GetEntry().GetId(), ref)
	}
	w.record(callTool(w.plain, "credits_balance", map[string]any{}, ""))
}

// spends go to the credits service directly, with the reference as the
// idempotency key, retried until answered; a spend the balance cannot
// cover is refused (failed_precondition), which is an answer.
func (w *chaosWorkload) spends(n int) {
	ref := fmt.Sprintf("%s-spend-%d", w.tag, n)
	retry(func() bool {
		o := outcome{tool: "credits.Spend (direct)", key: ref, start: time.Now()}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		res, err := w.credits.Spend(withKey(ctx, ref), &creditsv1.SpendRequest{Amount: 2, Reference: ref})
		cancel()
		o.end = time.Now()
		var ce *connect.Error
		switch {
		case err == nil:
			o.env = envelope{Status: "ok"}
			w.ack("credits", res.GetEntry().GetId(), ref)
		case errors.As(err, &ce) && !connect.IsWireError(err) && ce.Code() != connect.CodeDeadlineExceeded:
			// No answer from the service: refused, or cut by its death
			// (connect-go reports a reset connection as canceled). The
			// edge answers its callers unavailable then, and so is it
			// counted here (docs/errors.md).
			o.env = envelope{Status: "error", DomainCode: "unavailable", Message: err.Error()}
		case errors.As(err, &ce):
			o.env = envelope{Status: "error", DomainCode: ce.Code().String(), Message: ce.Message()}
		default:
			o.err = err
		}
		w.record(o, "failed_precondition")
		return o.ok() || (o.err == nil && !retryableCodes[o.code()])
	})
}

// asks are owner asks the simulated owner answers.
func (w *chaosWorkload) asks(n int) {
	key := fmt.Sprintf("%s-ask-%d", w.tag, n)
	var res ownerv1.AskResponse
	if o := w.keyed(w.plain, "owner_ask", map[string]any{"question": "proceed with " + key + "?", "wait_seconds": 0, "timeout_seconds": 3600}, key); protoData(o, &res) == nil {
		w.ack("owner", res.GetAsk().GetAskId(), "")
	}
}

// runs start the agent's workflow; its approval node is an ask the
// simulated owner answers.
func (w *chaosWorkload) runs(n int) {
	key := fmt.Sprintf("%s-run-%d", w.tag, n)
	var res workflowsv1.RunResponse
	if o := w.keyed(w.plain, "workflows_run", map[string]any{"workflow_id": w.workflow, "wait_seconds": 0}, key); protoData(o, &res) == nil {
		w.ack("workflows", res.GetRun().GetRunId(), "")
	}
}

// owner is the simulated owner: it answers every pending ask of the
// agent (asks and workflow approvals alike), and returns how many were
// pending when it looked.
func (w *chaosWorkload) owner() int {
	var list ownerv1.ListAsksResponse
	if protoData(w.record(callTool(w.plain, "owner_list_asks", map[string]any{"status": "ASK_STATUS_PENDING", "limit": 50}, "")), &list) != nil {
		return -1
	}
	for _, a := range list.GetAsks() {
		// conflict: answered already. not_found: the ask was listed while
		// it was being started, and withdrawn when its start failed (its
		// asker was answered unavailable).
		w.record(callTool(w.plain, "owner_answer", map[string]any{"ask_id": a.GetAskId(), "answer": "approve"}, a.GetAskId()+"-answer"), "conflict", "not_found")
	}
	return len(list.GetAsks())
}
