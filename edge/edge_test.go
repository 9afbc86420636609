package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

var update = flag.Bool("update", false, "rewrite golden files")

// *mcp.ClientSession -> map[string]*jsonschema.Resolved

func TestToolsListMatchesGolden(t *testing.T) {
	t.Parallel()
	cs := edgetest.StartEdge(t, edgetest.TasksOnly(nil))
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
	svc := edgetest.StartTasks(t)
	cs := edgetest.StartEdge(t, edgetest.TasksOnly(svc))

	_, env := edgetest.Call(t, cs, "tasks_create", map[string]any{"description": "write the README", "priority": "TASK_PRIORITY_HIGH"})
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
		edgetest.Call(t, cs, "tasks_create", map[string]any{"description": "more"})
	}

	_, env = edgetest.Call(t, cs, "tasks_list", map[string]any{"limit": 2})
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

	_, env = edgetest.Call(t, cs, "tasks_get", map[string]any{"task_id": created.Task.ID})
	if env.Status != "ok" || !strings.Contains(string(env.Data), created.Task.ID) {
		t.Errorf("tasks_get = %+v, want the created task", env)
	}
}

func TestBadArgumentsGetInvalidArgumentEnvelopes(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartTasks(t)
	cs := edgetest.StartEdge(t, edgetest.TasksOnly(svc))
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
			res, env := edgetest.Call(t, cs, tc.tool, tc.args)
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
	_, env := edgetest.Call(t, cs, "tasks_list", map[string]any{})
	if env.Pagination == nil || env.Pagination.Total != 0 {
		t.Errorf("rejected calls created tasks: %+v", env.Pagination)
	}
}

func TestServiceDownGivesUnavailable(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartTasks(t)
	cs := edgetest.StartEdge(t, edgetest.TasksOnly(svc))
	if _, env := edgetest.Call(t, cs, "tasks_list", map[string]any{}); env.Status != "ok" {
		t.Fatalf("tasks_list before stop = %+v", env)
	}
	svc.Stop()
	res, env := edgetest.Call(t, cs, "tasks_list", map[string]any{})
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
	cfg := edgetest.TasksOnly(svc)
	// The hanging service is cut off by the call timeout; the other calls
	// must answer well within it, however loaded the machine.
	cfg.CallTimeout = 3 * time.Second
	cs := edgetest.StartEdge(t, cfg)

	if res, env := edgetest.Call(t, cs, "tasks_get", map[string]any{"task_id": "tsk_00000000000000000000000000"}); !res.IsError || env.DomainCode != "deadline_exceeded" {
		t.Errorf("hanging service: %+v, want deadline_exceeded", env)
	}
	if res, env := edgetest.Call(t, cs, "tasks_list", map[string]any{}); !res.IsError || env.DomainCode != "internal" || strings.Contains(env.Message, "boom") {
		t.Errorf("panicking service: %+v, want internal without the panic value", env)
	}
	if res, env := edgetest.Call(t, cs, "tasks_cancel", map[string]any{"task_id": "tsk_00000000000000000000000000"}); !res.IsError || env.DomainCode != "not_supported" {
		t.Errorf("unimplemented RPC: %+v, want not_supported", env)
	}

	unconfigured := edgetest.StartEdge(t, edge.Config{Mesh: servertest.MeshSigner()})
	if res, env := edgetest.Call(t, unconfigured, "tasks_list", map[string]any{}); !res.IsError || env.DomainCode != "not_supported" {
		t.Errorf("tool without a backend: %+v, want not_supported", env)
	}

	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_nonexistent", Arguments: map[string]any{}})
	var rpcErr interface{ Error() string }
	if err == nil || !errors.As(err, &rpcErr) {
		t.Errorf("unknown tool: err = %v, want a JSON-RPC error", err)
	}
}
