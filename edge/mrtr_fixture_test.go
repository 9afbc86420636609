package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// temporal is the dev server of this test binary, started by the first
// test that needs one (the elicitation tests).
var temporal temporaltest.Shared

// workerProcessEnv makes the test binary run a calls worker instead of the
// tests (see startWorkerProcess): the worker a test kills.
const workerProcessEnv = "TOOLMESH_TEST_CALLS_WORKER"

// edgeProcessEnv makes the test binary run an edge instead of the tests
// (see startEdgeProcess): the edge a test kills.
const edgeProcessEnv = "TOOLMESH_TEST_EDGE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerProcessEnv); spec != "" {
		os.Exit(runWorkerProcess(spec))
	}
	if spec := os.Getenv(edgeProcessEnv); spec != "" {
		os.Exit(runEdgeProcess(spec))
	}
	os.Exit(temporal.Run(m))
}

// mrtrMesh is what elicited calls need around the edges under test: the
// test backend, a Temporal dev server, a task queue of the test's own and
// the request state key.
type mrtrMesh struct {
	backend *testingsvc.Service
	svc     *servertest.Server
	server  *temporaltest.Server
	tc      client.Client
	queue   string
	key     requeststate.Key
	sealer  *requeststate.Sealer
}

func newMRTRMesh(t testing.TB) *mrtrMesh {
	t.Helper()
	m := &mrtrMesh{backend: testingsvc.New(), server: temporal.Server(t)}
	m.svc = servertest.Start(t, m.backend.Server())
	var err error
	m.tc, err = temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: m.server.HostPort, Namespace: m.server.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.tc.Close)
	var r [4]byte
	_, _ = rand.Read(r[:])
	m.queue = "calls-" + hex.EncodeToString(r[:])
	if m.key, err = requeststate.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	if m.sealer, err = requeststate.NewSealer(m.key); err != nil {
		t.Fatal(err)
	}
	return m
}

func testingContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{testingService()}
}

// startWorker runs a calls worker for the mesh in this process until the
// test ends (or the returned worker is stopped).
func (m *mrtrMesh) startWorker(t testing.TB) worker.Worker {
	t.Helper()
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  testingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: m.svc.URL},
		HTTPClient: m.svc.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(m.tc, m.queue, worker.Options{})
	calls.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			w.Stop()
		}
	})
	return stoppable{w, &stopped}
}

type stoppable struct {
	worker.Worker
	stopped *bool
}

func (s stoppable) Stop() {
	if !*s.stopped {
		*s.stopped = true
		s.Worker.Stop()
	}
}

// edge serves an edge with elicitation in front of the mesh's backend.
func (m *mrtrMesh) edge(t testing.TB, configure func(*edge.Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, m.backend, m.svc, func(c *edge.Config) {
		c.Elicitation = &edge.Elicitation{Temporal: m.tc, States: m.sealer, TaskQueue: m.queue}
		if configure != nil {
			configure(c)
		}
	})
}

// workerSpec tells a worker process what to serve.
type workerSpec struct {
	HostPort  string `json:"host_port"`
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Service   string `json:"service"`
}

// startWorkerProcess runs a calls worker for the mesh as a child process
// (this test binary, see TestMain), so a test can kill it with SIGKILL. It
// returns once the worker polls.
func (m *mrtrMesh) startWorkerProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	spec, _ := json.Marshal(workerSpec{HostPort: m.server.HostPort, Namespace: m.server.Namespace, Queue: m.queue, Service: m.svc.URL})
	cmd, _ := startChild(t, workerProcessEnv, spec, "worker ready", "the worker process")
	return cmd
}

// runWorkerProcess is the child side of startWorkerProcess: a calls
// worker that runs until it is killed.
func runWorkerProcess(specJSON string) int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	tc, err := temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: spec.HostPort, Namespace: spec.Namespace}, logging.Discard())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  testingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: spec.Service},
		HTTPClient: servertest.HTTPClient(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	w := worker.New(tc, spec.Queue, worker.Options{})
	calls.Register(w, acts)
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	fmt.Println("worker ready")
	select {} // until killed
}

// edgeSpec tells an edge process what to serve.
type edgeSpec struct {
	workerSpec
	StateKey string `json:"state_key"` // PEM
}

// startEdgeProcess runs an edge with elicitation for the mesh as a child
// process (this test binary), so a test can kill it with SIGKILL; it
// returns the process and its /mcp URL once it serves.
func (m *mrtrMesh) startEdgeProcess(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	spec, _ := json.Marshal(edgeSpec{
		workerSpec: workerSpec{HostPort: m.server.HostPort, Namespace: m.server.Namespace, Queue: m.queue, Service: m.svc.URL},
		StateKey:   string(requeststate.MarshalKey(m.key)),
	})
	cmd, addr := startChild(t, edgeProcessEnv, spec, "edge serving ", "the edge process")
	return cmd, "http://" + addr + "/mcp"
}

