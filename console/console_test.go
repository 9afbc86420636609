package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/console"
)

// fakeEdge is an MCP server with the owner tools the inbox calls, holding
// asks in memory (the real edge is in cmd/toolmesh's console tests).
type fakeEdge struct {
	mu      sync.Mutex
	asks    []map[string]any // newest first
	answers []string         // "ask_id=answer" per owner_answer call
}

func (f *fakeEdge) add(id, question string, options ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := map[string]any{"ask_id": id, "agent_id": "alice", "question": question, "status": "ASK_STATUS_PENDING",
		"create_time": time.Now().UTC().Format(time.RFC3339), "expire_time": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	if len(options) > 0 {
		a["options"] = options
	}
	f.asks = append([]map[string]any{a}, f.asks...)
}

func (f *fakeEdge) answered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.answers...)
}

func ok(data any) *mcp.CallToolResult {
	return &mcp.CallToolResult{StructuredContent: map[string]any{"status": "ok", "data": data}, Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}
}

func fail(code, msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"status": "error", "domain_code": code, "message": msg},
		Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func (f *fakeEdge) serve(t *testing.T) string {
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-edge", Version: "1"}, nil)
	args := func(req *mcp.CallToolRequest) map[string]any {
		var m map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &m)
		return m
	}
	schema := json.RawMessage(`{"type":"object"}`)
	s.AddTool(&mcp.Tool{Name: "owner_list_asks", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var pending []map[string]any
		for _, a := range f.asks {
			if a["status"] == "ASK_STATUS_PENDING" {
				pending = append(pending, a)
			}
		}
		a := args(req)
		off, lim := int(a["offset"].(float64)), int(a["limit"].(float64))
		page := pending[min(off, len(pending)):min(off+lim, len(pending))]
		res := ok(map[string]any{"asks": page})
		pg := map[string]any{"offset": off, "limit": lim, "total": len(pending)}
		if off+lim < len(pending) {
			pg["next_offset"] = off + lim
		}
		res.StructuredContent.(map[string]any)["pagination"] = pg
		return res, nil
	})
	find := func(id string) map[string]any {
		for _, a := range f.asks {
			if a["ask_id"] == id {
				return a
			}
		}
		return nil
	}
	s.AddTool(&mcp.Tool{Name: "owner_get_ask", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if a := find(args(req)["ask_id"].(string)); a != nil {
			return ok(map[string]any{"ask": a}), nil
		}
		return fail("not_found", "ask not found"), nil
	})
	s.AddTool(&mcp.Tool{Name: "owner_answer", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		in := args(req)
		id, answer := in["ask_id"].(string), in["answer"].(string)
		a := find(id)
		switch {
		case a == nil:
			return fail("not_found", "ask "+id+" not found"), nil
		case a["status"] != "ASK_STATUS_PENDING":
			return fail("conflict", "ask "+id+" is no longer pending"), nil
		case a["options"] != nil && !contains(a["options"].([]string), answer):
			return fail("invalid_argument", "the answer must be one of the ask's options"), nil
		}
		f.answers = append(f.answers, id+"="+answer)
		a["status"], a["answer"], a["answered_by"] = "ASK_STATUS_ANSWERED", answer, "local"
		return ok(map[string]any{"ask": a}), nil
	})
	s.AddTool(&mcp.Tool{Name: "schedules_list", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"schedules": []any{}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "agents_list", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"agents": []any{map[string]any{"id": "alice", "status": "AGENT_STATUS_ACTIVE"}},
			"summary": map[string]any{"active": 1, "total": 1}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "reputation_check", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"score": map[string]any{"agent_id": "alice", "score": 73, "components": map[string]any{"admin_calls": "4", "active_days": 2}}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "audit_list", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"records": []any{map[string]any{"seq": "2", "actor": "local", "tool": "credits_grant", "reason": "welcome", "outcome": "OUTCOME_SUCCEEDED"}}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "audit_verify", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"intact": false, "verified_records": "1", "first_bad": map[string]any{"seq": "2", "problem": "PROBLEM_TRUNCATED"}}), nil
	})
	s.AddTool(&mcp.Tool{Name: "audit_list_checkpoints", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := ok(map[string]any{"checkpoints": []any{map[string]any{"seq": "2", "hash": strings.Repeat("ab", 32), "time": "2026-12-06T10:00:00Z",
			"source": "audit-checkpoints.log:7", "note": "toolmesh-audit/key1\n2\n" + strings.Repeat("ab", 32) + "\n"}},
			"rejected": []any{map[string]any{"source": "audit-checkpoints.log:12", "problem": "CHECKPOINT_PROBLEM_BAD_SIGNATURE", "detail": "the signature does not verify"}}})
		res.StructuredContent.(map[string]any)["pagination"] = map[string]any{"offset": 0, "limit": 10, "total": 14, "next_offset": 10}
		return res, nil
	})
	s.AddTool(&mcp.Tool{Name: "connections_list", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"connections": []any{}}), nil
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	// The owner's form to link a token, answered as the connections service
	// answers when it cannot ask GitHub whose the token is.
	mux.HandleFunc("POST /owner/toolmesh.connections.v1.ConnectionsService/LinkToken", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"code":"unavailable","message":"GitHub could not be asked whose the token is (dial tcp: no such host): nothing was linked; try again"}`))
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// startConsole serves a console in front of edgeURL on a loopback port.
func startConsole(t *testing.T, edgeURL string) string {
	t.Helper()
	lis := httptest.NewUnstartedServer(nil)
	c, err := console.New(console.Config{Addr: lis.Listener.Addr().String(), EdgeURL: edgeURL,
		SessionKey: []byte(strings.Repeat("k", 32)), PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	lis.Config.Handler = c.Handler()
	lis.Start()
	t.Cleanup(lis.Close)
	return lis.URL
}

// browser is an HTTP client with cookies that follows no redirect.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func post(t *testing.T, c *http.Client, u string, form url.Values, origin string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

const askID = "ask_0123456789abcdefghijklmnop"

func TestAnswerWithAPlainForm(t *testing.T) {
	edge := &fakeEdge{}
	edge.add(askID, "Ship the release?", "Ship it", "Hold")
	base := startConsole(t, edge.serve(t))
	b := browser(t)

	status, page, h := get(t, b, base+"/inbox")
	if status != http.StatusOK || !strings.Contains(page, "Ship the release?") || !strings.Contains(page, `value="Hold"`) {
		t.Fatalf("GET /inbox = %d:\n%s", status, page)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	ck := b.Jar.Cookies(mustURL(base))
	if len(ck) != 1 {
		t.Fatalf("cookies %v, want the session", ck)
	}
	token := csrfOf(t, page)
	status, _, h = post(t, b, base+"/asks/"+askID+"/answer", url.Values{"csrf": {token}, "answer": {"Hold"}}, base)
	if status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/inbox?answered="+askID) {
		t.Fatalf("POST answer = %d, Location %q", status, h.Get("Location"))
	}
	if got := edge.answered(); len(got) != 1 || got[0] != askID+"=Hold" {
		t.Fatalf("the edge got answers %q, want one: Hold", got)
	}
	_, page, _ = get(t, b, base+h.Get("Location"))
	if !strings.Contains(page, `class="flash"`) || !strings.Contains(page, "No pending asks") {
		t.Errorf("after the answer the inbox says:\n%s", page)
	}

	// Answering again is the pipeline's conflict, shown on the page.
	status, page, _ = post(t, b, base+"/asks/"+askID+"/answer", url.Values{"csrf": {token}, "answer": {"Ship it"}}, "")
	if status != http.StatusConflict || !strings.Contains(page, "no longer pending") {
		t.Errorf("a second answer = %d:\n%s", status, page)
	}
	if got := edge.answered(); len(got) != 1 {
		t.Errorf("the edge got answers %q, want one", got)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestChangesFromElsewhereAreRefused: a form without the session's CSRF
// token, with another session's, from a page of another origin, or sent
// to a foreign Host changes nothing.
func TestChangesFromElsewhereAreRefused(t *testing.T) {
	edge := &fakeEdge{}
	edge.add(askID, "Ship the release?", "Ship it", "Hold")
	base := startConsole(t, edge.serve(t))
	b, other := browser(t), browser(t)
	_, page, _ := get(t, b, base+"/inbox")
	token := csrfOf(t, page)
	_, otherPage, _ := get(t, other, base+"/inbox")
	answer := "/asks/" + askID + "/answer"

	for _, tc := range []struct {
		name   string
		client *http.Client
		form   url.Values
		origin string
		host   string
	}{
		{"no token", b, url.Values{"answer": {"Hold"}}, "", ""},
		{"another session's token", b, url.Values{"answer": {"Hold"}, "csrf": {csrfOf(t, otherPage)}}, "", ""},
		{"a foreign origin", b, url.Values{"answer": {"Hold"}, "csrf": {token}}, "http://evil.example", ""},
		{"another port of this machine", b, url.Values{"answer": {"Hold"}, "csrf": {token}}, "http://127.0.0.1:1", ""},
		{"a rebound host", b, url.Values{"answer": {"Hold"}, "csrf": {token}}, "", "evil.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+answer, strings.NewReader(tc.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			res, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("status %d, want 403:\n%s", res.StatusCode, body)
			}
		})
	}
	if got := edge.answered(); len(got) != 0 {
		t.Errorf("the edge got answers %q, want none", got)
	}
	if _, page, _ := get(t, b, base+"/inbox"); !strings.Contains(page, "Ship the release?") {
		t.Error("the ask is gone from the inbox")
	}
}

// TestAnEndedSessionKeepsTheForm: a form sent after the session ended is
// not sent on; the person is signed in again and sees what they typed.
func TestAnEndedSessionKeepsTheForm(t *testing.T) {
	edge := &fakeEdge{}
	edge.add(askID, "What should the release be called?")
	base := startConsole(t, edge.serve(t))
	b := browser(t)
	status, page, h := post(t, b, base+"/asks/"+askID+"/answer", url.Values{"csrf": {"stale"}, "answer": {"Bluebird & co"}}, base)
	if status != http.StatusUnauthorized || !strings.Contains(page, "Your session had ended") || !strings.Contains(page, "Bluebird &amp; co</textarea>") {
		t.Fatalf("POST with no session = %d:\n%s", status, page)
	}
	if h.Get("Set-Cookie") == "" {
		t.Error("no new session")
	}
	if got := edge.answered(); len(got) != 0 {
		t.Errorf("the edge got answers %q, want none", got)
	}
	// The form it shows works.
	status, _, _ = post(t, b, base+"/asks/"+askID+"/answer", url.Values{"csrf": {csrfOf(t, page)}, "answer": {"Bluebird & co"}}, "")
	if status != http.StatusSeeOther || len(edge.answered()) != 1 {
		t.Errorf("sending again = %d, answers %q", status, edge.answered())
	}
}

// The edge going down after the console connected to it: an answer sent
// meanwhile is not sent, and the page says so with 503 (retry later), not
// as a refusal of the answer.
func TestAnAnswerWhileTheEdgeIsDownIsNotSent(t *testing.T) {
	edge := &fakeEdge{}
	edge.add(askID, "Ship the release?", "Ship it", "Hold")
	target, _ := url.Parse(edge.serve(t))
	front := httptest.NewServer(&httpProxy{target: target})
	t.Cleanup(front.Close)
	base := startConsole(t, front.URL+"/mcp")
	b := browser(t)
	status, page, _ := get(t, b, base+"/inbox")
	if status != http.StatusOK || !strings.Contains(page, "Ship the release?") {
		t.Fatalf("GET /inbox = %d:\n%s", status, page)
	}
	front.CloseClientConnections()
	front.Close()
	status, page, _ = post(t, b, base+"/asks/"+askID+"/answer", url.Values{"csrf": {csrfOf(t, page)}, "answer": {"Hold"}}, base)
	if status != http.StatusServiceUnavailable || !strings.Contains(page, "does not answer") {
		t.Errorf("an answer with the edge gone = %d, want 503 and the answer not sent:\n%s", status, page)
	}
	if got := edge.answered(); len(got) != 0 {
		t.Errorf("the edge got answers %q, want none", got)
	}
}

func TestTheEdgeDownSaysWhatStillWorks(t *testing.T) {
	dead := httptest.NewServer(nil)
	dead.Close()
	base := startConsole(t, dead.URL+"/mcp")
	status, page, _ := get(t, browser(t), base+"/inbox")
	if status != http.StatusServiceUnavailable || !strings.Contains(page, "does not answer") || !strings.Contains(page, "Asks already made keep waiting") {
		t.Errorf("GET /inbox with the edge down = %d:\n%s", status, page)
	}
	// A page that could not read its list says so, and not also that the
	// list is empty.
	for path, empty := range map[string]string{
		"/inbox": "nobody is waiting on you", "/runs": "No runs", "/invocations": "No invocations",
		"/connections": "No connection yet", "/credits": "No wallet yet",
		"/audit": "No records yet", "/agents": "0 registered",
	} {
		_, page, _ := get(t, browser(t), base+path)
		if !strings.Contains(page, "does not answer") || strings.Contains(page, empty) {
			t.Errorf("GET %s with the edge down says %q, or not that the edge does not answer:\n%s", path, empty, page)
		}
	}
}

// TestTheInboxHearsOfNewAsks: the events stream says when the pending
// asks changed.
func TestTheInboxHearsOfNewAsks(t *testing.T) {
	edge := &fakeEdge{}
	base := startConsole(t, edge.serve(t))
	b := browser(t)
	get(t, b, base+"/inbox")
	res, err := b.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := make(chan string, 10)
	go func() {
		s := bufio.NewScanner(res.Body)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "data: "); ok {
				events <- v
			}
		}
		close(events)
	}()
	next := func() string {
		select {
		case v, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
		return ""
	}
	// The first poll (an empty inbox) and then the ask.
	first := next()
	if first == "0" {
		first = next()
	}
	edge.add(askID, "Ship it?")
	if v := next(); v == first {
		t.Errorf("version %s again after a new ask", v)
	}
	_, page, _ := get(t, b, base+"/inbox/list")
	if !strings.Contains(page, "Ship it?") || strings.Contains(page, "<html") {
		t.Errorf("the list fragment:\n%s", page)
	}
}

func TestOperatorPages(t *testing.T) {
	edge := &fakeEdge{}
	base := startConsole(t, edge.serve(t))
	b := browser(t)
	if status, page, _ := get(t, b, base+"/agents"); status != http.StatusOK || !strings.Contains(page, `<td class="score">73</td>`) || !strings.Contains(page, "1 registered: 1 active") ||
		!strings.Contains(page, `<td class="status">active</td>`) {
		t.Errorf("GET /agents = %d:\n%s", status, page)
	}
	if status, page, _ := get(t, b, base+"/audit?tool=credits_grant"); status != http.StatusOK || !strings.Contains(page, "The trail is broken") ||
		!strings.Contains(page, "First problem: truncated at record 2") || !strings.Contains(page, "welcome") ||
		!strings.Contains(page, "1 record matches.") || !strings.Contains(page, "<td>succeeded</td>") ||
		!strings.Contains(page, "14 signed checkpoints (the newest 1 shown).") || !strings.Contains(page, "toolmesh-audit/key1\n2\n") ||
		!strings.Contains(page, "audit-checkpoints.log:12: bad signature — the signature does not verify") {
		t.Errorf("GET /audit = %d:\n%s", status, page)
	}
}

func TestMeshPage(t *testing.T) {
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"processes":[{"name":"edge","group":"edge","state":"ready","since":"2026-01-02T03:04:05Z","restarts":2,"recent_failures":1,"last_failure":"exit status 2"}]}`))
	}))
	defer status.Close()
	edge := &fakeEdge{}
	lis := httptest.NewUnstartedServer(nil)
	c, err := console.New(console.Config{Addr: lis.Listener.Addr().String(), EdgeURL: edge.serve(t), MeshStatusURL: status.URL + "/status.json",
		SessionKey: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	lis.Config.Handler = c.Handler()
	lis.Start()
	defer lis.Close()
	if code, page, _ := get(t, browser(t), lis.URL+"/mesh"); code != http.StatusOK || !strings.Contains(page, `<tr id="proc-edge">`) || !strings.Contains(page, "exit status 2") {
		t.Errorf("GET /mesh = %d:\n%s", code, page)
	}
	status.Close()
	if code, page, _ := get(t, browser(t), lis.URL+"/mesh"); code != http.StatusOK || !strings.Contains(page, "does not answer") {
		t.Errorf("GET /mesh with up gone = %d:\n%s", code, page)
	}
}

// TestALinkRefusedSaysWhy: a link the connections service refuses shows
// its reason (here: GitHub could not be asked), and one the edge cannot
// forward says the edge or the service does not answer.
func TestALinkRefusedSaysWhy(t *testing.T) {
	dead := httptest.NewServer(nil)
	dead.Close()
	for name, c := range map[string]struct{ edge, want string }{
		"the service answered": {(&fakeEdge{}).serve(t), "Nothing was linked: GitHub could not be asked whose the token is"},
		"nothing answered":     {dead.URL + "/mcp", "Nothing was linked: the edge or the connections service does not answer"},
	} {
		base := startConsole(t, c.edge)
		b := browser(t)
		_, page, _ := get(t, b, base+"/connections")
		form := url.Values{"csrf": {csrfOf(t, page)}, "agent": {"alice"}, "provider": {"PROVIDER_GITHUB"}, "token": {"ghp_x"}}
		status, page, _ := post(t, b, base+"/connections/link", form, base)
		if status != http.StatusServiceUnavailable || !strings.Contains(page, c.want) {
			t.Errorf("%s: link = %d, want 503 saying %q:\n%s", name, status, c.want, page)
		}
	}
}
