package mcpdoor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// fakeAsks is an OwnerService whose asks end when the test says so. Ask
// waits as the real one does: up to wait_seconds for the ask to end.
type fakeAsks struct {
	ownerv1connect.UnimplementedOwnerServiceHandler
	mu       sync.Mutex
	asks     map[string]*ownerv1.Ask
	ended    map[string]chan struct{}
	waits    []int32         // wait_seconds of each Ask, -1 when absent
	deadline []time.Duration // time left before each Ask's deadline
	n        int
	// created receives the number of each ask once it exists.
	created chan int
}

func newFakeAsks() *fakeAsks {
	return &fakeAsks{asks: map[string]*ownerv1.Ask{}, ended: map[string]chan struct{}{}, created: make(chan int, 16)}
}

func (f *fakeAsks) Ask(ctx context.Context, req *ownerv1.AskRequest) (*ownerv1.AskResponse, error) {
	agent := mesh.FromContext(ctx).Caller.Agent
	f.mu.Lock()
	f.n++
	id := fmt.Sprintf("ask_%026d", f.n)
	a := &ownerv1.Ask{AskId: id, AgentId: agent, Question: req.GetQuestion(), Status: ownerv1.AskStatus_ASK_STATUS_PENDING,
		CreateTime: timestamppb.Now(), ExpireTime: timestamppb.New(time.Now().Add(time.Hour)), WorkflowId: "ask/" + agent + "/" + id}
	f.asks[id] = a
	done := make(chan struct{})
	f.ended[id] = done
	w := int32(-1)
	if req.WaitSeconds != nil {
		w = req.GetWaitSeconds()
	}
	f.waits = append(f.waits, w)
	d, _ := ctx.Deadline()
	f.deadline = append(f.deadline, time.Until(d))
	n := f.n
	f.mu.Unlock()
	select {
	case f.created <- n:
	default:
	}
	if w > 0 {
		select {
		case <-done:
		case <-time.After(time.Duration(w) * time.Second):
		case <-ctx.Done():
		}
	}
	return &ownerv1.AskResponse{Ask: f.get(id)}, nil
}

func (f *fakeAsks) get(id string) *ownerv1.Ask {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asks[id]
}

// end ends the ask n (1-based) with status and answer.
func (f *fakeAsks) end(n int, st ownerv1.AskStatus, answer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("ask_%026d", n)
	a := f.asks[id]
	if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
		return
	}
	a.Status, a.Answer, a.ResolveTime = st, answer, timestamppb.Now()
	close(f.ended[id])
}

func (f *fakeAsks) GetAsk(ctx context.Context, req *ownerv1.GetAskRequest) (*ownerv1.GetAskResponse, error) {
	a := f.get(req.GetAskId())
	if a == nil || a.GetAgentId() != mesh.FromContext(ctx).Caller.Agent {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("ask %s not found", req.GetAskId()))
	}
	return &ownerv1.GetAskResponse{Ask: a}, nil
}

func (f *fakeAsks) CancelAsk(ctx context.Context, req *ownerv1.CancelAskRequest) (*ownerv1.CancelAskResponse, error) {
	if _, err := f.GetAsk(ctx, &ownerv1.GetAskRequest{AskId: req.GetAskId()}); err != nil {
		return nil, err
	}
	var n int
	fmt.Sscanf(strings.TrimPrefix(req.GetAskId(), "ask_"), "%d", &n)
	f.end(n, ownerv1.AskStatus_ASK_STATUS_CANCELLED, "")
	return &ownerv1.CancelAskResponse{Ask: f.get(req.GetAskId())}, nil
}

func (f *fakeAsks) waitsSeen() ([]int32, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int32(nil), f.waits...), append([]time.Duration(nil), f.deadline...)
}

