package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// appsHost is a host of MCP Apps views for a test: a page built on
// @modelcontextprotocol/ext-apps's AppBridge (testdata/appshost), served
// with a path per caller that reaches the edge with that caller's token
// (as a chat client holds its user's), and a browser tab showing it.
type appsHost struct {
	url   string
	tab   *browsertest.Tab
	views []*browsertest.Tab
}

// startAppsHost bundles the host page (npm packages only, installed from
// the registry), serves it, and opens it in a tab; endpoints maps a path
// of the host ("/mcp/owner") to the token its requests reach edge with.
func startAppsHost(t *testing.T, edge string, endpoints map[string]string) *appsHost {
	t.Helper()
	dir := nodetest.Install(t, filepath.Join("testdata", "appshost"))
	bundle := filepath.Join(t.TempDir(), "host.js")
	if out, err := exec.Command("node", filepath.Join(dir, "build.mjs"), bundle).CombinedOutput(); err != nil {
		t.Fatalf("bundle the host page: %v\n%s", err, out)
	}
	target, err := url.Parse(edge)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>MCP Apps host</title>
<style>body{font:14px system-ui,sans-serif;margin:16px;background:#f4f5f7}iframe{display:block;width:640px;border:1px solid #d5d7dc;border-radius:10px;background:#fff}</style>
</head><body><main><div id="views"></div></main><script src="/host.js"></script></body></html>`)
	})
	mux.HandleFunc("GET /host.js", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, bundle) })
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for path, token := range endpoints {
		proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.URL.Path = target.Path
			r.Out.Host = target.Host
			// The host page's origin is the host's, not the edge's: the
			// host, like a chat client's backend, speaks to the edge
			// itself, as its user.
			r.Out.Header.Del("Origin")
			r.Out.Header.Set("Authorization", "Bearer "+token)
		}}
		// The host page's answers stream (SSE): the proxy forwards each
		// request from memory, or a flushed answer can be cut.
		mux.Handle(path, servertest.BufferedBodies(proxy))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tab := browsertest.Start(t).Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(srv.URL), chromedp.WaitReady(chromedp.CSS("#views"))); err != nil {
		t.Fatal(err)
	}
	return &appsHost{url: srv.URL, tab: tab}
}

// openedView is what the host says of a view it opened.
type openedView struct {
	URI     string `json:"uri"`
	Size    int    `json:"size"`
	IsError bool   `json:"isError"`
}

// open calls tool with args through endpoint, as a chat client does when
// its model called it, and shows the view the tool names with its result.
func (h *appsHost) open(t *testing.T, endpoint, tool string, args map[string]any) openedView {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"endpoint": endpoint, "tool": tool, "args": args})
	v, err := browsertest.Run(h.tab, 60*time.Second, chromedp.Evaluate[openedView](
		`document.getElementById("views").replaceChildren(), window.viewCalls.length = 0, openView(`+string(b)+`)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("open the view of %s: %v", tool, err)
	}
	return v
}

// view is the frame of the view shown: a sandboxed frame, which Chromium
// runs in a process of its own.
func (h *appsHost) view(t *testing.T) *browsertest.Tab {
	t.Helper()
	v := h.tab.Frame(t, 30*time.Second, func(i *target.Info) bool { return i.URL == "about:srcdoc" })
	h.views = append(h.views, v)
	return v
}

// problems are what the host page and the views it showed reported.
func (h *appsHost) problems() []string {
	p := h.tab.Problems()
	for _, v := range h.views {
		p = append(p, v.Problems()...)
	}
	return p
}

// viewCall is a tools/call a view made through the host, as the host's
// bridge recorded it.
type viewCall struct {
	Name   string         `json:"name"`
	Args   map[string]any `json:"arguments"`
	Result *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error string `json:"error"`
}

