package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

var update = flag.Bool("update", false, "rewrite golden files")

// startTasks serves a real tasks service on SQLite.
func startTasks(t *testing.T) *servertest.Server { return startTasksB(t) }

func startTasksB(t testing.TB) *servertest.Server {
	svc, _ := startTasksWithStore(t)
	return svc
}

func startTasksWithStore(t testing.TB) (*servertest.Server, *tasksstore.Store) {
	t.Helper()
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "tasks.db"))
	st, err := tasksstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, tasks.New(st, tasks.Config{}).Registration()), st
}

// startEdge serves an edge with cfg and returns a connected go-sdk client
// session.
func startEdge(t *testing.T, cfg edge.Config) *mcp.ClientSession { return startEdgeB(t, cfg) }

func startEdgeB(t testing.TB, cfg edge.Config) *mcp.ClientSession {
	t.Helper()
	url := serveEdgeB(t, cfg)
	client := mcp.NewClient(&mcp.Implementation{Name: "edge-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect MCP client: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// serveEdgeB serves an edge with cfg and returns its base URL.
func serveEdgeB(t testing.TB, cfg edge.Config) string {
	t.Helper()
	if cfg.Mesh == nil {
		cfg.Mesh = servertest.MeshSigner() // the key every test service accepts
	}
	e, err := edge.New(cfg, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// tasksOnly configures an edge whose only backend is svc (nil: an
// unreachable address). The edge shares svc's client so the test server can
// close its connections when it stops.
func tasksOnly(svc *servertest.Server) edge.Config {
	if svc == nil {
		return edge.Config{Services: map[string]string{tasksv1connect.TasksServiceName: "http://127.0.0.1:1"}, Mesh: servertest.MeshSigner()}
	}
	return edge.Config{
		Services:    map[string]string{tasksv1connect.TasksServiceName: svc.URL},
		CallTimeout: 5 * time.Second,
		HTTPClient:  svc.Client(),
		Mesh:        servertest.MeshSigner(),
	}
}

// envelope is the decoded structuredContent of a tool result.
type envelope struct {
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data"`
	Pagination *struct {
		Offset, Limit, Total int
		NextOffset           *int `json:"next_offset"`
	} `json:"pagination"`
	Tool       string `json:"tool"`
	ErrorType  string `json:"error_type"`
	DomainCode string `json:"domain_code"`
	Message    string `json:"message"`
	Violations []struct {
		Field, Rule, Message string
	} `json:"violations"`
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("structuredContent is not an envelope: %s", raw)
	}
	if len(res.Content) != 1 {
		t.Fatalf("result has %d content blocks, want 1", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	var fromText, structured any
	if err := json.Unmarshal([]byte(text.Text), &fromText); err != nil {
		t.Fatalf("text content is not JSON: %s", text.Text)
	}
	_ = json.Unmarshal(raw, &structured)
	if !cmp.Equal(structured, fromText) {
		t.Errorf("text content %s does not match structuredContent %s", text.Text, raw)
	}
	if res.IsError != (env.Status != "ok") {
		t.Errorf("isError = %v for status %q", res.IsError, env.Status)
	}
	checkOutput(t, cs, tool, raw)
	return res, env
}

// outputSchemas holds, per client session, the compiled output schemas of
// the tools it lists.
var outputSchemas sync.Map // *mcp.ClientSession -> map[string]*jsonschema.Resolved

// checkOutput checks a result's structuredContent against the output schema
// its tool declares, as a client that validates results does: every
// result, success or error, must validate.
func checkOutput(t *testing.T, cs *mcp.ClientSession, tool string, structured []byte) {
	t.Helper()
	v, ok := outputSchemas.Load(cs)
	if !ok {
		schemas := map[string]*jsonschema.Resolved{}
		for tl, err := range cs.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			raw, err := json.Marshal(tl.OutputSchema)
			if err != nil {
				t.Fatal(err)
			}
			schemas[tl.Name] = schematest.Compile(t, raw)
		}
		v, _ = outputSchemas.LoadOrStore(cs, schemas)
	}
	rs, listed := v.(map[string]*jsonschema.Resolved)[tool]
	if !listed {
		return // a tool hidden from this caller
	}
	if err := schematest.Check(rs, structured); err != nil {
		t.Errorf("%s: structuredContent does not validate against the tool's outputSchema: %v\n%s", tool, err, structured)
	}
}

func TestToolsListMatchesGolden(t *testing.T) {
	t.Parallel()
	cs := startEdge(t, tasksOnly(nil))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(res.Tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "tools_list.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
		t.Errorf("tools/list differs from %s (-want +got); rerun with -update if intended:\n%s", golden, diff)
	}
	for _, tool := range res.Tools {
		if tool.Title == "" || tool.Description == "" {
			t.Errorf("tool %s lacks a title or description", tool.Name)
		}
	}
}

func TestCreateAndListThroughTheEdge(t *testing.T) {
	t.Parallel()
	svc := startTasks(t)
	cs := startEdge(t, tasksOnly(svc))

	_, env := call(t, cs, "tasks_create", map[string]any{"description": "write the README", "priority": "TASK_PRIORITY_HIGH"})
	if env.Status != "ok" {
		t.Fatalf("tasks_create = %+v, want ok", env)
	}
	var created struct {
		Task struct{ ID, AgentID, Description, Status, Priority string } `json:"task"`
	}
	if err := json.Unmarshal(env.Data, &created); err != nil {
		t.Fatal(err)
	}
	if created.Task.Description != "write the README" || created.Task.Status != "TASK_STATUS_PENDING" || created.Task.Priority != "TASK_PRIORITY_HIGH" {
		t.Errorf("created task = %+v", created.Task)
	}
	for range 2 {
		call(t, cs, "tasks_create", map[string]any{"description": "more"})
	}

	_, env = call(t, cs, "tasks_list", map[string]any{"limit": 2})
	if env.Status != "ok" || env.Pagination == nil {
		t.Fatalf("tasks_list = %+v, want ok with pagination", env)
	}
	if p := env.Pagination; p.Total != 3 || p.Limit != 2 || p.Offset != 0 || p.NextOffset == nil || *p.NextOffset != 2 {
		t.Errorf("pagination = %+v, want offset 0 limit 2 total 3 next_offset 2", *p)
	}
	var listed struct {
		Tasks []struct{ ID string } `json:"tasks"`
		Page  any                   `json:"page"`
	}
	if err := json.Unmarshal(env.Data, &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Tasks) != 2 || listed.Page != nil {
		t.Errorf("data = %s, want 2 tasks and the page lifted into pagination", env.Data)
	}

	_, env = call(t, cs, "tasks_get", map[string]any{"task_id": created.Task.ID})
	if env.Status != "ok" || !strings.Contains(string(env.Data), created.Task.ID) {
		t.Errorf("tasks_get = %+v, want the created task", env)
	}
}

func TestBadArgumentsGetInvalidArgumentEnvelopes(t *testing.T) {
	t.Parallel()
	svc := startTasks(t)
	cs := startEdge(t, tasksOnly(svc))
	cases := []struct {
		name      string
		tool      string
		args      any
		wantField string
		wantRule  string
	}{
		{"validation rule", "tasks_create", map[string]any{"description": ""}, "description", "required"},
		{"too long", "tasks_create", map[string]any{"description": strings.Repeat("x", 4001)}, "description", "string.max_len"},
		{"unknown argument", "tasks_create", map[string]any{"description": "x", "owner": "someone"}, "owner", "unknown_field"},
		{"wrong type", "tasks_list", map[string]any{"limit": true}, "limit", "type"},
		{"negative limit", "tasks_list", map[string]any{"limit": -1}, "limit", "int32.gte_lte"},
		{"zero enum value", "tasks_update_status", map[string]any{"task_id": "tsk_00000000000000000000000000", "status": "TASK_STATUS_UNSPECIFIED"}, "status", "required"},
		{"array arguments", "tasks_create", []any{"write"}, "", "arguments.object"},
		{"string arguments", "tasks_create", "write", "", "arguments.object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, env := call(t, cs, tc.tool, tc.args)
			if !res.IsError || env.DomainCode != "invalid_argument" || env.ErrorType != "ArgumentValidationError" || env.Tool != tc.tool {
				t.Fatalf("envelope = %+v, want an invalid_argument error for %s", env, tc.tool)
			}
			found := false
			for _, v := range env.Violations {
				found = found || (v.Field == tc.wantField && v.Rule == tc.wantRule && v.Message != "")
			}
			if !found {
				t.Errorf("violations = %+v, want field %q rule %q", env.Violations, tc.wantField, tc.wantRule)
			}
		})
	}
	_, env := call(t, cs, "tasks_list", map[string]any{})
	if env.Pagination == nil || env.Pagination.Total != 0 {
		t.Errorf("rejected calls created tasks: %+v", env.Pagination)
	}
}

func TestServiceDownGivesUnavailable(t *testing.T) {
	t.Parallel()
	svc := startTasks(t)
	cs := startEdge(t, tasksOnly(svc))
	if _, env := call(t, cs, "tasks_list", map[string]any{}); env.Status != "ok" {
		t.Fatalf("tasks_list before stop = %+v", env)
	}
	svc.Stop()
	res, env := call(t, cs, "tasks_list", map[string]any{})
	if !res.IsError || env.DomainCode != "unavailable" || env.ErrorType != "UnavailableError" {
		t.Errorf("tasks_list with the service stopped = %+v, want an unavailable envelope", env)
	}
}

// hangingTasks never answers Get and panics on List.
type hangingTasks struct {
	tasksv1connect.UnimplementedTasksServiceHandler
}

func (hangingTasks) Get(ctx context.Context, _ *tasksv1.GetRequest) (*tasksv1.GetResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingTasks) List(context.Context, *tasksv1.ListRequest) (*tasksv1.ListResponse, error) {
	panic("boom")
}

func TestSlowBrokenAndMissingBackends(t *testing.T) {
	t.Parallel()
	svc := servertest.Start(t, registrationFor(hangingTasks{}))
	cfg := tasksOnly(svc)
	// The hanging service is cut off by the call timeout; the other calls
	// must answer well within it, however loaded the machine.
	cfg.CallTimeout = 3 * time.Second
	cs := startEdge(t, cfg)

	if res, env := call(t, cs, "tasks_get", map[string]any{"task_id": "tsk_00000000000000000000000000"}); !res.IsError || env.DomainCode != "deadline_exceeded" {
		t.Errorf("hanging service: %+v, want deadline_exceeded", env)
	}
	if res, env := call(t, cs, "tasks_list", map[string]any{}); !res.IsError || env.DomainCode != "internal" || strings.Contains(env.Message, "boom") {
		t.Errorf("panicking service: %+v, want internal without the panic value", env)
	}
	if res, env := call(t, cs, "tasks_cancel", map[string]any{"task_id": "tsk_00000000000000000000000000"}); !res.IsError || env.DomainCode != "not_supported" {
		t.Errorf("unimplemented RPC: %+v, want not_supported", env)
	}

	unconfigured := startEdge(t, edge.Config{Mesh: servertest.MeshSigner()})
	if res, env := call(t, unconfigured, "tasks_list", map[string]any{}); !res.IsError || env.DomainCode != "not_supported" {
		t.Errorf("tool without a backend: %+v, want not_supported", env)
	}

	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_nonexistent", Arguments: map[string]any{}})
	var rpcErr interface{ Error() string }
	if err == nil || !errors.As(err, &rpcErr) {
		t.Errorf("unknown tool: err = %v, want a JSON-RPC error", err)
	}
}
