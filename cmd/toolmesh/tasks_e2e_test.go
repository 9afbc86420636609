package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// TestDefaultDailyTaskCapThroughTheEdge pins the documented default of
// WORK_TASK_MAX_PER_DAY: the tasks service built as `toolmesh serve tasks`
// builds it, with the variable unset, lets an agent create 100 work tasks
// in a day and refuses the 101st with rate_limited and the contract's
// sentence.
func TestDefaultDailyTaskCapThroughTheEdge(t *testing.T) {
	ctx := t.Context()
	db, err := sqldb.Open(ctx, filepath.Join(t.TempDir(), "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc, err := domainBuild(t, "tasks", noEnv)(ctx, db, serveDeps{Getenv: noEnv, Log: logging.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc...)
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services:   map[string]string{tasksv1connect.TasksServiceName: srv.URL},
		DevAgent:   "capped",
		HTTPClient: edgeClient,
	})

	// The cap counts per UTC day (by the service's clock, which this build
	// does not let a test set): a run that straddles midnight cannot judge.
	day := time.Now().UTC().Format(time.DateOnly)
	for i := range 100 {
		if env := callTool(t, s, "tasks_create", map[string]any{"description": fmt.Sprintf("task %d of the day", i+1)}); env.Status != "ok" {
			t.Fatalf("create %d of 100: %+v", i+1, env)
		}
	}
	env := callTool(t, s, "tasks_create", map[string]any{"description": "the 101st"})
	if now := time.Now().UTC().Format(time.DateOnly); now != day {
		t.Skipf("the UTC day turned during the test (%s to %s): the 101st create fell on another day", day, now)
	}
	if env.DomainCode != "rate_limited" || env.Message != "Rate limit exceeded: maximum 100 work tasks per day." {
		t.Errorf("the 101st create of the day = %+v, want rate_limited: \"Rate limit exceeded: maximum 100 work tasks per day.\"", env)
	}
	if list := callTool(t, s, "tasks_list", map[string]any{"limit": 1}); list.Pagination == nil || list.Pagination.Total != 100 {
		t.Errorf("tasks_list = %+v, want 100 tasks: the refused create stores nothing", list)
	}
}

// TestBlankTextThroughTheEdge: a whitespace-only description is refused at
// the edge with the non_blank rule's violation, and the tool's input schema
// says so beforehand (pattern "\S").
func TestBlankTextThroughTheEdge(t *testing.T) {
	db, err := sqldb.Open(t.Context(), filepath.Join(t.TempDir(), "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc, err := domainBuild(t, "tasks", noEnv)(t.Context(), db, serveDeps{Getenv: noEnv, Log: logging.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc...)
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{Services: map[string]string{tasksv1connect.TasksServiceName: srv.URL}, HTTPClient: edgeClient})

	schema, _ := json.Marshal(listTools(t, s)["tasks_create"].InputSchema)
	var in struct {
		Properties map[string]struct {
			Pattern string `json:"pattern"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema, &in); err != nil || in.Properties["description"].Pattern != `\S` {
		t.Errorf("tasks_create's description schema has pattern %q (%v), want \\S", in.Properties["description"].Pattern, err)
	}
	env := callTool(t, s, "tasks_create", map[string]any{"description": " \t\n "})
	if env.DomainCode != "invalid_argument" || len(env.Violations) != 1 || env.Violations[0].Field != "description" ||
		env.Violations[0].Rule != "string.non_blank" || !strings.Contains(env.Message, "description: must not be empty or only whitespace") {
		t.Errorf("tasks_create with a blank description = %+v, want invalid_argument on description by string.non_blank", env)
	}
	if list := callTool(t, s, "tasks_list", map[string]any{}); list.Pagination == nil || list.Pagination.Total != 0 {
		t.Errorf("tasks_list = %+v, want no task: the refused create stores nothing", list)
	}
}