func (h *appsHost) calls(t *testing.T) []viewCall {
	t.Helper()
	calls, err := browsertest.Run(h.tab, 10*time.Second, chromedp.Evaluate[[]viewCall](`window.viewCalls`))
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// appsShot is where an apps test's screenshot goes: docs/images with
// -update (docs/apps.md shows them), else the test's own directory.
func appsShot(t *testing.T, name string) string {
	if *updateDocs {
		return filepath.Join("..", "..", "docs", "images", name)
	}
	return filepath.Join(t.TempDir(), name)
}

// TestApps drives the mesh's MCP Apps views in a host built on the
// extension's AppBridge, in a real headless Chromium, against the
// processes `toolmesh up` starts and an edge with OAuth on in front of
// them: the owner answers an agent's ask and approves its schedule from
// the views; a view's call by a caller without the grant is refused as the
// same call from a client is.
func TestApps(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary, a Temporal dev server, npm and Chromium")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal, "TOOLMESH_SCHEDULES_MIN_INTERVAL=1s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh's log:\n%s", tail(m.Stderr()))
		}
	})
	// An edge with OAuth on: olivia is the owner, local the development
	// agent, each holding what a token and the grants file give it.
	// olivia must be a registered agent of the mesh to call it.
	dev := mcpSessionTo(t, m.Link(t, linkMCP))
	okData(t, callTool(t, dev, "agents_register", map[string]any{"agent_id": "olivia", "display_name": "Olivia (the owner)",
		"confirm": true, "reason": "the owner's own identity for the apps test"}), &map[string]any{})
	iss := newOAuthIssuer(t)
	grants := writeFile(t, t.TempDir(), "grants.yaml", `subjects:
  olivia:
    roles: [owner]
    scopes: [toolmesh:admin]
    tools: [owner_answer, schedules_approve, schedules_deny]
`)
	edgeAddr := porttest.Addr(t)
	args := []string{"edge", "--addr", edgeAddr, "--data", m.Data, "--metrics-addr", "off", "--issuer", iss.url, "--jwks-file", iss.jwks, "--grants-file", grants}
	for _, d := range []string{"owner", "schedules", "tasks", "agents", "workflows", "memory"} {
		args = append(args, "--service", d+"="+m.Link(t, d))
	}
	startBin(t, bin, "http://"+edgeAddr+"/healthz", args...)
	edgeURL := "http://" + edgeAddr + "/mcp"
	ownerToken := iss.token(t, edgeURL, "olivia", "toolmesh:read toolmesh:write toolmesh:admin", nil)
	agentToken := iss.token(t, edgeURL, "local", "toolmesh:read toolmesh:write", nil)
	owner, agent := mcpSessionAs(t, edgeURL, ownerToken), mcpSessionAs(t, edgeURL, agentToken)
	h := startAppsHost(t, edgeURL, map[string]string{"/mcp/owner": ownerToken, "/mcp/agent": agentToken})

	t.Run("the owner answers an ask from its card", func(t *testing.T) { testAskCard(t, h, owner, agent) })
	t.Run("a view's call without the grant is refused as a client's", func(t *testing.T) { testViewCallRefused(t, h, agent) })
	t.Run("the owner approves a schedule from its card", func(t *testing.T) { testScheduleCard(t, h, agent) })
	t.Run("the run view follows a run through its approval", func(t *testing.T) { testRunView(t, h, dev, owner) })
	if p := h.problems(); len(p) > 0 {
		t.Errorf("the host page or a view reported problems: %q", p)
	}
}

