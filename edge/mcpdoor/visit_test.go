package mcpdoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// A service that needs the person behind a call to visit a page first
// (testing_link answers VisitRequired until the test marks the visit
// done) gets it asked, generically, as a URL input request in every era;
// the call completes once after the visit, and a client that cannot be sent
// to a page gets the link in a capability_gap (-32021 at 2026-07-28).

// visitor is a client's user facing URL elicitations: it records what it
// was asked and, when visit is set, visits (marks the visit done at the
// test backend) before it accepts; action is what it answers.
type visitor struct {
	backend *testingsvc.Service
	action  string
	// visitOn is the ask (1-based) on which the user visits; 0: never.
	visitOn int

	mu        sync.Mutex
	asked     []*mcp.ElicitParams
	completed []string
	done      chan string
}

func newVisitor(b *testingsvc.Service, action string, visitOn int) *visitor {
	return &visitor{backend: b, action: action, visitOn: visitOn, done: make(chan string, 4)}
}

func (v *visitor) elicit(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.asked = append(v.asked, req.Params)
	if req.Params.Mode == "url" && len(v.asked) == v.visitOn {
		v.backend.Visited("local")
	}
	return &mcp.ElicitResult{Action: v.action}, nil
}

func (v *visitor) complete(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
	v.mu.Lock()
	v.completed = append(v.completed, req.Params.ElicitationID)
	v.mu.Unlock()
	v.done <- req.Params.ElicitationID
}

func (v *visitor) requests() []*mcp.ElicitParams {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]*mcp.ElicitParams(nil), v.asked...)
}

// visitClient connects to f at version as a client that declares URL
// elicitation (url) or form elicitation only.
func visitClient(t *testing.T, f *edgetest.Fixture, version string, v *visitor, url bool) *mcp.ClientSession {
	t.Helper()
	caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}}
	if url {
		caps.Elicitation.URL = &mcp.URLElicitationCapabilities{}
	}
	return f.ConnectWith(t, version, &mcp.ClientOptions{Capabilities: caps, ElicitationHandler: v.elicit, ElicitationCompleteHandler: v.complete}, nil)
}

func callLink(cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: "testing_link", Arguments: map[string]any{"account": "octo"}})
}

// wantURLRequest checks that p is testing_link's URL elicitation, with an
// elicitationId (2025-11-25) or without one (2026-07-28).
func wantURLRequest(t *testing.T, p *mcp.ElicitParams, withID bool) {
	t.Helper()
	if p.Mode != "url" || p.URL != testingsvc.VisitURL("local") || p.Message != testingsvc.VisitMessage {
		t.Errorf("asked %+v, want a URL elicitation of %s", p, testingsvc.VisitURL("local"))
	}
	if withID && p.ElicitationID != "visit-local" || !withID && p.ElicitationID != "" {
		t.Errorf("elicitationId = %q, want %q", p.ElicitationID, map[bool]string{true: "visit-local"}[withID])
	}
}

func wantLinked(t *testing.T, res *mcp.CallToolResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
	if env.Status != "ok" || !edgetest.JsonEqual(string(env.Data), `{"links":1}`) {
		t.Fatalf("result = %s, want the one link", edgetest.Structured(t, res))
	}
}

func TestAVisitASessionClientAccepts(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	v := newVisitor(m.Backend, "accept", 1)
	res, err := callLink(visitClient(t, f, "2025-11-25", v, true))
	wantLinked(t, res, err)
	asked := v.requests()
	if len(asked) != 1 {
		t.Fatalf("the user was asked %d times, want once", len(asked))
	}
	wantURLRequest(t, asked[0], true)
	select {
	case id := <-v.done:
		if id != "visit-local" {
			t.Errorf("completion notice for %q, want visit-local", id)
		}
	case <-time.After(10 * time.Second):
		t.Error("no notifications/elicitation/complete")
	}
	if n := m.Backend.Executions("Link"); n != 1 {
		t.Errorf("the link was made %d times, want once", n)
	}
}

