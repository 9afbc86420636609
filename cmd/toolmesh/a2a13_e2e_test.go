package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/a2alink"
)

// push is one push the test's webhook received.
type push struct {
	sig, body string
}

// answerAsAgent answers an inbox message in its thread, on behalf of it,
// as the agent it was sent to.
func answerAsAgent(t *testing.T, s *mcp.ClientSession, m inboxMessage, text string) {
	t.Helper()
	okData(t, callToolMeta(t, s, "messages_send", map[string]any{"to_agent": m.FromAgent, "thread_id": m.ThreadID, "message": text},
		mcp.Meta{edge.MetaOnBehalfOf: m.ID}), &struct{}{})
}

// TestA2AJS13ClientAgainstTheMesh: the official A2A JS SDK 1.x, through
// Node, against the processes `toolmesh up` runs: it reads an agent's card
// and verifies its signature, sends over JSON-RPC and over HTTP+JSON, gets,
// lists and cancels, streams a task and resubscribes after cutting the
// stream (every later event, none twice), and registers a webhook that
// receives the task's events as signed pushes, verified here with the
// mesh's published keys.
func TestA2AJS13ClientAgainstTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh and Node")
	}
	js := a2aJSIn(t, "a2a-js13")
	var mu sync.Mutex
	var pushes []push
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-A2A-Notification-Token") != "tok-1" {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		pushes = append(pushes, push{r.Header.Get(a2alink.PushSignatureHeader), string(body)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	bin, temporal := meshBinaries(t)
	// The webhook is on loopback: the egress guard must let pushes reach it.
	m := startUp(t, bin, temporal, cli.RemoteEgressAllowEnv+"=127.0.0.1")
	base := m.Link(t, linkA2A) // the development agent, "local"
	s := mcpSessionTo(t, m.Link(t, linkMCP))

	card := js("card", base)
	if card["verified"] != true {
		t.Fatalf("the card's signature did not verify with the JS SDK: %v", card["reason"])
	}
	var ifaces []string
	for _, i := range get(card, "card", "supportedInterfaces").([]any) {
		im := i.(map[string]any)
		ifaces = append(ifaces, im["protocolBinding"].(string)+" "+im["protocolVersion"].(string))
	}
	if strings.Join(ifaces, ",") != "JSONRPC 1.0,HTTP+JSON 1.0,GRPC 1.0,JSONRPC 0.3" {
		t.Errorf("interfaces %v, want the three 1.0 bindings and 0.3 JSON-RPC", ifaces)
	}

	for _, binding := range []string{"JSONRPC", "HTTP+JSON"} {
		text := "Hello over " + binding + " from the A2A JS SDK 1.x."
		sent := js("send", base, binding, "js13-"+binding, text)
		id, _ := sent["id"].(string)
		if get(sent, "status", "state") != "TASK_STATE_WORKING" || id == "" {
			t.Fatalf("send over %s = %v, want a working task", binding, sent)
		}
		if msg := waitForMessage(t, s, text); msg.FromAgent != "a2a-local" || msg.Depth != 1 {
			t.Errorf("inbox message = %+v, want from a2a-local at depth 1", msg)
		}
		if got := js("get", base, binding, id); got["id"] != id || get(got, "status", "state") != "TASK_STATE_WORKING" {
			t.Errorf("get over %s = %v, want the working task", binding, got)
		}
		list := js("list", base, binding)
		if tasks, _ := list["tasks"].([]any); len(tasks) == 0 || get(tasks[0].(map[string]any), "id") != id {
			t.Errorf("list over %s = %v, want the new task first", binding, list)
		}
		if got := js("cancel", base, binding, id); get(got, "status", "state") != "TASK_STATE_CANCELED" {
			t.Errorf("cancel over %s = %v, want canceled", binding, got)
		}
		if got := js("get", base, binding, "tsk_unknown"); !strings.Contains(mustJSON(got["error"]), "TaskNotFound") {
			t.Errorf("get of an unknown task over %s = %v, want TaskNotFound", binding, got)
		}
	}

	// A stream cut after its first event, then the task answered, then a
	// resubscription from the last event seen: every later event, once.
	first := js("stream", base, "JSONRPC", "js13-stream", "Stream me, please.")
	taskID, _ := get(first, "task", "id").(string)
	last, _ := get(first, "task", "metadata", a2alink.EventsExtension, "last_event_id").(string)
	if first["case"] != "task" || taskID == "" || last != taskID+"/1" {
		t.Fatalf("the stream's first event = %v, want the task with last_event_id %s/1", first, taskID)
	}
	answerAsAgent(t, s, waitForMessage(t, s, "Stream me, please."), "Streamed answer.")
	res := js("resubscribe", base, "JSONRPC", taskID, last)
	var cases, ids []string
	for _, e := range res["events"].([]any) {
		ev := e.(map[string]any)
		cases = append(cases, ev["case"].(string))
		for _, k := range []string{"statusUpdate", "artifactUpdate"} {
			if id, ok := get(ev, k, "metadata", a2alink.EventsExtension, "id").(string); ok {
				ids = append(ids, id)
			}
		}
	}
	if strings.Join(cases, ",") != "task,artifactUpdate,statusUpdate" || strings.Join(ids, ",") != taskID+"/2,"+taskID+"/3" {
		t.Errorf("resubscribed: %v with ids %v, want the task, then events 2 and 3 once each (%v)", cases, ids, res)
	}

	// A webhook registered for a task gets its later events, signed.
	sent := js("send", base, "JSONRPC", "js13-push", "Push me, please.")
	pushTask, _ := sent["id"].(string)
	webhook := hook.URL + "/a2a/hook"
	cfg := js("push", base, "JSONRPC", pushTask, webhook, "tok-1")
	if get(cfg, "created", "id") != "hook-1" || get(cfg, "created", "url") != webhook {
		t.Fatalf("push config = %v, want hook-1 at the webhook", cfg)
	}
	answerAsAgent(t, s, waitForMessage(t, s, "Push me, please."), "Pushed answer.")
	pushed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(pushes) > 0 && strings.Contains(pushes[len(pushes)-1].body, "TASK_STATE_COMPLETED")
	}
	for deadline := time.Now().Add(2 * time.Minute); !pushed(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			var lines []string
			for _, l := range strings.Split(m.Stderr(), "\n") {
				if strings.Contains(l, "push") || strings.Contains(l, "inbound") || strings.Contains(l, "a2a-task") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("the completed task was not pushed within 2 minutes; the mesh said:\n%s", strings.Join(lines, "\n"))
		}
	}
	mu.Lock()
	got := append([]push(nil), pushes...)
	mu.Unlock()
	seen := map[string]bool{}
	for _, p := range got {
		v := js("verifypush", webhook, p.sig, p.body)
		jti, _ := v["jti"].(string)
		if v["verified"] != true || !strings.HasPrefix(jti, pushTask+"/") || seen[jti] {
			t.Errorf("push %s: verification %v, want verified, with an event id of %s seen once", p.body, v, pushTask)
		}
		seen[jti] = true
	}
	if len(got) != 2 {
		t.Errorf("%d pushes, want 2 (the answer and the completed status): %v", len(got), got)
	}
}
