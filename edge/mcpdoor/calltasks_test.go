package mcpdoor_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

// The calls the calls worker carries as MCP tasks, at 2026-07-28, on a
// real dev server with a worker in the test: a tool that supports tasks, an
// elicited admin call, a tool's questions, fields asked before the task.

// wireTask is a task as the extension's wire shows it.
type wireTask struct {
	ResultType    string                              `json:"resultType"`
	TaskID        string                              `json:"taskId"`
	Status        string                              `json:"status"`
	StatusMessage string                              `json:"statusMessage"`
	CreatedAt     time.Time                           `json:"createdAt"`
	TTLMs         *int64                              `json:"ttlMs"`
	InputRequests map[string]edgetest.RawInputRequest `json:"inputRequests"`
	Result        *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Meta map[string]any `json:"_meta"`
}

func wireTaskOf(t *testing.T, r edgetest.RpcReply) wireTask {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d: %s", r.Error.Code, r.Error.Message)
	}
	var w wireTask
	if err := json.Unmarshal(r.Result, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// getTask reads a task.
func getTask(t *testing.T, url, id string) wireTask {
	t.Helper()
	return wireTaskOf(t, edgetest.TaskRequest(t, url, "tasks/get", map[string]any{"taskId": id}, edgetest.TasksCaps))
}

// awaitTask polls a task until cond holds of it, generously bounded.
func awaitTask(t *testing.T, url, id, what string, cond func(wireTask) bool) wireTask {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w := getTask(t, url, id)
		if cond(w) {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: waited 30s for %s; last %+v", id, what, w)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func terminal(w wireTask) bool {
	return w.Status == "completed" || w.Status == "failed" || w.Status == "cancelled"
}

// A tool that supports tasks: a client that follows them gets a task at
// once, which completes with the result the call would have had; one that
// does not gets the result; a 2025 params.task is ignored.
func TestToolThatSupportsTasksBecomesOne(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)

	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 200}}, edgetest.TasksCaps))
	if created.ResultType != "task" || !strings.HasPrefix(created.TaskID, "call/testing_wait/") || created.Status != "working" {
		t.Fatalf("created = %+v, want a working task of the calls worker", created)
	}
	if created.TTLMs == nil || *created.TTLMs <= 0 {
		t.Errorf("ttlMs = %v, want the namespace's retention", created.TTLMs)
	}
	done := awaitTask(t, f.URL, created.TaskID, "the task to end", terminal)
	if done.Status != "completed" || done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"waited_millis"`) {
		t.Errorf("done = %+v, want completed with the wait's result", done)
	}
	if done.CreatedAt.IsZero() || done.ResultType != "complete" {
		t.Errorf("tasks/get = %+v", done)
	}

	sync := edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 0}, "task": map[string]any{"ttl": 60000}}, nil)
	var res struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
		IsError    bool   `json:"isError"`
	}
	if err := json.Unmarshal(sync.Result, &res); err != nil || res.ResultType != "complete" || res.TaskID != "" || res.IsError {
		t.Errorf("a call from a client without the extension = %s (%v), want its result", sync.Result, sync.Error)
	}
}

// An elicited admin call from a client that follows tasks is a task
// waiting for the confirmation; tasks/update answers it — checked against
// the form, ignoring other keys, refusing what is not the caller's or is
// late — and the side effect runs once.
func TestElicitedAdminCallIsAnInputRequiredTask(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)

	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_purge", "arguments": map[string]any{"agent_id": "victim"}}, edgetest.TasksCaps))
	if created.ResultType != "task" || created.Status != "input_required" || created.InputRequests != nil {
		t.Fatalf("created = %+v, want an input_required task without its requests", created)
	}
	w := getTask(t, f.URL, created.TaskID)
	q, ok := w.InputRequests["r1.admin"]
	if w.Status != "input_required" || len(w.InputRequests) != 1 || !ok || q.Method != "elicitation/create" || !strings.Contains(q.Params.Message, `"agent_id":"victim"`) {
		t.Fatalf("tasks/get = %+v, want the confirmation r1.admin showing the arguments", w)
	}
	update := func(responses map[string]any, meta map[string]any) edgetest.RpcReply {
		params := map[string]any{"taskId": created.TaskID, "inputResponses": responses}
		if meta != nil {
			params["_meta"] = meta
		}
		return edgetest.TaskRequest(t, f.URL, "tasks/update", params, edgetest.TasksCaps)
	}
	if r := update(map[string]any{"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": "yes", "reason": "x"}}}, nil); r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "r1.admin") {
		t.Errorf("an answer that does not fit = %s %+v, want -32602 naming the key", r.Result, r.Error)
	}
	if r := update(map[string]any{"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}, nil); r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "Reason") {
		t.Errorf("an incomplete answer = %s %+v, want -32602 naming what is missing", r.Result, r.Error)
	}
	ack := wireTaskOf(t, update(map[string]any{"unknown-key": map[string]any{"ignored": true}}, nil))
	if ack.ResultType != "complete" || ack.TaskID != "" || !slices.Equal(asStrings(ack.Meta["dev.toolmesh/ignoredInputResponses"]), []string{"unknown-key"}) {
		t.Errorf("an update for another key = %+v, want an acknowledgement naming it ignored", ack)
	}
	if n := m.Backend.Executions("Purge"); n != 0 {
		t.Fatalf("the purge ran %d times before it was confirmed", n)
	}
	answer := map[string]any{"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": true, "reason": "cleanup"}}}
	if ack := wireTaskOf(t, update(answer, nil)); ack.ResultType != "complete" || ack.Meta["dev.toolmesh/ignoredInputResponses"] != nil {
		t.Errorf("the answer's acknowledgement = %+v", ack)
	}
	done := awaitTask(t, f.URL, created.TaskID, "the purge", terminal)
	if done.Status != "completed" || done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"removed":0`) {
		t.Errorf("done = %+v, want completed with the purge's result", done)
	}
	if r := update(answer, nil); r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "nothing was changed") {
		t.Errorf("a repeated answer = %s %+v, want -32602 saying nothing was changed", r.Result, r.Error)
	}
	if n := m.Backend.Executions("Purge"); n != 1 {
		t.Errorf("the purge ran %d times, want once", n)
	}
}

func asStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, s := range list {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

// A tool's question a call leaves unanswered is asked by the task; a
// call's missing input is asked before: by multi-round elicitation, and the
// round that completes it answers with the task.
func TestQuestionsInTheTaskAndFieldsBefore(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)

	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_write", "arguments": map[string]any{}}, edgetest.TasksCaps))
	w := getTask(t, f.URL, created.TaskID)
	if q, ok := w.InputRequests["r1.note"]; w.Status != "input_required" || !ok || q.Params.Message != "What should the note say?" {
		t.Fatalf("tasks/get = %+v, want the question r1.note", w)
	}
	wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tasks/update", map[string]any{"taskId": created.TaskID,
		"inputResponses": map[string]any{"r1.note": map[string]any{"action": "accept", "content": map[string]any{"note": "from the task"}}}}, edgetest.TasksCaps))
	if done := awaitTask(t, f.URL, created.TaskID, "the note", terminal); done.Status != "completed" || !strings.Contains(string(done.Result.StructuredContent), `"count":1`) {
		t.Errorf("done = %+v, want the note written", done)
	}

	// testing_purge without agent_id: the field first, as a round.
	r1 := edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_purge", "arguments": map[string]any{}}, edgetest.TasksCaps)
	var round struct {
		ResultType    string                              `json:"resultType"`
		TaskID        *string                             `json:"taskId"`
		InputRequests map[string]edgetest.RawInputRequest `json:"inputRequests"`
		RequestState  string                              `json:"requestState"`
	}
	if err := json.Unmarshal(r1.Result, &round); err != nil || round.ResultType != "input_required" || round.TaskID != nil || round.InputRequests["r1.fields"].Method == "" {
		t.Fatalf("round 1 = %s, want the missing field asked before any task", r1.Result)
	}
	r2 := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_purge", "arguments": map[string]any{}, "requestState": round.RequestState,
		"inputResponses": map[string]any{"r1.fields": map[string]any{"action": "accept", "content": map[string]any{"agent_id": "victim"}}}}, edgetest.TasksCaps))
	if r2.ResultType != "task" || r2.Status != "input_required" {
		t.Fatalf("round 2 = %+v, want the task, waiting for the confirmation", r2)
	}
	if w := getTask(t, f.URL, r2.TaskID); w.InputRequests["r2.admin"].Method == "" {
		t.Errorf("tasks/get = %+v, want r2.admin", w)
	}
}