// pendingAskOf waits until the owner sees a pending ask with question and
// returns its id.
func pendingAskOf(t *testing.T, owner *mcp.ClientSession, question string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var list struct {
			Asks []struct {
				AskID    string `json:"ask_id"`
				Question string `json:"question"`
			} `json:"asks"`
		}
		okData(t, callTool(t, owner, "owner_list_asks", map[string]any{"status": "ASK_STATUS_PENDING"}), &list)
		for _, a := range list.Asks {
			if a.Question == question {
				return a.AskID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the owner never saw the ask %q", question)
	return ""
}

// testAskCard: an agent asks in one connection and waits; the owner's
// host opens the ask card from owner_get_ask; a click on an option answers
// through the host's tools/call; the agent's waiting call returns that
// answer, once.
func testAskCard(t *testing.T, h *appsHost, owner, agent *mcp.ClientSession) {
	const question = "Roll the 1.4 release out to every region tonight?"
	type result struct {
		d   askData
		err error
	}
	answered := make(chan result, 2)
	go func() {
		d, err := callAsk(t, agent, map[string]any{"question": question, "options": []string{"Roll out", "Wait for Monday"},
			"context": "Canary regions have been green for six hours; on-call is staffed until 02:00.", "wait_seconds": 60})
		answered <- result{d, err}
	}()
	askID := pendingAskOf(t, owner, question)

	v := h.open(t, "/mcp/owner", "owner_get_ask", map[string]any{"ask_id": askID})
	if v.URI != "ui://toolmesh/owner/ask-card" || v.IsError {
		t.Fatalf("the host opened %+v, want the ask card of a readable ask", v)
	}
	view := h.view(t)
	if err := view.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`button.option`))); err != nil {
		t.Fatalf("the ask card shows no option: %v", err)
	}
	shown, err := browsertest.Run(view, 10*time.Second, chromedp.Text(chromedp.CSS("h1")))
	if err != nil || shown != question {
		t.Errorf("the card shows %q (%v), want the question", shown, err)
	}
	if err := h.tab.Screenshot(appsShot(t, "apps-ask-card.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, view, "the ask card")
	if err := view.Do(30*time.Second, chromedp.Click(chromedp.CSS(`button.option`)), chromedp.WaitVisible(chromedp.CSS(`#outcome.ok`))); err != nil {
		t.Fatalf("answer from the ask card: %v", err)
	}

	var r result
	select {
	case r = <-answered:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent's owner_ask did not return within 60s of the answer")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.d.Ask.Status != "ASK_STATUS_ANSWERED" || r.d.Ask.Answer != "Roll out" || r.d.Ask.AnsweredBy != "olivia" {
		t.Fatalf("the agent got %+v, want Roll out answered by olivia", r.d.Ask)
	}
	select {
	case r := <-answered:
		t.Fatalf("the agent's call returned twice: %+v", r)
	default:
	}
	calls := h.calls(t)
	if len(calls) != 1 || calls[0].Name != "owner_answer" || calls[0].Result == nil || calls[0].Result.IsError {
		t.Errorf("the view's calls = %+v, want one owner_answer that succeeded", calls)
	}
	if err := h.tab.Screenshot(appsShot(t, "apps-ask-card-answered.png")); err != nil {
		t.Fatal(err)
	}
}

// testViewCallRefused: the agent that asked opens its own ask's card (it
// may read it) and clicks an option; owner_answer needs the owner's grant,
// so the view's call is refused with exactly the envelope the same call
// from an MCP client gets.
func testViewCallRefused(t *testing.T, h *appsHost, agent *mcp.ClientSession) {
	var d askData
	okData(t, callTool(t, agent, "owner_ask", map[string]any{"question": "May I rotate the staging keys?", "options": []string{"Yes", "No"}, "wait_seconds": 0}), &d)
	h.open(t, "/mcp/agent", "owner_get_ask", map[string]any{"ask_id": d.Ask.AskID})
	view := h.view(t)
	if err := view.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`button.option`)), chromedp.Click(chromedp.CSS(`button.option`)),
		chromedp.WaitVisible(chromedp.CSS(`#outcome.bad`))); err != nil {
		t.Fatalf("answer from the agent's ask card: %v", err)
	}
	calls := h.calls(t)
	if len(calls) != 1 || calls[0].Result == nil {
		t.Fatalf("the view's calls = %+v, want one owner_answer with a result", calls)
	}
	res, err := agent.CallTool(t.Context(), &mcp.CallToolParams{Name: "owner_answer", Arguments: calls[0].Args})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(res.StructuredContent)
	var got, wantEnv map[string]any
	_ = json.Unmarshal(calls[0].Result.StructuredContent, &got)
	_ = json.Unmarshal(want, &wantEnv)
	if !calls[0].Result.IsError || !res.IsError || got["domain_code"] != "permission_denied" {
		t.Errorf("the view's owner_answer = %s, want refused with permission_denied", calls[0].Result.StructuredContent)
	}
	if diff := cmp.Diff(wantEnv, got); diff != "" {
		t.Errorf("the view's refusal differs from a client's (-client +view):\n%s", diff)
	}
	if a := getAsk(t, agent, d.Ask.AskID); a.Ask.Status != "ASK_STATUS_PENDING" {
		t.Errorf("after the refused answer the ask is %s, want still pending", a.Ask.Status)
	}
	outcome, _ := browsertest.Run(view, 10*time.Second, chromedp.Text(chromedp.CSS("#outcome")))
	if !strings.Contains(outcome, "permission_denied") {
		t.Errorf("the card says %q, want the refusal", outcome)
	}
	callTool(t, agent, "owner_cancel_ask", map[string]any{"ask_id": d.Ask.AskID})
}