// askEdge serves an edge in front of a fake OwnerService.
func askEdge(t *testing.T, configure func(*edge.Config)) (*fakeAsks, string) {
	t.Helper()
	f := newFakeAsks()
	svc := servertest.Start(t, server.Register(ownerv1connect.OwnerServiceName, ownerv1connect.OwnerServiceHandler(f), ownerv1connect.NewOwnerServiceHandler, nil))
	cfg := edge.Config{
		Contracts:   []protoreflect.ServiceDescriptor{ownerv1.File_toolmesh_owner_v1_owner_proto.Services().ByName("OwnerService")},
		Services:    map[string]string{ownerv1connect.OwnerServiceName: svc.URL},
		HTTPClient:  svc.Client(),
		Mesh:        servertest.MeshSigner(),
		CallTimeout: 5 * time.Second,
		WaitBudget:  2 * time.Second,
	}
	if configure != nil {
		configure(&cfg)
	}
	e, err := edge.New(cfg, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	return f, hs.URL + "/mcp"
}

// modernCall sends one 2026-07-28 request and returns its response; with
// tasks the request declares the Tasks extension.
func modernCall(t *testing.T, url, method string, params map[string]any, tasks bool) edgetest.RpcReply {
	t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{edge.ExtensionTasks: map[string]any{}}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	if name, ok := params["name"].(string); ok {
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
		line := sc.Bytes()
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			last = append([]byte(nil), data...)
		} else if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
			last = append([]byte(nil), line...)
		}
	}
	var r edgetest.RpcReply
	if err := json.Unmarshal(last, &r); err != nil {
		t.Fatalf("%s: response %q (%s): %v", method, last, resp.Status, err)
	}
	return r
}

// task is the task shape of tasks/get and CreateTaskResult.
type task struct {
	ResultType     string              `json:"resultType"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage"`
	CreatedAt      time.Time           `json:"createdAt"`
	LastUpdatedAt  time.Time           `json:"lastUpdatedAt"`
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	Result         *mcp.CallToolResult `json:"result"`
}

func decodeTask(t *testing.T, r edgetest.RpcReply) task {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d %s", r.Error.Code, r.Error.Message)
	}
	var tk task
	if err := json.Unmarshal(r.Result, &tk); err != nil {
		t.Fatal(err)
	}
	raw := map[string]any{}
	_ = json.Unmarshal(r.Result, &raw)
	if v, ok := raw["ttlMs"]; !ok || v != nil {
		t.Errorf("ttlMs = %v (present %v), want null", v, ok)
	}
	return tk
}

func TestWaitingToolsGetTheWaitBudget(t *testing.T) {
	t.Parallel()
	f, url := askEdge(t, nil)
	call := func(args map[string]any) edgetest.RpcReply {
		return modernCall(t, url, "tools/call", map[string]any{"name": "owner_ask", "arguments": args}, false)
	}
	call(map[string]any{"question": "q1"})
	call(map[string]any{"question": "q2", "wait_seconds": 0})
	call(map[string]any{"question": "q3", "wait_seconds": 60})
	waits, deadlines := f.waitsSeen()
	if diff := cmp.Diff([]int32{2, 0, 2}, waits); diff != "" {
		t.Errorf("wait_seconds the service got (-want +got): budget when omitted, a shorter one kept, a longer one capped:\n%s", diff)
	}
	for i, d := range deadlines {
		if d < 6*time.Second || d > 7*time.Second {
			t.Errorf("call %d had %s left, want the call timeout plus the wait budget (7s)", i, d)
		}
	}
}

func TestWaitingCallReturnsAsSoonAsTheAnswerLands(t *testing.T) {
	t.Parallel()
	f, url := askEdge(t, func(c *edge.Config) { c.WaitBudget = 20 * time.Second })
	go func() {
		// Answer once the ask exists: an answer before it would be lost.
		f.end(<-f.created, ownerv1.AskStatus_ASK_STATUS_ANSWERED, "yes")
	}()
	began := time.Now()
	r := modernCall(t, url, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "ok?"}}, false)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the call took %s, want it back right after the answer, not the budget (20s)", took)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(r.Result, &res); err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "ASK_STATUS_ANSWERED") {
		t.Errorf("result = %s (%v), want the answered ask", r.Result, err)
	}
}