// tasks/cancel of a running task cuts its service call short; the task is
// cancelled, and cancelling it again is acknowledged.
func TestCancelledCallTask(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 60000}}, edgetest.TasksCaps))
	eventually(t, "the wait to begin", func() bool { return m.Backend.Calls("Wait") == 1 })
	for range 2 {
		if ack := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tasks/cancel", map[string]any{"taskId": created.TaskID}, edgetest.TasksCaps)); ack.ResultType != "complete" || ack.TaskID != "" {
			t.Errorf("tasks/cancel = %+v, want an empty acknowledgement", ack)
		}
	}
	if w := awaitTask(t, f.URL, created.TaskID, "the cancellation", terminal); w.Status != "cancelled" {
		t.Errorf("task = %+v, want cancelled", w)
	}
	eventually(t, "the wait to be cut short", func() bool { return m.Backend.Calls("Wait.cancelled") == 1 })
}

// The task methods refuse what is not theirs to answer: a client without
// the extension (-32021), an unknown task or another agent's (-32602), the
// 2025-11-25 methods (-32601).
func TestTaskMethodsRefusals(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 0}}, edgetest.TasksCaps))
	for _, c := range []struct {
		method string
		params map[string]any
		caps   map[string]any
		code   int
	}{
		{"tasks/get", map[string]any{"taskId": created.TaskID}, nil, -32021},
		{"tasks/update", map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{}}, nil, -32021},
		{"tasks/get", map[string]any{"taskId": "call/testing_wait/0123456789abcdef"}, edgetest.TasksCaps, -32602},
		{"tasks/get", map[string]any{"taskId": "nonsense"}, edgetest.TasksCaps, -32602},
		{"tasks/result", map[string]any{"taskId": created.TaskID}, edgetest.TasksCaps, -32601},
		{"tasks/list", map[string]any{}, edgetest.TasksCaps, -32601},
	} {
		if r := edgetest.TaskRequest(t, f.URL, c.method, c.params, c.caps); r.Error == nil || r.Error.Code != c.code {
			t.Errorf("%s %v = %s %+v, want %d", c.method, c.params, r.Result, r.Error, c.code)
		}
	}

	// Mcp-Name routes a task method by its task: one naming another task
	// is refused, 400 and -32020, before the method runs.
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 8, "method": "tasks/get", "params": map[string]any{"taskId": created.TaskID,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": edgetest.TasksCaps}}})
	h := edgetest.ModernHeaders("tasks/get")
	h.Set("Mcp-Name", "another-task")
	res, raw := edgetest.Post(t, f.URL, h, string(body))
	var r edgetest.RpcReply
	if err := json.Unmarshal(edgetest.LastMessage(raw), &r); err != nil || res.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32020 {
		t.Errorf("tasks/get with Mcp-Name of another task = %d %s, want 400 and -32020", res.StatusCode, raw)
	}
}

// eventually polls cond, generously bounded (a cancelled activity learns of
// it at its next heartbeat, seconds later).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 60s for %s", what)
		}
	}
}

