package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
)

// ownerMesh is the owner domain end to end against a real Temporal dev
// server: the owner service, the owner worker (as `toolmesh worker owner`
// registers it) and edges in front of them.
type ownerMesh struct {
	temporal *temporaltest.Server
	tc       client.Client
	svc      *servertest.Server
	owner    ownerv1connect.OwnerServiceClient // as the owner
	http     *http.Client
}

func startOwnerMesh(tb testing.TB) *ownerMesh {
	tb.Helper()
	ctx := context.Background()
	m := &ownerMesh{temporal: temporaltest.Start(tb)}
	tc, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: m.temporal.HostPort, Namespace: m.temporal.Namespace, Identity: "owner-e2e"},
		keptLog(tb, "temporal client"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tc.Close)
	m.tc = tc

	db, err := sqldb.Open(ctx, filepath.Join(tb.TempDir(), "owner.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	st, err := ownerstore.Open(ctx, db)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := owner.New(st, owner.Config{
		Engine: owner.NewTemporalEngine(tc),
		Egress: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		Log:    keptLog(tb, "owner service"),
	})
	if err != nil {
		tb.Fatal(err)
	}
	m.svc = servertest.Start(tb, svc.Registration())
	m.http = servertest.HTTPClient()
	tb.Cleanup(m.http.CloseIdleConnections)
	m.owner = ownerv1connect.NewOwnerServiceClient(m.svc.Client(), m.svc.URL, servertest.ClientOptions(nil)...)

	// The worker, registered as `toolmesh worker owner` does.
	w := worker.New(tc, "owner", worker.Options{})
	if err := registerOwner(w, workerDeps{
		Temporal:   tc,
		Mesh:       servertest.MeshSigner(),
		Services:   map[string]string{ownerv1connect.OwnerServiceName: m.svc.URL},
		HTTPClient: m.http,
		Log:        keptLog(tb, "owner worker"),
	}); err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	return m
}

// edgeConfig is an edge in development mode (the caller is the local
// owner, agent "local") in front of the owner service.
func (m *ownerMesh) edgeConfig(budget time.Duration) edge.Config {
	return edge.Config{
		Services:   map[string]string{ownerv1connect.OwnerServiceName: m.svc.URL},
		HTTPClient: m.http,
		Mesh:       servertest.MeshSigner(),
		WaitBudget: budget,
	}
}