func TestTasksClientGetsATask(t *testing.T) {
	t.Parallel()
	f, url := askEdge(t, nil)

	disc := modernCall(t, url, "server/discover", map[string]any{}, false)
	var declared struct {
		Capabilities struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(disc.Result, &declared); err != nil || string(declared.Capabilities.Extensions[edge.ExtensionTasks]) != "{}" {
		t.Errorf("server/discover does not declare the Tasks extension (%v): %s", err, disc.Result)
	}

	if list := modernCall(t, url, "tools/list", map[string]any{}, true); !strings.Contains(string(list.Result), `"name":"owner_ask"`) ||
		!strings.Contains(string(list.Result), `"execution":{"taskSupport":"optional"}`) {
		t.Errorf("tools/list = %s, want owner_ask's execution.taskSupport optional (its task block)", list.Result)
	}

	created := decodeTask(t, modernCall(t, url, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "ship?"}}, true))
	want := "ask/" + identity.DevSubject + "/ask_" + strings.Repeat("0", 25) + "1"
	if created.ResultType != "task" || created.TaskID != want || created.Status != "working" || created.PollIntervalMs <= 0 ||
		created.CreatedAt.IsZero() || created.Result != nil {
		t.Errorf("CreateTaskResult = %+v, want a working task %s", created, want)
	}
	if waits, _ := f.waitsSeen(); len(waits) != 1 || waits[0] != 0 {
		t.Errorf("a Tasks client's call waited %v, want wait_seconds 0", waits)
	}

	get := func(id string, declare bool) edgetest.RpcReply {
		return modernCall(t, url, "tasks/get", map[string]any{"taskId": id}, declare)
	}
	if got := decodeTask(t, get(created.TaskID, true)); got.ResultType != "complete" || got.Status != "working" || got.TaskID != created.TaskID {
		t.Errorf("tasks/get before the answer = %+v", got)
	}
	f.end(1, ownerv1.AskStatus_ASK_STATUS_ANSWERED, "ship it")
	done := decodeTask(t, get(created.TaskID, true))
	if done.Status != "completed" || done.Result == nil || done.Result.IsError {
		t.Fatalf("tasks/get after the answer = %+v, want completed with the tool result", done)
	}
	var env struct {
		Status string `json:"status"`
		Data   struct {
			Ask struct{ Status, Answer string } `json:"ask"`
		} `json:"data"`
	}
	b, _ := json.Marshal(done.Result.StructuredContent)
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "ok" || env.Data.Ask.Answer != "ship it" || env.Data.Ask.Status != "ASK_STATUS_ANSWERED" {
		t.Errorf("completed task's result = %s, want the owner_ask envelope with the answer", b)
	}
	if len(done.Result.Content) != 1 || !strings.Contains(done.Result.Content[0].(*mcp.TextContent).Text, "ship it") {
		t.Errorf("completed task's content = %v, want the envelope as text", done.Result.Content)
	}

	// tasks/cancel cancels a running one.
	second := decodeTask(t, modernCall(t, url, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "wait?"}}, true))
	ack := modernCall(t, url, "tasks/cancel", map[string]any{"taskId": second.TaskID}, true)
	if ack.Error != nil || string(ack.Result) == "" || !strings.Contains(string(ack.Result), `"resultType":"complete"`) {
		t.Errorf("tasks/cancel = %+v %s", ack.Error, ack.Result)
	}
	if got := decodeTask(t, get(second.TaskID, true)); got.Status != "cancelled" {
		t.Errorf("tasks/get after tasks/cancel = %+v, want cancelled", got)
	}

	// Bound to the caller, and only for declaring clients.
	for _, id := range []string{
		"ask/someone-else/" + strings.TrimPrefix(created.TaskID, "ask/"+identity.DevSubject+"/"), // another agent's id
		"ask/" + identity.DevSubject + "/ask_99999999999999999999999999",                         // unknown
		"ask/" + identity.DevSubject + "/not-an-ask-id",
		"nonsense",
		"schedule/x/y",
	} {
		r := get(id, true)
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("tasks/get %q = %+v %s, want -32602", id, r.Error, r.Result)
		}
	}
	r := get(created.TaskID, false)
	if r.Error == nil || r.Error.Code != -32021 || !strings.Contains(string(r.Error.Data), edge.ExtensionTasks) {
		t.Errorf("tasks/get from a client without the extension = %+v, want -32021 naming it", r.Error)
	}
	// A client without the extension keeps waiting the ordinary way.
	plain := modernCall(t, url, "tools/call", map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "plain?"}}, false)
	if strings.Contains(string(plain.Result), `"resultType":"task"`) {
		t.Errorf("a client without the extension got a task: %s", plain.Result)
	}
}

func TestNoTasksWithoutTheirTools(t *testing.T) {
	t.Parallel()
	// The edge of the other tests has no owner service: nothing declares
	// the extension and tasks/get is not a method.
	f := edgetest.NewFixture(t, nil)
	disc := modernCall(t, f.URL, "server/discover", map[string]any{}, false)
	if strings.Contains(string(disc.Result), edge.ExtensionTasks) {
		t.Errorf("server/discover declares tasks without a task-capable tool: %s", disc.Result)
	}
	r := modernCall(t, f.URL, "tasks/get", map[string]any{"taskId": "ask/local/x"}, true)
	if r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("tasks/get = %+v, want method not found", r.Error)
	}
}

