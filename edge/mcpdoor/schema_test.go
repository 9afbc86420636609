package mcpdoor_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// Every tool of the mesh declares an output schema that every one of its
// results validates against: success, and each kind of error. A client
// that checks structuredContent against outputSchema (the TypeScript SDK
// does) must never see a schema error instead of the envelope.
func TestEveryResultValidatesAgainstItsOutputSchema(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartTasks(t)
	cfg := edgetest.TasksOnly(svc)
	// Every other service is configured but unreachable, so calls get as
	// far as the service: arguments are checked, then unavailable.
	for _, sd := range toolcatalog.Contracts() {
		if name := string(sd.FullName()); name != tasksv1connect.TasksServiceName {
			cfg.Services[name] = "http://127.0.0.1:1"
		}
	}
	cs := edgetest.StartEdge(t, cfg)
	ctx := context.Background()
	var tools []*mcp.Tool
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	if len(tools) < 40 {
		t.Fatalf("tools/list has %d tools, want the whole mesh", len(tools))
	}

	// Each error kind, as the edge builds it, for each tool.
	codes := toolcall.Codes()
	for _, want := range []string{"invalid_argument", "guardrail_violated", "not_found", "conflict", "unavailable", "read_only",
		"rate_limited", "capability_gap", "not_supported", "internal", "permission_denied", "unauthenticated", "deadline_exceeded"} {
		if !slices.Contains(codes, want) {
			t.Errorf("the edge lacks domain code %s", want)
		}
	}
	for _, tool := range tools {
		raw, err := json.Marshal(tool.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		rs := schematest.Compile(t, raw)
		var envs []*toolcall.Envelope
		for _, code := range codes {
			envs = append(envs, toolcall.Fail(tool.Name, code, "it failed"))
		}
		inv := toolcall.Invalid(tool.Name, []boundary.Violation{{Field: "x", Rule: "unknown_field", Message: "unknown field"}})
		gr := toolcall.Fail(tool.Name, toolcall.CodeGuardrailViolated, "confirm it")
		gr.Violation = "missing_confirm"
		rl := toolcall.Fail(tool.Name, toolcall.CodeRateLimited, "slow down")
		rl.RetryAfterSeconds = 2
		gap := toolcall.Fail(tool.Name, toolcall.CodeCapabilityGap, "lacks it")
		gap.Gap = "tasks.colour"
		for _, env := range append(envs, inv, gr, rl, gap, toolcall.Internal(tool.Name, "err_01jd8x")) {
			b, _ := json.Marshal(env)
			if err := schematest.Check(rs, b); err != nil {
				t.Errorf("%s: %s does not validate: %v", tool.Name, b, err)
			}
		}
		if err := schematest.Check(rs, []byte(`{"status":"error","message":"no code"}`)); err == nil {
			t.Errorf("%s: an error without domain_code validates; the schema says nothing", tool.Name)
		}
	}

	// Real calls through the edge (call checks each result against the
	// tool's schema): failing arguments for every tool, calls that reach an
	// unreachable service, and successes of the tasks tools.
	for _, tool := range tools {
		_, env := edgetest.Call(t, cs, tool.Name, map[string]any{"no_such_argument": 1})
		if env.Status != "error" {
			t.Errorf("%s with an unknown argument = %+v, want an error", tool.Name, env)
		}
	}
	for _, name := range []string{"agents_list", "memory_list", "audit_head", "owner_list_asks", "schedules_list", "credits_balance"} {
		if _, env := edgetest.Call(t, cs, name, map[string]any{}); env.DomainCode != "unavailable" {
			t.Errorf("%s with its service down = %+v, want unavailable", name, env)
		}
	}
	_, env := edgetest.Call(t, cs, "tasks_create", map[string]any{"description": "validate me", "priority": "TASK_PRIORITY_HIGH"})
	var created struct {
		Task struct{ ID string } `json:"task"`
	}
	if err := json.Unmarshal(env.Data, &created); err != nil || created.Task.ID == "" {
		t.Fatalf("tasks_create = %+v", env)
	}
	id := created.Task.ID
	for name, args := range map[string]map[string]any{
		"tasks_get":           {"task_id": id},
		"tasks_list":          {"limit": 1},
		"tasks_update_status": {"task_id": id, "status": "TASK_STATUS_RUNNING"},
	} {
		if _, env := edgetest.Call(t, cs, name, args); env.Status != "ok" {
			t.Errorf("%s = %+v, want ok", name, env)
		}
	}
	_, env = edgetest.Call(t, cs, "tasks_update_status", map[string]any{"task_id": id, "status": "TASK_STATUS_RUNNING"})
	if env.DomainCode != "conflict" {
		t.Errorf("a second move to running = %+v, want conflict", env)
	}
	if _, env := edgetest.Call(t, cs, "tasks_cancel", map[string]any{"task_id": id, "reason": "done testing"}); env.Status != "ok" {
		t.Errorf("tasks_cancel = %+v", env)
	}
	if _, env := edgetest.Call(t, cs, "tasks_get", map[string]any{"task_id": "tsk_00000000000000000000000000"}); env.DomainCode != "not_found" {
		t.Errorf("tasks_get of an unknown task = %+v, want not_found", env)
	}
}
