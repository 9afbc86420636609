package edgetest

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
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// Temporal is the dev server of this test binary, started by the first
// test that needs one (the elicitation tests).
var Temporal temporaltest.Shared

// WorkerProcessEnv makes the test binary run a calls worker instead of the
// tests (see StartWorkerProcess): the worker a test kills.
const WorkerProcessEnv = "TOOLMESH_TEST_CALLS_WORKER"

// EdgeProcessEnv makes the test binary run an edge instead of the tests
// (see StartEdgeProcess): the edge a test kills.
const EdgeProcessEnv = "TOOLMESH_TEST_EDGE"

// RunTests runs the tests of a test binary, or the calls worker or the edge
// a test started it as (StartWorkerProcess, StartEdgeProcess), and returns
// its exit code; getenv is the binary's os.Getenv (a TestMain reads the
// environment, not this package).
func RunTests(m *testing.M, getenv func(string) string) int {
	if spec := getenv(WorkerProcessEnv); spec != "" {
		return RunWorkerProcess(spec)
	}
	if spec := getenv(EdgeProcessEnv); spec != "" {
		return RunEdgeProcess(spec)
	}
	return Temporal.Run(m)
}

// MrtrMesh is what elicited calls need around the edges under test: the
// test backend, a Temporal dev server, a task queue of the test's own and
// the request state key.
type MrtrMesh struct {
	Backend *testingsvc.Service
	Svc     *servertest.Server
	Server  *temporaltest.Server
	Tc      client.Client
	Queue   string
	Key     requeststate.Key
	Sealer  *requeststate.Sealer
}

// StartWorker runs a calls worker for the mesh in this process until the
// test ends (or the returned worker is stopped).
func (m *MrtrMesh) StartWorker(t testing.TB) worker.Worker {
	t.Helper()
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  TestingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: m.Svc.URL},
		HTTPClient: m.Svc.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(m.Tc, m.Queue, worker.Options{})
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
	return Stoppable{w, &stopped}
}

// Edge serves an edge with elicitation in front of the mesh's backend.
func (m *MrtrMesh) Edge(t testing.TB, configure func(*edge.Config)) *Fixture {
	t.Helper()
	return NewFixtureOn(t, m.Backend, m.Svc, func(c *edge.Config) {
		c.Elicitation = &edge.Elicitation{Temporal: m.Tc, States: m.Sealer, TaskQueue: m.Queue}
		if configure != nil {
			configure(c)
		}
	})
}

// StartWorkerProcess runs a calls worker for the mesh as a child process
// (this test binary, see TestMain), so a test can kill it with SIGKILL. It
// returns once the worker polls.
func (m *MrtrMesh) StartWorkerProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	spec, _ := json.Marshal(WorkerSpec{HostPort: m.Server.HostPort, Namespace: m.Server.Namespace, Queue: m.Queue, Service: m.Svc.URL})
	cmd, _ := StartChild(t, WorkerProcessEnv, spec, "worker ready", "the worker process")
	return cmd
}

// StartEdgeProcess runs an edge with elicitation for the mesh as a child
// process (this test binary), so a test can kill it with SIGKILL; it
// returns the process and its /mcp URL once it serves.
func (m *MrtrMesh) StartEdgeProcess(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	spec, _ := json.Marshal(EdgeSpec{
		WorkerSpec: WorkerSpec{HostPort: m.Server.HostPort, Namespace: m.Server.Namespace, Queue: m.Queue, Service: m.Svc.URL},
		StateKey:   string(requeststate.MarshalKey(m.Key)),
	})
	cmd, addr := StartChild(t, EdgeProcessEnv, spec, "edge serving ", "the edge process")
	return cmd, "http://" + addr + "/mcp"
}

func NewMRTRMesh(t testing.TB) *MrtrMesh {
	t.Helper()
	m := &MrtrMesh{Backend: testingsvc.New(), Server: Temporal.Server(t)}
	m.Svc = servertest.Start(t, m.Backend.Server())
	var err error
	m.Tc, err = temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: m.Server.HostPort, Namespace: m.Server.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Tc.Close)
	var r [4]byte
	_, _ = rand.Read(r[:])
	m.Queue = "calls-" + hex.EncodeToString(r[:])
	if m.Key, err = requeststate.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	if m.Sealer, err = requeststate.NewSealer(m.Key); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestingContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{TestingService()}
}