// startChild runs this test binary as a child process that TestMain turns
// into what env names (its spec as the value), killed when the test ends,
// and waits for the line of its stdout that starts with ready; it returns
// the process and the rest of that line.
func startChild(t *testing.T, env string, spec []byte, ready, what string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rest := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if r, ok := strings.CutPrefix(sc.Text(), ready); ok {
				rest <- r
			}
		}
		close(rest)
	}()
	select {
	case r, ok := <-rest:
		if !ok {
			t.Fatalf("%s exited before it was ready", what)
		}
		return cmd, r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not get ready", what)
	}
	return nil, ""
}

// runEdgeProcess is the child side of startEdgeProcess.
func runEdgeProcess(specJSON string) int {
	var spec edgeSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "edge process:", err)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "edge process:", err)
		return 2
	}
	tc, err := temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: spec.HostPort, Namespace: spec.Namespace}, logging.Discard())
	if err != nil {
		return fail(err)
	}
	key, err := requeststate.ParseKey([]byte(spec.StateKey))
	if err != nil {
		return fail(err)
	}
	sealer, err := requeststate.NewSealer(key)
	if err != nil {
		return fail(err)
	}
	e, err := edge.New(edge.Config{
		Contracts:   testingContracts(),
		Services:    map[string]string{testingv1connect.TestingServiceName: spec.Service},
		HTTPClient:  servertest.HTTPClient(),
		Mesh:        servertest.MeshSigner(),
		CallTimeout: 5 * time.Second,
		Elicitation: &edge.Elicitation{Temporal: tc, States: sealer, TaskQueue: spec.Queue},
	}, logging.Discard())
	if err != nil {
		return fail(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	fmt.Println("edge serving " + lis.Addr().String())
	return fail(http.Serve(lis, e.Handler()))
}

// killProcess kills a worker or edge process at once, as a crash would.
func killProcess(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// asked is one question a client was asked.
type asked struct {
	Message string
	Fields  []string // the form's properties, sorted
}

// answerer is a user answering every question from a fixed sheet:
// property name → value.
type answerer struct {
	sheet  map[string]any
	action string // "accept" unless set

	mu    sync.Mutex
	asked []asked
}

func newAnswerer(sheet map[string]any) *answerer { return &answerer{sheet: sheet, action: "accept"} }

// answer answers one form: the sheet's values for its properties.
func (a *answerer) answer(message string, schema any) (string, map[string]any) {
	raw, _ := json.Marshal(schema)
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(raw, &s)
	fields := slices.Sorted(maps.Keys(s.Properties))
	a.mu.Lock()
	a.asked = append(a.asked, asked{Message: message, Fields: fields})
	a.mu.Unlock()
	if a.action != "accept" {
		return a.action, nil
	}
	content := map[string]any{}
	for _, f := range fields {
		if v, ok := a.sheet[f]; ok {
			content[f] = v
		}
	}
	return "accept", content
}

// handler answers server-sent and MRTR elicitations of a go-sdk client.
func (a *answerer) handler(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	action, content := a.answer(req.Params.Message, req.Params.RequestedSchema)
	return &mcp.ElicitResult{Action: action, Content: content}, nil
}

func (a *answerer) questions() []asked {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked)
}

// elicitingMeta is the _meta of a 2026-07-28 request from a client that
// declares form elicitation.
const elicitingMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// rawResult is a tools/call result as a raw client reads it.
type rawResult struct {
	ResultType        string                     `json:"resultType"`
	InputRequests     map[string]rawInputRequest `json:"inputRequests"`
	RequestState      string                     `json:"requestState"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
	// Error is the JSON-RPC error the round was answered with instead of a
	// result (HTTP 400).
	Error json.RawMessage `json:"-"`
}

type rawInputRequest struct {
	Method string `json:"method"`
	Params struct {
		Mode            string          `json:"mode"`
		Message         string          `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
		URL             string          `json:"url"`
		ElicitationID   string          `json:"elicitationId"`
	} `json:"params"`
}

