package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/console"
)

const runID = "run_0123456789abcdefghijklmnop"

// runsEdge is an edge with the workflows tools the runs pages call: one
// run of agent alice waiting on an approval, after a condition that went
// "then".
type runsEdge struct {
	mu       sync.Mutex
	listArgs []map[string]any
	cancels  int
	refuse   bool // cancel is refused as the edge refuses another agent's run
}

func (f *runsEdge) serve(t *testing.T) string {
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-edge", Version: "1"}, nil)
	schema := json.RawMessage(`{"type":"object"}`)
	nodes := []any{
		map[string]any{"node_id": "start", "status": "NODE_STATUS_COMPLETED"},
		map[string]any{"node_id": "check", "status": "NODE_STATUS_COMPLETED", "output": map[string]any{"result": true}},
		map[string]any{"node_id": "approve", "status": "NODE_STATUS_WAITING_APPROVAL", "ask_id": askID},
		map[string]any{"node_id": "skip", "status": "NODE_STATUS_SKIPPED"},
		map[string]any{"node_id": "done", "status": "NODE_STATUS_PENDING"},
	}
	r := map[string]any{"run_id": runID, "workflow_id": "wf_0123456789abcdefghijklmnop", "version": 2, "workflow_name": "weekly-report",
		"agent_id": "alice", "status": "RUN_STATUS_SUSPENDED", "nodes": nodes, "create_time": "2026-12-06T10:00:00Z",
		"temporal_workflow_id": "workflow-run/alice/" + runID}
	s.AddTool(&mcp.Tool{Name: "workflows_list_runs", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &a)
		f.mu.Lock()
		f.listArgs = append(f.listArgs, a)
		f.mu.Unlock()
		if a["agent_id"] == "Bad Agent" {
			return fail("invalid_argument", "agent_id: value does not match regex pattern"), nil
		}
		listed := map[string]any{}
		for k, v := range r {
			if k != "nodes" {
				listed[k] = v
			}
		}
		return ok(map[string]any{"runs": []any{listed}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "workflows_get_run", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &a)
		if a["run_id"] != runID {
			return fail("not_found", "run "+a["run_id"].(string)+" not found"), nil
		}
		return ok(map[string]any{"run": r}), nil
	})
	s.AddTool(&mcp.Tool{Name: "workflows_get", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"workflow": map[string]any{"definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "check"}},
			map[string]any{"id": "check", "condition": map[string]any{"expression": "true", "then": "approve", "else": "skip"}},
			map[string]any{"id": "approve", "title": "The owner approves", "approval": map[string]any{"question": "Publish?", "next": "done"}},
			map[string]any{"id": "skip", "end": map[string]any{}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "workflows_cancel_run", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.refuse {
			return fail("permission_denied", "run "+runID+" was started by another agent; only the agent that started a run may cancel it"), nil
		}
		f.cancels++
		return ok(map[string]any{"run": r}), nil
	})
	s.AddTool(&mcp.Tool{Name: "remoteagents_list_invocations", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &a)
		f.mu.Lock()
		f.listArgs = append(f.listArgs, a)
		f.mu.Unlock()
		res := ok(map[string]any{"invocations": []any{map[string]any{"invocation_id": "inv_0123456789abcdefghijklmnop", "agent_id": "alice",
			"url": "https://agents.example.com/travel/", "message": "Book a flight to Köln.", "status": "INVOCATION_STATUS_INPUT_REQUIRED",
			"answer": "Which day?", "remote_state": "input-required", "workflow_id": "invoke/alice/inv_0123456789abcdefghijklmnop",
			"create_time": "2026-12-06T10:00:00Z"}}})
		res.StructuredContent.(map[string]any)["pagination"] = map[string]any{"offset": 0, "limit": 20, "total": 21, "next_offset": 20}
		return res, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

func TestInvocationsPage(t *testing.T) {
	edge := &runsEdge{}
	lis := httptest.NewUnstartedServer(nil)
	c, err := console.New(console.Config{Addr: lis.Listener.Addr().String(), EdgeURL: edge.serve(t), TemporalUIURL: "http://127.0.0.1:8233",
		SessionKey: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	lis.Config.Handler = c.Handler()
	lis.Start()
	t.Cleanup(lis.Close)
	status, page, _ := get(t, browser(t), lis.URL+"/invocations?agent=alice&status=INVOCATION_STATUS_INPUT_REQUIRED")
	for _, want := range []string{`<tr id="inv_0123456789abcdefghijklmnop">`, "Book a flight to Köln.", "Answer: Which day?",
		`<span class="badge inv-input-required">input required</span>`, "21 invocations match.",
		`href="/invocations?offset=20&amp;agent=alice&amp;status=INVOCATION_STATUS_INPUT_REQUIRED"`,
		`href="http://127.0.0.1:8233/namespaces/default/workflows?query=WorkflowId%3D%22invoke%2Falice%2Finv_0123456789abcdefghijklmnop%22"`} {
		if status != http.StatusOK || !strings.Contains(page, want) {
			t.Fatalf("GET /invocations = %d lacks %s:\n%s", status, want, page)
		}
	}
	if a := edge.listArgs[0]; a["agent_id"] != "alice" || a["status"] != "INVOCATION_STATUS_INPUT_REQUIRED" {
		t.Errorf("remoteagents_list_invocations got %v, want the filters", a)
	}
}

func TestRunPages(t *testing.T) {
	edge := &runsEdge{}
	lis := httptest.NewUnstartedServer(nil)
	c, err := console.New(console.Config{Addr: lis.Listener.Addr().String(), EdgeURL: edge.serve(t), TemporalUIURL: "http://127.0.0.1:8233",
		SessionKey: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	lis.Config.Handler = c.Handler()
	lis.Start()
	t.Cleanup(lis.Close)
	base, b := lis.URL, browser(t)

	// The list, filtered by agent and status.
	status, page, _ := get(t, b, base+"/runs?agent=alice&status=RUN_STATUS_SUSPENDED")
	if status != http.StatusOK || !strings.Contains(page, `<a href="/runs/`+runID+`">`) || !strings.Contains(page, "suspended") {
		t.Errorf("GET /runs = %d:\n%s", status, page)
	}
	if a := edge.listArgs[0]; a["agent_id"] != "alice" || a["status"] != "RUN_STATUS_SUSPENDED" {
		t.Errorf("workflows_list_runs got %v, want the filters", a)
	}
	// A status that is none of the runs' filters nothing, and the page does
	// not say the runs match it.
	if status, page, _ = get(t, b, base+"/runs?status=BOGUS"); status != http.StatusOK || strings.Contains(page, "match") {
		t.Errorf("GET /runs?status=BOGUS = %d:\n%s", status, page)
	}
	if a := edge.listArgs[len(edge.listArgs)-1]; a["status"] != nil {
		t.Errorf("workflows_list_runs got %v for an unknown status, want no status", a)
	}
	if status, page, _ = get(t, b, base+"/runs?agent=Bad+Agent"); status != http.StatusBadRequest || !strings.Contains(page, "does not match") {
		t.Errorf("GET /runs with a bad agent = %d:\n%s", status, page)
	}

	// One run: its graph with each node's status in words and colour, the
	// branch labels, the approval's ask, the Temporal UI link.
	status, page, _ = get(t, b, base+"/runs/"+runID)
	for _, want := range []string{
		`<g class="node st-completed" id="node-check">`, `<g class="node st-waiting-approval" id="node-approve">`,
		`<g class="node st-skipped" id="node-skip">`, `class="node-status">waiting approval</text>`,
		`class="edge-label" text-anchor="middle">then</text>`, `class="edge-label" text-anchor="middle">else</text>`,
		`<a href="/inbox#` + askID + `">`, "5 nodes: 2 completed, 1 waiting approval, 1 skipped, 1 pending.", "&#34;result&#34;: true",
		`href="http://127.0.0.1:8233/namespaces/default/workflows?query=WorkflowId%3D%22workflow-run%2Falice%2F` + runID + `%22"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("GET /runs/%s = %d lacks %s:\n%s", runID, status, want, page)
			break
		}
	}
	if status, _, _ := get(t, b, base+"/runs/run_zzzzzzzzzzzzzzzzzzzzzzzzzz"); status != http.StatusNotFound {
		t.Errorf("an unknown run = %d, want 404", status)
	}

	// Cancel: a form without the CSRF token changes nothing; with it the
	// edge's cancel is called once; the edge's refusal is on the page.
	if status, _, _ := post(t, b, base+"/runs/"+runID+"/cancel", url.Values{}, base); status != http.StatusForbidden || edge.cancels != 0 {
		t.Errorf("cancel without CSRF = %d, %d cancels", status, edge.cancels)
	}
	status, _, h := post(t, b, base+"/runs/"+runID+"/cancel", url.Values{"csrf": {csrfOf(t, page)}}, base)
	if status != http.StatusSeeOther || h.Get("Location") != "/runs/"+runID+"?cancelled=1" || edge.cancels != 1 {
		t.Errorf("cancel = %d, Location %q, %d cancels", status, h.Get("Location"), edge.cancels)
	}
	edge.mu.Lock()
	edge.refuse = true
	edge.mu.Unlock()
	status, page, _ = post(t, b, base+"/runs/"+runID+"/cancel", url.Values{"csrf": {csrfOf(t, page)}}, base)
	if status != http.StatusForbidden || !strings.Contains(page, "only the agent that started a run may cancel it") {
		t.Errorf("a refused cancel = %d:\n%s", status, page)
	}
}