// The elicited admin call of a client that follows tasks, at 2026-07-28,
// across two edge replicas (processes): created on the first, which is then
// killed, and read, answered and followed to its end on the second. The
// task's state is in Temporal, not in an edge, and the purge runs once.
func TestInputRequiredTaskOutlivesItsEdge(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	purgedOnce := m.SeedPurge(t)
	a, aURL := m.StartEdgeProcess(t)
	_, bURL := m.StartEdgeProcess(t)

	created := wireTaskOf(t, edgetest.TaskRequest(t, aURL, "tools/call", map[string]any{"name": "testing_purge", "arguments": map[string]any{"agent_id": "victim"}}, edgetest.TasksCaps))
	if created.ResultType != "task" || created.Status != "input_required" {
		t.Fatalf("created = %+v, want an input_required task", created)
	}
	if w := getTask(t, aURL, created.TaskID); w.InputRequests["r1.admin"].Method != "elicitation/create" {
		t.Fatalf("tasks/get on the first edge = %+v, want r1.admin", w)
	}
	edgetest.KillProcess(t, a)

	w := getTask(t, bURL, created.TaskID)
	if w.Status != "input_required" || w.InputRequests["r1.admin"].Method != "elicitation/create" {
		t.Fatalf("tasks/get on the second edge = %+v, want the same question", w)
	}
	answer := map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{
		"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": true, "reason": "the first edge is gone"}}}}
	if ack := wireTaskOf(t, edgetest.TaskRequest(t, bURL, "tasks/update", answer, edgetest.TasksCaps)); ack.ResultType != "complete" || ack.Meta["dev.toolmesh/ignoredInputResponses"] != nil {
		t.Fatalf("tasks/update on the second edge = %+v", ack)
	}
	done := awaitTask(t, bURL, created.TaskID, "the purge", terminal)
	if done.Status != "completed" || done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"removed":3`) {
		t.Errorf("done = %+v, want completed with the three notes removed", done)
	}
	if r := edgetest.TaskRequest(t, bURL, "tasks/update", answer, edgetest.TasksCaps); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("the answer again = %s %+v, want -32602", r.Result, r.Error)
	}
	purgedOnce()
}

// An elicited call and a call carried as an MCP task reach their service
// with the caller's grants, as a direct call does: work a service does on
// the caller's behalf (an agent workflow run's tool calls) is held to them.
func TestElicitedAndTaskCallsCarryTheCallersGrants(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	iss := identitytest.NewIssuer(t)
	f := m.Edge(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	tok := iss.Sign(t, jose.RS256, iss.Valid(edgetest.ResourceFor(f.HTTP), "alice", "toolmesh:admin toolmesh:write"))

	c := edgetest.NewConversation(t)
	c.Extra = http.Header{"Authorization": {"Bearer " + tok}}
	state, answers := c.ToFinal(f.URL)
	if res := c.Send(f.URL, state, answers); !edgetest.IsRemoved(t, res, 0) {
		t.Fatalf("the elicited purge = %+v", res)
	}
	got := m.Backend.LastCaller("Purge")
	if got.Subject != "alice" || !slices.Contains(got.Grants, "toolmesh:admin") || !slices.Contains(got.Grants, "toolmesh:write") {
		t.Errorf("the elicited call reached the service as %+v, want alice with her grants", got)
	}

	dev := m.Edge(t, nil)
	created := wireTaskOf(t, edgetest.TaskRequest(t, dev.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 0}}, edgetest.TasksCaps))
	if created.ResultType != "task" {
		t.Fatalf("created = %+v, want a task", created)
	}
	if done := awaitTask(t, dev.URL, created.TaskID, "the task to end", terminal); done.Status != "completed" {
		t.Fatalf("the task = %+v", done)
	}
	if got := m.Backend.LastCaller("Wait"); !slices.Equal(got.Grants, []string{mesh.GrantAll}) {
		t.Errorf("the task's call reached the service as %+v, want the local owner's grants (%q)", got, mesh.GrantAll)
	}
}