// testScheduleCard: the agent's schedule waits for approval; the owner's
// host opens its card from schedules_get, which shows the spec in words
// and the next runs as schedules_preview says them; Approve (with a
// reason) approves it, and it runs.
func testScheduleCard(t *testing.T, h *appsHost, agent *mcp.ClientSession) {
	var d scheduleData
	okData(t, callTool(t, agent, "schedules_create", map[string]any{
		"interval_seconds": 2, "description": "Open the release checklist task",
		"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "Release checklist"}},
	}), &d)
	id := d.Schedule.ID
	var preview struct {
		Summary string `json:"summary"`
	}
	okData(t, callTool(t, agent, "schedules_preview", map[string]any{"interval_seconds": 2}), &preview)

	h.open(t, "/mcp/owner", "schedules_get", map[string]any{"schedule_id": id})
	view := h.view(t)
	if err := view.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#approve`))); err != nil {
		t.Fatalf("the schedule card shows no Approve: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		spec, _ := browsertest.Run(view, 10*time.Second, chromedp.Text(chromedp.CSS("#spec")))
		if spec == preview.Summary {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the card says %q, want the preview's %q", spec, preview.Summary)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := h.tab.Screenshot(appsShot(t, "apps-schedule-card.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, view, "the schedule card")
	if err := view.Do(60*time.Second, chromedp.SendKeys(chromedp.CSS("#reason"), "the checklist is wanted"),
		chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS(`#outcome.ok`))); err != nil {
		t.Fatalf("approve from the schedule card: %v", err)
	}
	var got scheduleData
	okData(t, callTool(t, agent, "schedules_get", map[string]any{"schedule_id": id}), &got)
	if got.Schedule.Status != "SCHEDULE_STATUS_ACTIVE" || got.Schedule.Decision.DecidedBy != "olivia" || got.Schedule.Decision.Note != "the checklist is wanted" {
		t.Fatalf("after Approve the schedule is %+v", got.Schedule)
	}
	// It runs.
	deadline = time.Now().Add(60 * time.Second)
	for {
		var runs struct {
			Executions []json.RawMessage `json:"executions"`
		}
		okData(t, callTool(t, agent, "schedules_executions", map[string]any{"schedule_id": id}), &runs)
		if len(runs.Executions) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the approved schedule did not run within 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testRunView: a run of the documented example workflow waits on its
// approval node; the agent's host opens the run view from
// workflows_get_run, which shows the node waiting; once the owner
// approves, the view (refreshing itself through the host) shows every node
// completed, but the end of the branch not taken, skipped.
func testRunView(t *testing.T, h *appsHost, dev, owner *mcp.ClientSession) {
	id := createWorkflow(t, dev, exampleWorkflow(t))
	var started runData
	okData(t, callTool(t, dev, "workflows_run", map[string]any{"workflow_id": id, "input": map[string]any{"topic": "flaky deploys"}, "wait_seconds": 0}), &started)
	runID := started.Run.RunID
	waiting := awaitRun(t, dev, runID, "suspended for the approval", func(d runData) bool { return d.Run.Status == "RUN_STATUS_SUSPENDED" })
	_, _, askID := waiting.node("approve")

	h.open(t, "/mcp/agent", "workflows_get_run", map[string]any{"run_id": runID})
	view := h.view(t)
	if err := view.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`g.node[data-node="approve"][data-status="NODE_STATUS_WAITING_APPROVAL"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#run-status[data-status="RUN_STATUS_SUSPENDED"]`)), chromedp.WaitVisible(chromedp.CSS(`path.edge`))); err != nil {
		t.Fatalf("the run view does not show the run waiting on its approval: %v", err)
	}
	if err := h.tab.Screenshot(appsShot(t, "apps-run-view-waiting.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, view, "the run view")
	okData(t, callTool(t, owner, "owner_answer", map[string]any{"ask_id": askID, "answer": "approve"}), &map[string]any{})
	if err := view.Do(90*time.Second, chromedp.WaitVisible(chromedp.CSS(`#run-status[data-status="RUN_STATUS_COMPLETED"]`))); err != nil {
		t.Fatalf("the run view did not show the run completed: %v", err)
	}
	statuses, err := browsertest.Run(view, 10*time.Second, chromedp.Evaluate[map[string]string](
		`Object.fromEntries(Array.from(document.querySelectorAll("g.node")).map(g => [g.dataset.node, g.dataset.status]))`))
	if err != nil {
		t.Fatal(err)
	}
	done := getRun(t, dev, runID)
	if len(statuses) != len(done.Run.Nodes) {
		t.Errorf("the view shows %d nodes, the run has %d", len(statuses), len(done.Run.Nodes))
	}
	for _, n := range done.Run.Nodes {
		want := "NODE_STATUS_COMPLETED"
		if n.NodeID == "skipped" {
			want = "NODE_STATUS_SKIPPED"
		}
		if statuses[n.NodeID] != want || n.Status != want {
			t.Errorf("node %s: the view shows %s, the run says %s, want %s", n.NodeID, statuses[n.NodeID], n.Status, want)
		}
	}
	if err := h.tab.Screenshot(appsShot(t, "apps-run-view-completed.png")); err != nil {
		t.Fatal(err)
	}
}