// serveEdge serves an edge and returns its /mcp URL.
func serveEdge(tb testing.TB, cfg edge.Config) string {
	tb.Helper()
	e, err := edge.New(cfg, keptLog(tb, "edge"))
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	tb.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// mcpSession connects the go-sdk client to an edge, counting the progress
// notifications it hears.
func mcpSession(tb testing.TB, url string, progress *atomic.Int32) *mcp.ClientSession {
	tb.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "owner-e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
	})
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		tb.Fatalf("connect to the edge: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// askData is the data of owner_ask and owner_get_ask results.
type askData struct {
	Ask struct {
		AskID      string `json:"ask_id"`
		Status     string `json:"status"`
		Answer     string `json:"answer"`
		AnsweredBy string `json:"answered_by"`
		WorkflowID string `json:"workflow_id"`
	} `json:"ask"`
}

func callAsk(tb testing.TB, s *mcp.ClientSession, args map[string]any) (askData, error) {
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "owner_ask", Arguments: args, Meta: mcp.Meta{"progressToken": "ask"}})
	if err != nil {
		return askData{}, err
	}
	var env struct {
		Status  string          `json:"status"`
		Data    json.RawMessage `json:"data"`
		Message string          `json:"message"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "ok" {
		return askData{}, fmt.Errorf("owner_ask = %s (%v)", b, err)
	}
	var d askData
	return d, json.Unmarshal(env.Data, &d)
}

func getAsk(t *testing.T, s *mcp.ClientSession, id string) askData {
	t.Helper()
	var d askData
	okData(t, callTool(t, s, "owner_get_ask", map[string]any{"ask_id": id}), &d)
	return d
}

// waitIdle waits until the ask's workflow waits for its answer with
// nothing else to do: the owner has been notified and the history is
// still.
func (m *ownerMesh) waitIdle(tb testing.TB, workflowID string) int {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events := m.history(tb, workflowID)
		n := len(events)
		if n > 0 && slices.Contains(events, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) &&
			events[n-1] == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return n
		}
		if time.Now().After(deadline) {
			tb.Fatalf("workflow %s is not idle after 30s: %v", workflowID, events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (m *ownerMesh) history(tb testing.TB, workflowID string) []enumspb.EventType {
	tb.Helper()
	it := m.tc.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []enumspb.EventType
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil // not started yet
		}
		out = append(out, e.GetEventType())
	}
	return out
}

// pendingAsk makes an ask through the edge that returns before the answer.
func pendingAsk(t *testing.T, s *mcp.ClientSession, args map[string]any) askData {
	t.Helper()
	d, err := callAsk(t, s, args)
	if err != nil {
		t.Fatal(err)
	}
	if d.Ask.Status != "ASK_STATUS_PENDING" || d.Ask.WorkflowID != "ask/local/"+d.Ask.AskID {
		t.Fatalf("owner_ask = %+v, want a pending ask on workflow ask/local/<id>", d)
	}
	return d
}

// temporalCLI runs the pinned Temporal CLI against the test server, as the
// docs/owner.md tells an operator to.
func (m *ownerMesh) temporalCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	wd, _ := os.Getwd()
	bin, err := temporaltest.Binary(wd)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "--address", m.temporal.HostPort)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func asOwner() context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "alice", Agent: "local", Roles: []string{mesh.RoleOwner}}})
}

func TestOwnerAsksEndToEnd(t *testing.T) {
	m := startOwnerMesh(t)
	waiting := serveEdge(t, m.edgeConfig(25*time.Second))
	short := serveEdge(t, m.edgeConfig(time.Second))
	var progress atomic.Int32
	shortSession := mcpSession(t, short, &progress)

	t.Run("an answer through OwnerService reaches the waiting MCP call", func(t *testing.T) {
		var heard atomic.Int32
		s := mcpSession(t, waiting, &heard)
		type result struct {
			d    askData
			err  error
			when time.Time
		}
		done := make(chan result, 1)
		go func() {
			d, err := callAsk(t, s, map[string]any{"question": "Deploy v2 to production?", "options": []string{"deploy", "hold"}, "context": "all checks green"})
			done <- result{d, err, time.Now()}
		}()
		id := m.waitForAsk(t, "Deploy v2 to production?")
		m.waitIdle(t, "ask/local/"+id)
		answered := time.Now()
		res, err := m.owner.Answer(asOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "deploy"})
		if err != nil {
			t.Fatalf("Answer: %v", err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the MCP call did not return after the answer")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.d.Ask.AskID != id || r.d.Ask.Status != "ASK_STATUS_ANSWERED" || r.d.Ask.Answer != "deploy" || r.d.Ask.AnsweredBy != "alice" {
			t.Errorf("owner_ask returned %+v, want the answer deploy by alice", r.d)
		}
		if res.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED {
			t.Errorf("Answer returned %v", res.GetAsk())
		}
		t.Logf("answer → MCP call returned in %s", r.when.Sub(answered))
		if heard.Load() == 0 {
			t.Error("the waiting call sent no progress notification")
		}

		// The workflow shows who it is and where it is in the UI.
		desc, err := m.tc.DescribeWorkflow(context.Background(), "ask/local/"+id, "")
		if err != nil {
			t.Fatal(err)
		}
		sas := map[string]string{}
		for k, v := range desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields() {
			var s string
			_ = converter.GetDefaultDataConverter().FromPayload(v, &s)
			sas[k] = s
		}
		want := map[string]string{workflowcontract.SearchAttrAgent: "local", workflowcontract.SearchAttrTool: "owner_ask",
			workflowcontract.SearchAttrKind: "ask", workflowcontract.SearchAttrStatus: "answered"}
		for k, v := range want {
			if sas[k] != v {
				t.Errorf("search attribute %s = %q, want %q (all: %v)", k, sas[k], v, sas)
			}
		}
		var summary string
		_ = converter.GetDefaultDataConverter().FromPayload(desc.RawResponse.GetExecutionConfig().GetUserMetadata().GetSummary(), &summary)
		if summary != "Ask from local: Deploy v2 to production?" {
			t.Errorf("static summary = %q", summary)
		}
		var details string
		_ = converter.GetDefaultDataConverter().FromPayload(desc.RawResponse.GetExecutionConfig().GetUserMetadata().GetDetails(), &details)
		if !strings.Contains(details, "temporal workflow update execute --workflow-id 'ask/local/"+id+"' --name answer --input '{\"answer\": \"deploy\"}'") {
			t.Errorf("static details do not say how to answer:\n%s", details)
		}
	})

	t.Run("handlers describe themselves", func(t *testing.T) {
		d := pendingAsk(t, shortSession, map[string]any{"question": "Describe yourself?"})
		v, err := m.tc.QueryWorkflow(context.Background(), d.Ask.WorkflowID, "", "__temporal_workflow_metadata")
		if err != nil {
			t.Fatal(err)
		}
		var meta sdkpb.WorkflowMetadata
		if err := v.Get(&meta); err != nil {
			t.Fatal(err)
		}
		describes := func(name, word string, defs []*sdkpb.WorkflowInteractionDefinition) bool {
			for _, d := range defs {
				if d.GetName() == name && strings.Contains(d.GetDescription(), word) {
					return true
				}
			}
			return false
		}
		def := meta.GetDefinition()
		if !describes("answer", "one of them", def.GetUpdateDefinitions()) || !describes("answer", "ignored", def.GetSignalDefinitions()) ||
			!describes("status", "waiting", def.GetQueryDefinitions()) {
			t.Errorf("workflow metadata lacks described handlers: %v", def)
		}
		if out, err := m.temporalCLI(t, "workflow", "query", "--workflow-id", d.Ask.WorkflowID, "--name", "status"); err != nil ||
			!strings.Contains(out, `"status":"waiting"`) {
			t.Errorf("temporal workflow query --name status = %v:\n%s", err, out)
		}
		if _, err := m.owner.CancelAsk(servertest.As(context.Background(), "local"), &ownerv1.CancelAskRequest{AskId: d.Ask.AskID}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("unanswered returns pending; owner_get_ask shows the answer given with the CLI update", func(t *testing.T) {
		began := time.Now()
		d := pendingAsk(t, shortSession, map[string]any{"question": "Which colour?"})
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("pending owner_ask took %s with a 1s wait budget", took)
		}
		m.waitIdle(t, d.Ask.WorkflowID)
		// The command docs/owner.md gives.
		out, err := m.temporalCLI(t, "workflow", "update", "execute", "--workflow-id", d.Ask.WorkflowID, "--name", "answer", "--input", `{"answer":"blue"}`)
		if err != nil {
			t.Fatalf("temporal workflow update execute: %v\n%s", err, out)
		}
		got := getAsk(t, shortSession, d.Ask.AskID)
		if got.Ask.Status != "ASK_STATUS_ANSWERED" || got.Ask.Answer != "blue" || got.Ask.AnsweredBy != "temporal" {
			t.Errorf("owner_get_ask after the CLI update = %+v, want blue answered by temporal", got)
		}
	})

	t.Run("a wrong answer changes nothing, not even the history", func(t *testing.T) {
		d := pendingAsk(t, shortSession, map[string]any{"question": "Merge?", "options": []string{"merge", "wait"}})
		before := m.waitIdle(t, d.Ask.WorkflowID)
		_, err := m.owner.Answer(asOwner(), &ownerv1.AnswerRequest{AskId: d.Ask.AskID, Answer: "maybe"})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "one of the options") {
			t.Errorf("Answer with a wrong answer = %v, want invalid_argument naming the options", err)
		}
		env := callTool(t, shortSession, "owner_answer", map[string]any{"ask_id": d.Ask.AskID, "answer": "perhaps"})
		if env.Status != "error" || env.DomainCode != "invalid_argument" {
			t.Errorf("owner_answer with a wrong answer = %+v, want invalid_argument", env)
		}
		if out, err := m.temporalCLI(t, "workflow", "update", "execute", "--workflow-id", d.Ask.WorkflowID, "--name", "answer", "--input", `{"answer":"later"}`); err == nil {
			t.Errorf("the CLI update with a wrong answer succeeded:\n%s", out)
		}
		if after := m.history(t, d.Ask.WorkflowID); len(after) != before {
			t.Errorf("history grew from %d to %d events after refused answers: %v", before, len(after), after[before:])
		}
		if got := getAsk(t, shortSession, d.Ask.AskID); got.Ask.Status != "ASK_STATUS_PENDING" {
			t.Errorf("after wrong answers the ask is %+v, want pending", got)
		}
		env = callTool(t, shortSession, "owner_answer", map[string]any{"ask_id": d.Ask.AskID, "answer": "merge"})
		if env.Status != "ok" {
			t.Errorf("owner_answer with an option = %+v", env)
		}
	})

	t.Run("the owner answers with the CLI signal", func(t *testing.T) {
		d := pendingAsk(t, shortSession, map[string]any{"question": "Ship on Friday?", "options": []string{"yes", "no"}})
		m.waitIdle(t, d.Ask.WorkflowID)
		for _, answer := range []string{"nope", "no"} { // the first is not an option: ignored
			out, err := m.temporalCLI(t, "workflow", "signal", "--workflow-id", d.Ask.WorkflowID, "--name", "answer", "--input", fmt.Sprintf(`{"answer":%q}`, answer))
			if err != nil {
				t.Fatalf("temporal workflow signal: %v\n%s", err, out)
			}
		}
		var got askData
		deadline := time.Now().Add(20 * time.Second)
		for got = getAsk(t, shortSession, d.Ask.AskID); got.Ask.Status == "ASK_STATUS_PENDING" && time.Now().Before(deadline); got = getAsk(t, shortSession, d.Ask.AskID) {
			time.Sleep(20 * time.Millisecond)
		}
		if got.Ask.Status != "ASK_STATUS_ANSWERED" || got.Ask.Answer != "no" || got.Ask.AnsweredBy != "temporal" {
			t.Errorf("owner_get_ask after the signals = %+v, want no (the valid one) answered by temporal", got)
		}
	})

	t.Run("a Tasks client gets a task and tasks/get shows its completion", func(t *testing.T) {
		created := rawTaskCall(t, waiting, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "Approve the budget?"}})
		if created["resultType"] != "task" || created["status"] != "working" {
			t.Fatalf("tools/call from a Tasks client = %v, want a working task", created)
		}
		taskID, _ := created["taskId"].(string)
		_, askID, _ := strings.Cut(strings.TrimPrefix(taskID, "ask/"), "/")
		if _, err := m.tc.DescribeWorkflow(context.Background(), taskID, ""); err != nil {
			t.Errorf("the task id %q is not the workflow id: %v", taskID, err)
		}
		if got := rawTaskCall(t, waiting, "tasks/get", map[string]any{"taskId": taskID}); got["status"] != "working" {
			t.Errorf("tasks/get before the answer = %v", got)
		}
		m.waitIdle(t, taskID)
		if _, err := m.owner.Answer(asOwner(), &ownerv1.AnswerRequest{AskId: askID, Answer: "approved"}); err != nil {
			t.Fatal(err)
		}
		got := rawTaskCall(t, waiting, "tasks/get", map[string]any{"taskId": taskID})
		result, _ := got["result"].(map[string]any)
		sc, _ := json.Marshal(result["structuredContent"])
		if got["status"] != "completed" || !strings.Contains(string(sc), `"answer":"approved"`) {
			t.Errorf("tasks/get after the answer = %v, want completed with the answer", got)
		}

		// tasks/cancel ends a running ask as cancelled.
		second := rawTaskCall(t, waiting, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "Never mind?"}})
		id2, _ := second["taskId"].(string)
		rawTaskCall(t, waiting, "tasks/cancel", map[string]any{"taskId": id2})
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := rawTaskCall(t, waiting, "tasks/get", map[string]any{"taskId": id2})
			if got["status"] == "cancelled" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tasks/get after tasks/cancel = %v, want cancelled", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
		desc, err := m.tc.DescribeWorkflow(context.Background(), id2, "")
		var status enumspb.WorkflowExecutionStatus
		if err == nil {
			status = desc.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		}
		if status != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
			t.Errorf("the cancelled task's workflow = %v, %v; want canceled", status, err)
		}
	})
}

// waitForAsk waits until an ask with the question exists and returns its id.
func (m *ownerMesh) waitForAsk(tb testing.TB, question string) string {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := m.owner.ListAsks(asOwner(), &ownerv1.ListAsksRequest{Status: ownerv1.AskStatus_ASK_STATUS_PENDING})
		if err == nil {
			for _, a := range res.GetAsks() {
				if a.GetQuestion() == question {
					return a.GetAskId()
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("no ask %q after 20s", question)
	return ""
}

// rawTaskCall sends one 2026-07-28 request declaring the Tasks extension
// (the go-sdk client does not implement it) and returns its result.
func rawTaskCall(t *testing.T, url, method string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{edge.ExtensionTasks: map[string]any{}}},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	} else if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var last []byte
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			last = append([]byte(nil), data...)
		} else if bytes.HasPrefix(sc.Bytes(), []byte("{")) {
			last = append([]byte(nil), sc.Bytes()...)
		}
	}
	var r struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal(last, &r); err != nil || r.Error != nil {
		t.Fatalf("%s: %s (%v)", method, last, err)
	}
	return r.Result
}

// BenchmarkAskRoundTrip measures how soon an MCP owner_ask call waiting on
// the edge returns once the owner answers through OwnerService: from the
// Answer call to the tools/call result, against a real dev server. It
// reports the 50th and 99th percentiles.
//
//	go test ./cmd/toolmesh -run '^$' -bench AskRoundTrip -benchtime 200x
func BenchmarkAskRoundTrip(b *testing.B) {
	m := startOwnerMesh(b)
	var progress atomic.Int32
	s := mcpSession(b, serveEdge(b, m.edgeConfig(25*time.Second)), &progress)
	var samples, answerRPC []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		question := fmt.Sprintf("round trip %d?", i)
		done := make(chan time.Time, 1)
		errs := make(chan error, 1)
		go func() {
			d, err := callAsk(b, s, map[string]any{"question": question})
			if err == nil && d.Ask.Status != "ASK_STATUS_ANSWERED" {
				err = fmt.Errorf("owner_ask = %+v", d)
			}
			errs <- err
			done <- time.Now()
		}()
		id := m.waitForAsk(b, question)
		m.waitIdle(b, "ask/local/"+id)
		b.StartTimer()
		began := time.Now()
		if _, err := m.owner.Answer(asOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "ok"}); err != nil {
			b.Fatal(err)
		}
		answered := time.Now()
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		returned := <-done
		samples = append(samples, returned.Sub(began))
		answerRPC = append(answerRPC, answered.Sub(began))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(samples, 0.50), "p50-ms")
	b.ReportMetric(pct(samples, 0.99), "p99-ms")
	b.ReportMetric(pct(answerRPC, 0.50), "answer-rpc-p50-ms")
}