func TestTasksInASessionDeclaredAtInitialize(t *testing.T) {
	t.Parallel()
	_, url := askEdge(t, nil)
	session := ""
	send := func(method string, id any, params map[string]any) edgetest.RpcReply {
		t.Helper()
		msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
		if id != nil {
			msg["id"] = id
		}
		body, _ := json.Marshal(msg)
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
			session = s
		}
		var r edgetest.RpcReply
		if id == nil {
			return r
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				_ = json.Unmarshal(data, &r)
			}
		}
		return r
	}
	init := send("initialize", 1, map[string]any{"protocolVersion": "2025-11-25", "clientInfo": map[string]any{"name": "t", "version": "1"},
		"capabilities": map[string]any{"extensions": map[string]any{edge.ExtensionTasks: map[string]any{}}}})
	if !strings.Contains(string(init.Result), edge.ExtensionTasks) {
		t.Fatalf("initialize result does not declare the extension: %s", init.Result)
	}
	send("notifications/initialized", nil, map[string]any{})
	created := decodeTask(t, send("tools/call", 2, map[string]any{"name": "owner_ask", "arguments": map[string]any{"question": "session?"}}))
	if created.ResultType != "task" || created.Status != "working" {
		t.Fatalf("tools/call in a session that declared tasks = %+v", created)
	}
	if got := decodeTask(t, send("tasks/get", 3, map[string]any{"taskId": created.TaskID})); got.Status != "working" {
		t.Errorf("tasks/get = %+v", got)
	}
}

// TestADomainsTaskBlockIsAllItTakes: the test-only jobs domain declares a
// task block in its contract (proto/toolmesh/testing/v1/jobs.proto) and
// nothing else: its work becomes MCP tasks — working, then completed,
// failed or cancelled as its statuses say, with the words its contract
// gives — with no edit of the edge, which names no kind of work.
func TestADomainsTaskBlockIsAllItTakes(t *testing.T) {
	t.Parallel()
	jobs := testingsvc.NewJobs()
	svc := servertest.Start(t, jobs.Server())
	e, err := edge.New(edge.Config{
		Contracts:  []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_jobs_proto.Services().ByName("TestingJobsService")},
		Services:   map[string]string{testingv1connect.TestingJobsServiceName: svc.URL},
		HTTPClient: svc.Client(),
		Mesh:       servertest.MeshSigner(),
	}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/mcp"

	if disc := modernCall(t, url, "server/discover", map[string]any{}, false); !strings.Contains(string(disc.Result), edge.ExtensionTasks) {
		t.Errorf("server/discover does not declare the Tasks extension: %s", disc.Result)
	}
	start := func(name string) task {
		t.Helper()
		return decodeTask(t, modernCall(t, url, "tools/call", map[string]any{"name": "testing_start_job", "arguments": map[string]any{"name": name}}, true))
	}
	get := func(id string) task {
		t.Helper()
		return decodeTask(t, modernCall(t, url, "tasks/get", map[string]any{"taskId": id}, true))
	}
	prefix := "job/" + identity.DevSubject + "/"
	cases := []struct {
		name   string
		end    func(id string)
		status string
		says   string
		result bool
	}{
		{"build", func(id string) { jobs.End(id, false, "built") }, "completed", "Job build is done.", true},
		{"deploy", func(id string) { jobs.End(id, true, "disk full") }, "failed", "Job deploy failed: disk full", false},
		{"cleanup", func(id string) {
			if ack := modernCall(t, url, "tasks/cancel", map[string]any{"taskId": prefix + id}, true); ack.Error != nil {
				t.Errorf("tasks/cancel: %+v", ack.Error)
			}
		}, "cancelled", "Job cleanup was cancelled.", false},
	}
	for _, c := range cases {
		created := start(c.name)
		id := strings.TrimPrefix(created.TaskID, prefix)
		if created.ResultType != "task" || created.Status != "working" || created.StatusMessage != "Job "+c.name+" is running." || id == created.TaskID {
			t.Fatalf("starting job %s = %+v, want a working task %s<job id> saying it runs", c.name, created, prefix)
		}
		c.end(id)
		got := get(created.TaskID)
		if got.Status != c.status || got.StatusMessage != c.says || (got.Result != nil) != c.result || !got.LastUpdatedAt.After(got.CreatedAt) {
			t.Errorf("job %s after it ended: %+v, want %s saying %q (a result: %v), updated after it was created", c.name, got, c.status, c.says, c.result)
		}
	}
	if r := modernCall(t, url, "tasks/get", map[string]any{"taskId": "job/someone-else/job_1"}, true); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("another agent's job: %+v, want -32602", r.Error)
	}
}