type Stoppable struct {
	worker.Worker
	Stopped *bool
}

func (s Stoppable) Stop() {
	if !*s.Stopped {
		*s.Stopped = true
		s.Worker.Stop()
	}
}

// WorkerSpec tells a worker process what to serve.
type WorkerSpec struct {
	HostPort  string `json:"host_port"`
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Service   string `json:"service"`
}

// RunWorkerProcess is the child side of StartWorkerProcess: a calls
// worker that runs until it is killed.
func RunWorkerProcess(specJSON string) int {
	var spec WorkerSpec
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
		Contracts:  TestingContracts(),
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

// EdgeSpec tells an edge process what to serve.
type EdgeSpec struct {
	WorkerSpec
	StateKey string `json:"state_key"` // PEM
}

// StartChild runs this test binary as a child process that TestMain turns
// into what env names (its spec as the value), killed when the test ends,
// and waits for the line of its stdout that starts with ready; it returns
// the process and the rest of that line.
func StartChild(t *testing.T, env string, spec []byte, ready, what string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(cmd.Environ(), env+"="+string(spec))
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

// RunEdgeProcess is the child side of StartEdgeProcess.
func RunEdgeProcess(specJSON string) int {
	var spec EdgeSpec
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
		Contracts:   TestingContracts(),
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

// KillProcess kills a worker or edge process at once, as a crash would.
func KillProcess(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// Asked is one question a client was asked.
type Asked struct {
	Message string
	Fields  []string // the form's properties, sorted
}

// Answerer is a user answering every question from a fixed sheet:
// property name → value.
type Answerer struct {
	Sheet  map[string]any
	Action string // "accept" unless set

	Mu    sync.Mutex
	Asked []Asked
}

// Answer answers one form: the sheet's values for its properties.
func (a *Answerer) Answer(message string, schema any) (string, map[string]any) {
	raw, _ := json.Marshal(schema)
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(raw, &s)
	fields := slices.Sorted(maps.Keys(s.Properties))
	a.Mu.Lock()
	a.Asked = append(a.Asked, Asked{Message: message, Fields: fields})
	a.Mu.Unlock()
	if a.Action != "accept" {
		return a.Action, nil
	}
	content := map[string]any{}
	for _, f := range fields {
		if v, ok := a.Sheet[f]; ok {
			content[f] = v
		}
	}
	return "accept", content
}

// Handler answers server-sent and MRTR elicitations of a go-sdk client.
func (a *Answerer) Handler(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	action, content := a.Answer(req.Params.Message, req.Params.RequestedSchema)
	return &mcp.ElicitResult{Action: action, Content: content}, nil
}

func (a *Answerer) Questions() []Asked {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return slices.Clone(a.Asked)
}

func NewAnswerer(sheet map[string]any) *Answerer { return &Answerer{Sheet: sheet, Action: "accept"} }

// ElicitingMeta is the _meta of a 2026-07-28 request from a client that
// declares form elicitation.
const ElicitingMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// RawResult is a tools/call result as a raw client reads it.
type RawResult struct {
	ResultType        string                     `json:"resultType"`
	InputRequests     map[string]RawInputRequest `json:"inputRequests"`
	RequestState      string                     `json:"requestState"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
	// Error is the JSON-RPC error the round was answered with instead of a
	// result (HTTP 400).
	Error json.RawMessage `json:"-"`
}

type RawInputRequest struct {
	Method string `json:"method"`
	Params struct {
		Mode            string          `json:"mode"`
		Message         string          `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
		URL             string          `json:"url"`
		ElicitationID   string          `json:"elicitationId"`
	} `json:"params"`
}

// RawRound sends one raw 2026-07-28 tools/call and returns its result.
func RawRound(t testing.TB, url, tool string, id int, args any, state string, responses map[string]any, h http.Header) RawResult {
	t.Helper()
	params := map[string]any{"name": tool, "arguments": args, "_meta": json.RawMessage(ElicitingMeta)}
	if state != "" {
		params["requestState"] = state
	}
	if responses != nil {
		params["inputResponses"] = responses
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	hdr := ModernHeaders("tools/call")
	hdr.Set("Mcp-Name", tool)
	for k, v := range h {
		hdr[k] = v
	}
	res, raw := Post(t, url, hdr, string(body))
	msg := LastMessage(raw)
	var rpc struct {
		Result *RawResult      `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg, &rpc); err != nil || (rpc.Result == nil) == (rpc.Error == nil) {
		t.Fatalf("tools/call %s answered %s", tool, raw)
	}
	if rpc.Error != nil {
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("tools/call %s: %d %s, want 400 with the error", tool, res.StatusCode, raw)
		}
		return RawResult{Error: rpc.Error}
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("tools/call %s: %d %s", tool, res.StatusCode, raw)
	}
	return *rpc.Result
}

// LastMessage is the last JSON-RPC message of a response body, plain JSON
// or an SSE stream.
func LastMessage(body []byte) []byte {
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

// Structured is a go-sdk result's envelope as JSON.
func Structured(t *testing.T, res *mcp.CallToolResult) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// EnvelopeJSON decodes an envelope.
func EnvelopeJSON(t *testing.T, raw json.RawMessage) FullEnvelope {
	t.Helper()
	var env FullEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("not an envelope: %s", raw)
	}
	return env
}

// Conversation drives testing_purge by hand, one round at a time.
type Conversation struct {
	T     *testing.T
	Tool  string
	Args  map[string]any
	A     *Answerer
	ID    int
	Extra http.Header
}

// Send sends one round (state "" starts the call) to url.
func (c *Conversation) Send(url, state string, responses map[string]any) RawResult {
	c.ID++
	return RawRound(c.T, url, c.Tool, c.ID, c.Args, state, responses, c.Extra)
}

// Answers are the answerer's responses to a round's questions.
func (c *Conversation) Answers(res RawResult) map[string]any {
	c.T.Helper()
	if res.ResultType != "input_required" {
		c.T.Fatalf("result = %+v, want input_required", res)
	}
	out := map[string]any{}
	for key, ir := range res.InputRequests {
		var schema any
		_ = json.Unmarshal(ir.Params.RequestedSchema, &schema)
		action, content := c.A.Answer(ir.Params.Message, schema)
		out[key] = map[string]any{"action": action, "content": content}
	}
	return out
}

// ToFinal drives the call up to its last round at url and returns the
// state and the answers of that round, unsent.
func (c *Conversation) ToFinal(url string) (string, map[string]any) {
	c.T.Helper()
	r1 := c.Send(url, "", nil)
	r2 := c.Send(url, r1.RequestState, c.Answers(r1))
	if len(r2.InputRequests) != 1 || r2.InputRequests["r2.admin"].Method == "" {
		c.T.Fatalf("round 2 = %+v, want the admin confirmation", r2)
	}
	return r2.RequestState, c.Answers(r2)
}

func NewConversation(t *testing.T) *Conversation {
	return &Conversation{T: t, Tool: "testing_purge", Args: map[string]any{}, A: NewAnswerer(PurgeSheet)}
}

func IsRemoved(t *testing.T, res RawResult, n int) bool {
	t.Helper()
	env := EnvelopeJSON(t, res.StructuredContent)
	return res.ResultType == "complete" && env.Status == "ok" && string(env.Data) == fmt.Sprintf(`{"removed":%d}`, n)
}

// The sheets the test user answers from.
var (
	PurgeSheet  = map[string]any{"agent_id": "victim", "confirm": true, "reason": "cleanup after the test"}
	RemindSheet = map[string]any{"every": "2h", "channel": "CHANNEL_LOG", "confirm": true}
)

// SeedPurge seeds the notes testing_purge removes and returns the check
// that the purge ran exactly once since.
func (m *MrtrMesh) SeedPurge(t *testing.T) (purgedOnce func()) {
	before := m.Backend.Executions("Purge")
	m.Backend.SeedNotes("victim", 3)
	return func() {
		t.Helper()
		if n := m.Backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	}
}
