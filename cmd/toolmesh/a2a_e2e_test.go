package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
)

// a2aJS installs the official A2A JS SDK (testdata/a2a-js: package.json and
// its lock; nodetest.Install) and returns a function that runs one step of
// its client.mjs and decodes what it prints.
func a2aJS(t *testing.T) func(args ...string) map[string]any {
	t.Helper()
	return a2aJSIn(t, "a2a-js")
}

// a2aJSIn is a2aJS for the client in testdata/<name>.
func a2aJSIn(t *testing.T, name string) func(args ...string) map[string]any {
	t.Helper()
	dir := nodetest.Install(t, filepath.Join("testdata", name))
	return func(args ...string) map[string]any {
		t.Helper()
		cmd := exec.Command("node", append([]string{filepath.Join(dir, "client.mjs")}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node client.mjs %q: %v\n%s", args, err, out)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("node client.mjs %q printed %s: %v", args, out, err)
		}
		return v
	}
}

// mcpSessionTo opens an MCP session to an edge at url.
func mcpSessionTo(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "a2a-e2e", Version: "1"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// inboxMessage is a message as messages_list shows it.
type inboxMessage struct {
	ID        string `json:"id"`
	ThreadID  string `json:"thread_id"`
	FromAgent string `json:"from_agent"`
	ToAgent   string `json:"to_agent"`
	Text      string `json:"text"`
	Depth     int    `json:"depth"`
}

// waitForMessage waits until the caller's inbox holds a message with text.
func waitForMessage(t *testing.T, s *mcp.ClientSession, text string) inboxMessage {
	t.Helper()
	var found inboxMessage
	eventually(t, time.Minute, "message "+text+" in the inbox", func() bool {
		var inbox struct{ Messages []inboxMessage }
		okData(t, callTool(t, s, "messages_list", map[string]any{"limit": 20}), &inbox)
		for _, m := range inbox.Messages {
			if m.Text == text {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[p]
	}
	return v
}

// TestA2AJSClientAgainstTheMesh: a third-party A2A client, the official JS
// SDK run through Node, against the processes `toolmesh up` runs: it reads
// an agent's card, sends it a message that shows up in the agent's inbox
// (messages_list), gets the task, sees the agent's answer complete another,
// and cancels one.
func TestA2AJSClientAgainstTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh and Node")
	}
	js := a2aJS(t)
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	base := m.Link(t, linkA2A) // the development agent, "local"
	s := mcpSessionTo(t, m.Link(t, linkMCP))

	card := js("card", base)
	if card["name"] != "local" || !strings.HasSuffix(card["url"].(string), "/a2a/agents/local") || card["protocolVersion"] != "0.3.0" ||
		get(card, "capabilities", "extensions") == nil || get(card, "skills") == nil {
		t.Fatalf("card = %v, want agent local's card with its A2A endpoint, skills and the depth extension", card)
	}

	sent := js("send", base, "js-message-1", "Hello from the A2A JS SDK.")
	taskID, _ := sent["id"].(string)
	if sent["kind"] != "task" || get(sent, "status", "state") != "working" || taskID == "" {
		t.Fatalf("message/send = %v, want a working task", sent)
	}
	// The message is in the agent's inbox, from the A2A sender, one
	// invocation deep.
	msg := waitForMessage(t, s, "Hello from the A2A JS SDK.")
	if msg.FromAgent != "a2a-local" || msg.ToAgent != "local" || msg.Depth != 1 {
		t.Errorf("inbox message = %+v, want from a2a-local at depth 1", msg)
	}
	if got := js("get", base, taskID); got["id"] != taskID || get(got, "status", "state") != "working" {
		t.Errorf("tasks/get = %v, want the working task", got)
	}
	if got := js("cancel", base, taskID); get(got, "status", "state") != "canceled" {
		t.Errorf("tasks/cancel = %v, want canceled", got)
	}
	if got := js("get", base, taskID); get(got, "status", "state") != "canceled" {
		t.Errorf("tasks/get after the cancel = %v, want canceled", got)
	}
	if got := js("get", base, "tsk_unknown"); got["error"] != "TaskNotFoundJSONRPCError" {
		t.Errorf("tasks/get of an unknown task = %v, want TaskNotFoundJSONRPCError", got)
	}

	// The agent answers another message in its thread (through MCP, on
	// behalf of it): the task completes with the answer, which cannot be
	// cancelled any more.
	second := js("send", base, "js-message-2", "What is 6 times 7?")
	asked := waitForMessage(t, s, "What is 6 times 7?")
	reply := callToolMeta(t, s, "messages_send", map[string]any{"to_agent": asked.FromAgent, "thread_id": asked.ThreadID, "message": "42"},
		mcp.Meta{edge.MetaOnBehalfOf: asked.ID})
	var replied struct{ Message inboxMessage }
	okData(t, reply, &replied)
	if replied.Message.Depth != 2 {
		t.Errorf("the answer, made on behalf of a depth-1 message, has depth %d, want 2", replied.Message.Depth)
	}
	done := js("get", base, second["id"].(string))
	if get(done, "status", "state") != "completed" || !strings.Contains(mustJSON(done["artifacts"]), `"42"`) {
		t.Errorf("tasks/get after the answer = %v, want completed with the answer", done)
	}
	if got := js("cancel", base, second["id"].(string)); got["error"] != "TaskNotCancelableJSONRPCError" {
		t.Errorf("tasks/cancel of a completed task = %v, want TaskNotCancelableJSONRPCError", got)
	}

	// Params that do not fit their method are -32602, logged once at the
	// a2a.jsonrpc boundary.
	before := strings.Count(m.Stderr(), `"boundary":"a2a.jsonrpc"`)
	resp, err := http.Post(strings.TrimSuffix(base, "/"), "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"messageId":7,"role":"user","parts":[]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var rpc struct {
		ID    int
		Error struct{ Code int }
	}
	_ = json.NewDecoder(resp.Body).Decode(&rpc)
	resp.Body.Close()
	if rpc.ID != 7 || rpc.Error.Code != -32602 {
		t.Errorf("message/send with a numeric messageId: %+v, want error -32602 for id 7", rpc)
	}
	eventually(t, 5*time.Second, "one a2a.jsonrpc rejection logged", func() bool {
		return strings.Count(m.Stderr(), `"boundary":"a2a.jsonrpc"`) == before+1
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// invocation is the part of an invocation the depth test reads.
type invocation struct {
	InvocationID string `json:"invocation_id"`
	Status       string `json:"status"`
	Answer       string `json:"answer"`
	Depth        int    `json:"depth"`
	// ProtocolVersion and ProtocolBinding are what the invocation spoke.
	ProtocolVersion string `json:"protocol_version"`
	ProtocolBinding string `json:"protocol_binding"`
}

// TestDepthLimitAcrossTwoMeshes builds a chain of invocations between two
// meshes (each its own `toolmesh up`): alice on the first invokes bob on
// the second over A2A, bob — on behalf of that message, through MCP —
// invokes alice, and so on. Each hop arrives one level deeper, as the
// sending mesh signed it; at depth 3 both invoking and messaging are
// refused with the messages domain's words.
func TestDepthLimitAcrossTwoMeshes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two whole meshes")
	}
	m1, m2, alice, bob := twoMeshes(t)
	aliceURL, bobURL := m1.Link(t, linkA2A), m2.Link(t, linkA2A)

	invoke := func(s *mcp.ClientSession, url, text string, onBehalfOf string) envelope {
		var meta mcp.Meta
		if onBehalfOf != "" {
			meta = mcp.Meta{edge.MetaOnBehalfOf: onBehalfOf}
		}
		return callToolMeta(t, s, "remoteagents_invoke", map[string]any{"url": url, "message": text, "wait_seconds": 0}, meta)
	}
	var first struct{ Invocation invocation }
	okData(t, invoke(alice, bobURL, "hop 1: from alice to bob", ""), &first)
	if first.Invocation.Depth != 1 {
		t.Errorf("hop 1 told the remote agent depth %d, want 1", first.Invocation.Depth)
	}
	hop1 := waitForMessage(t, bob, "hop 1: from alice to bob")

	var second struct{ Invocation invocation }
	okData(t, invoke(bob, aliceURL, "hop 2: from bob to alice", hop1.ID), &second)
	hop2 := waitForMessage(t, alice, "hop 2: from bob to alice")

	okData(t, invoke(alice, bobURL, "hop 3: from alice to bob", hop2.ID), &struct{}{})
	hop3 := waitForMessage(t, bob, "hop 3: from alice to bob")

	// In development mode an A2A caller is not authenticated: every sender
	// is the local caller, "a2a-local".
	for i, got := range []inboxMessage{hop1, hop2, hop3} {
		if got.Depth != i+1 || got.FromAgent != "a2a-local" {
			t.Errorf("hop %d arrived as %+v, want from a2a-local at depth %d", i+1, got, i+1)
		}
	}
	if second.Invocation.Depth != 2 {
		t.Errorf("hop 2 told the remote agent depth %d, want 2", second.Invocation.Depth)
	}

	// Bob, acting on the depth-3 message, may neither invoke nor message.
	const refusal = "Cannot send message: invocation depth 3 exceeds maximum of 3."
	if env := invoke(bob, aliceURL, "hop 4: one too many", hop3.ID); env.DomainCode != "conflict" || env.Message != refusal {
		t.Errorf("hop 4 (invoke at depth 3) = %+v, want conflict %q", env, refusal)
	}
	env := callToolMeta(t, bob, "messages_send", map[string]any{"to_agent": hop3.FromAgent, "thread_id": hop3.ThreadID, "message": "an answer"},
		mcp.Meta{edge.MetaOnBehalfOf: hop3.ID})
	if env.DomainCode != "conflict" || env.Message != refusal {
		t.Errorf("messages_send at depth 3 = %+v, want conflict %q", env, refusal)
	}

	// The first hop's answer travels back: bob answers it in its thread,
	// and alice's invocation completes with the answer.
	okData(t, callToolMeta(t, bob, "messages_send", map[string]any{"to_agent": hop1.FromAgent, "thread_id": hop1.ThreadID, "message": "bob's answer"},
		mcp.Meta{edge.MetaOnBehalfOf: hop1.ID}), &struct{}{})
	eventually(t, time.Minute, "alice's first invocation completed", func() bool {
		var got struct{ Invocation invocation }
		okData(t, callTool(t, alice, "remoteagents_get_invocation", map[string]any{"invocation_id": first.Invocation.InvocationID}), &got)
		if got.Invocation.Status == "INVOCATION_STATUS_COMPLETED" && (got.Invocation.ProtocolVersion != "1.0" || got.Invocation.ProtocolBinding != "JSONRPC") {
			t.Errorf("the meshes spoke A2A %s over %s, want 1.0 over JSONRPC", got.Invocation.ProtocolVersion, got.Invocation.ProtocolBinding)
		}
		return got.Invocation.Status == "INVOCATION_STATUS_COMPLETED" && got.Invocation.Answer == "bob's answer"
	})

	// A client that takes MCP tasks gets the invocation as a task, whose id
	// is its workflow's; tasks/cancel cancels it, and the remote task with it.
	mcp1 := m1.Link(t, linkMCP)
	created := rawTaskCall(t, mcp1, "tools/call", map[string]any{"name": "remoteagents_invoke",
		"arguments": map[string]any{"url": bobURL, "message": "a task for bob"}})
	taskID, _ := created["taskId"].(string)
	if created["resultType"] != "task" || created["status"] != "working" || !strings.HasPrefix(taskID, "invoke/alice/inv_") {
		t.Fatalf("remoteagents_invoke from a Tasks client = %v, want a working task invoke/alice/...", created)
	}
	waitForMessage(t, bob, "a task for bob")
	if got := rawTaskCall(t, mcp1, "tasks/get", map[string]any{"taskId": taskID}); got["status"] != "working" {
		t.Errorf("tasks/get = %v, want working", got)
	}
	rawTaskCall(t, mcp1, "tasks/cancel", map[string]any{"taskId": taskID})
	eventually(t, time.Minute, "the invocation task cancelled", func() bool {
		return rawTaskCall(t, mcp1, "tasks/get", map[string]any{"taskId": taskID})["status"] == "cancelled"
	})

	// Every hop carried a depth its sending mesh signed, and each was
	// verified: none was refused.
	for _, m := range []*upMesh{m1, m2} {
		if strings.Contains(m.Stderr(), `"boundary":"a2a.jsonrpc"`) {
			t.Errorf("a message was refused at the a2a.jsonrpc boundary:\n%s", tail(m.Stderr()))
		}
	}
}