func TestAVisitNotDoneInTimeAnswersURLElicitationRequired(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, func(c *edge.Config) { c.Elicitation.VisitWait = time.Second })
	v := newVisitor(m.Backend, "accept", 0)
	cs := visitClient(t, f, "2025-11-25", v, true)
	_, err := callLink(cs)
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != mcp.CodeURLElicitationRequired {
		t.Fatalf("call = %v, want -32042", err)
	}
	var data struct {
		Elicitations []*mcp.ElicitParams `json:"elicitations"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil || len(data.Elicitations) != 1 {
		t.Fatalf("error data %s, want one elicitation", rpcErr.Data)
	}
	wantURLRequest(t, data.Elicitations[0], true)
	if n := len(v.requests()); n != 1 {
		t.Errorf("the user was asked %d times, want once: the call waits for the visit it accepted", n)
	}
	if n := m.Backend.Executions("Link"); n != 0 {
		t.Fatalf("the link was made %d times before the visit", n)
	}
	// The person visits, and the client calls again.
	m.Backend.Visited("local")
	res, err := callLink(cs)
	wantLinked(t, res, err)
	if n := m.Backend.Executions("Link"); n != 1 {
		t.Errorf("the link was made %d times, want once", n)
	}
}

func TestADeclinedVisitChangesNothing(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, version := range []string{edge.ModernProtocol, "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			v := newVisitor(m.Backend, "decline", 0)
			res, err := callLink(visitClient(t, f, version, v, true))
			if err != nil {
				t.Fatal(err)
			}
			env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
			if env.DomainCode != "declined" {
				t.Errorf("result = %s, want declined", edgetest.Structured(t, res))
			}
			if len(v.requests()) != 1 {
				t.Errorf("asked %d times, want once", len(v.requests()))
			}
		})
	}
	if n := m.Backend.Executions("Link"); n != 0 {
		t.Errorf("the link was made %d times, want none", n)
	}
}

// At 2026-07-28 the URL request is an input request; a retry whose visit is
// not done is asked the same visit again, and the one after the visit
// completes the call.
func TestAVisitAsAnInputRequest(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	v := newVisitor(m.Backend, "accept", 2)
	res, err := callLink(visitClient(t, f, edge.ModernProtocol, v, true))
	wantLinked(t, res, err)
	asked := v.requests()
	if len(asked) != 2 {
		t.Fatalf("the user was asked %d times, want twice (once more while the visit was not done)", len(asked))
	}
	for _, p := range asked {
		wantURLRequest(t, p, false)
	}
	if n := m.Backend.Executions("Link"); n != 1 {
		t.Errorf("the link was made %d times, want once", n)
	}
}

// A client that cannot be sent to a page gets the link in the refusal:
// a capability_gap naming client.elicitation.url in the 2025 eras, -32021
// at 2026-07-28.
func TestAFormOnlyClientGetsTheLink(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, version := range []string{edge.ModernProtocol, "2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			v := newVisitor(m.Backend, "accept", 1)
			res, err := callLink(visitClient(t, f, version, v, false))
			if version == edge.ModernProtocol {
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != -32021 || !strings.Contains(rpcErr.Message, testingsvc.VisitURL("local")) ||
					!strings.Contains(string(rpcErr.Data), `"url"`) {
					t.Errorf("call = %v, %v; want -32021 carrying the link and naming elicitation.url", res, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
				if env.DomainCode != "capability_gap" || env.Gap != "client.elicitation.url" || !strings.Contains(env.Message, testingsvc.VisitURL("local")) {
					t.Errorf("result = %s, want a capability_gap carrying the link", edgetest.Structured(t, res))
				}
			}
			if n := len(v.requests()); n != 0 {
				t.Errorf("a form-only client was asked %d times", n)
			}
		})
	}
	if n := m.Backend.Executions("Link"); n != 0 {
		t.Errorf("the link was made %d times, want none", n)
	}
}

// Inside an MCP task (2026-07-28, the tasks extension) the visit is the
// task's input request; tasks/update with accept makes the call again, and
// a visit still not done is asked again.
func TestAVisitInsideATask(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	caps := map[string]any{"elicitation": map[string]any{"url": map[string]any{}}, "extensions": edgetest.TasksCaps["extensions"]}
	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_link", "arguments": map[string]any{"account": "octo"}}, caps))
	waiting := func(key string) func(wireTask) bool {
		return func(w wireTask) bool { _, ok := w.InputRequests[key]; return ok || terminal(w) }
	}
	w := awaitTask(t, f.URL, created.TaskID, "the visit", waiting("r1.visit"))
	if r := w.InputRequests["r1.visit"]; w.Status != "input_required" || r.Method != "elicitation/create" || r.Params.Mode != "url" ||
		r.Params.URL != testingsvc.VisitURL("local") || r.Params.ElicitationID != "" {
		t.Fatalf("task = %+v, want a URL input request without elicitationId", w)
	}
	// Accepted, not visited: asked again.
	wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tasks/update", map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{"r1.visit": map[string]any{"action": "accept"}}}, caps))
	awaitTask(t, f.URL, created.TaskID, "the visit again", waiting("r2.visit"))
	if n := m.Backend.Executions("Link"); n != 0 {
		t.Fatalf("the link was made %d times before the visit", n)
	}
	m.Backend.Visited("local")
	wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tasks/update", map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{"r2.visit": map[string]any{"action": "accept"}}}, caps))
	done := awaitTask(t, f.URL, created.TaskID, "the link", terminal)
	if done.Status != "completed" || !strings.Contains(string(done.Result.StructuredContent), `"links":1`) {
		t.Errorf("done = %+v, want the one link", done)
	}
	if n := m.Backend.Executions("Link"); n != 1 {
		t.Errorf("the link was made %d times, want once", n)
	}
}

// The official TypeScript SDK (1.32.2) client at 2025-11-25: the call whose
// visit is accepted but not done answers -32042 (URLElicitationRequired,
// the SDK's UrlElicitationRequiredError), and the call made again once the
// person visited (the script GETs the visit page) completes once, with
// notifications/elicitation/complete for the visit.
func TestTypeScriptClientVisits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	dir := nodetest.Install(t, filepath.Join("testdata", "tsclient"))
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, func(c *edge.Config) { c.Elicitation.VisitWait = time.Second })
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { m.Backend.Visited("local") }))
	t.Cleanup(page.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "visit.mjs", f.URL, page.URL)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node visit.mjs: %v\n%s", err, stderr.String())
	}
	t.Logf("the TypeScript SDK saw: %s", out)
	var r struct {
		Negotiated string              `json:"negotiated"`
		Asked      []*mcp.ElicitParams `json:"asked"`
		Completed  []string            `json:"completed"`
		First      struct {
			Code         int                 `json:"code"`
			Elicitations []*mcp.ElicitParams `json:"elicitations"`
		} `json:"first"`
		Second struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"second"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report %q: %v\n%s", out, err, stderr.String())
	}
	if len(r.Errors) > 0 || r.Negotiated != "2025-11-25" {
		t.Errorf("errors %q, negotiated %q", r.Errors, r.Negotiated)
	}
	if len(r.Asked) != 2 {
		t.Fatalf("asked %d times, want twice (once per call)", len(r.Asked))
	}
	for _, p := range r.Asked {
		wantURLRequest(t, p, true)
	}
	if r.First.Code != mcp.CodeURLElicitationRequired || len(r.First.Elicitations) != 1 {
		t.Errorf("first call = %+v, want -32042 naming the visit", r.First)
	} else {
		wantURLRequest(t, r.First.Elicitations[0], true)
	}
	if r.Second.IsError || !strings.Contains(string(r.Second.StructuredContent), `"links":1`) {
		t.Errorf("second call = %+v, want the one link", r.Second)
	}
	if len(r.Completed) != 1 || r.Completed[0] != "visit-local" {
		t.Errorf("completion notices %q, want one for visit-local", r.Completed)
	}
	if n := m.Backend.Executions("Link"); n != 1 {
		t.Errorf("the link was made %d times, want once", n)
	}
}