// rawRound sends one raw 2026-07-28 tools/call and returns its result.
func rawRound(t testing.TB, url, tool string, id int, args any, state string, responses map[string]any, h http.Header) rawResult {
	t.Helper()
	params := map[string]any{"name": tool, "arguments": args, "_meta": json.RawMessage(elicitingMeta)}
	if state != "" {
		params["requestState"] = state
	}
	if responses != nil {
		params["inputResponses"] = responses
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	hdr := modernHeaders("tools/call")
	hdr.Set("Mcp-Name", tool)
	for k, v := range h {
		hdr[k] = v
	}
	res, raw := post(t, url, hdr, string(body))
	msg := lastMessage(raw)
	var rpc struct {
		Result *rawResult      `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg, &rpc); err != nil || (rpc.Result == nil) == (rpc.Error == nil) {
		t.Fatalf("tools/call %s answered %s", tool, raw)
	}
	if rpc.Error != nil {
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("tools/call %s: %d %s, want 400 with the error", tool, res.StatusCode, raw)
		}
		return rawResult{Error: rpc.Error}
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("tools/call %s: %d %s", tool, res.StatusCode, raw)
	}
	return *rpc.Result
}

// lastMessage is the last JSON-RPC message of a response body, plain JSON
// or an SSE stream.
func lastMessage(body []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = []byte(data)
		}
	}
	if last == nil {
		return body
	}
	return last
}

// rawCall drives a call by hand over raw HTTP, round after round, the way
// a 2026-07-28 client without an SDK would: the same arguments each time,
// the answers as inputResponses and the requestState echoed, under a new
// JSON-RPC id. It returns the final result.
func rawCall(t *testing.T, url, tool string, args any, a *answerer) rawResult {
	t.Helper()
	state := ""
	var responses map[string]any
	for id := 1; id <= 10; id++ {
		res := rawRound(t, url, tool, id, args, state, responses, nil)
		if res.ResultType != "input_required" {
			return res
		}
		responses = map[string]any{}
		for key, ir := range res.InputRequests {
			if ir.Method != "elicitation/create" || ir.Params.Mode != "form" {
				t.Fatalf("input request %s = %+v, want a form elicitation", key, ir)
			}
			var schema any
			_ = json.Unmarshal(ir.Params.RequestedSchema, &schema)
			action, content := a.answer(ir.Params.Message, schema)
			r := map[string]any{"action": action}
			if content != nil {
				r["content"] = content
			}
			responses[key] = r
		}
		state = res.RequestState
	}
	t.Fatal("the call took more than 10 rounds")
	return rawResult{}
}

// structured is a go-sdk result's envelope as JSON.
func structured(t *testing.T, res *mcp.CallToolResult) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envelopeJSON decodes an envelope.
func envelopeJSON(t *testing.T, raw json.RawMessage) fullEnvelope {
	t.Helper()
	var env fullEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("not an envelope: %s", raw)
	}
	return env
}

// conversation drives testing_purge by hand, one round at a time.
type conversation struct {
	t     *testing.T
	tool  string
	args  map[string]any
	a     *answerer
	id    int
	extra http.Header
}

func newConversation(t *testing.T) *conversation {
	return &conversation{t: t, tool: "testing_purge", args: map[string]any{}, a: newAnswerer(purgeSheet)}
}

// send sends one round (state "" starts the call) to url.
func (c *conversation) send(url, state string, responses map[string]any) rawResult {
	c.id++
	return rawRound(c.t, url, c.tool, c.id, c.args, state, responses, c.extra)
}

// answers are the answerer's responses to a round's questions.
func (c *conversation) answers(res rawResult) map[string]any {
	c.t.Helper()
	if res.ResultType != "input_required" {
		c.t.Fatalf("result = %+v, want input_required", res)
	}
	out := map[string]any{}
	for key, ir := range res.InputRequests {
		var schema any
		_ = json.Unmarshal(ir.Params.RequestedSchema, &schema)
		action, content := c.a.answer(ir.Params.Message, schema)
		out[key] = map[string]any{"action": action, "content": content}
	}
	return out
}

// toFinal drives the call up to its last round at url and returns the
// state and the answers of that round, unsent.
func (c *conversation) toFinal(url string) (string, map[string]any) {
	c.t.Helper()
	r1 := c.send(url, "", nil)
	r2 := c.send(url, r1.RequestState, c.answers(r1))
	if len(r2.InputRequests) != 1 || r2.InputRequests["r2.admin"].Method == "" {
		c.t.Fatalf("round 2 = %+v, want the admin confirmation", r2)
	}
	return r2.RequestState, c.answers(r2)
}

// refusedState is the one answer to an unusable requestState: an
// invalid-params error, never a tool result.
const refusedState = `{"code":-32602,"message":"requestState: not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over","data":{"violations":[{"field":"requestState","rule":"request_state","message":"not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over"}]}}`

func isRefusal(res rawResult) bool { return string(res.Error) == refusedState }

func isRemoved(t *testing.T, res rawResult, n int) bool {
	t.Helper()
	env := envelopeJSON(t, res.StructuredContent)
	return res.ResultType == "complete" && env.Status == "ok" && string(env.Data) == fmt.Sprintf(`{"removed":%d}`, n)
}
