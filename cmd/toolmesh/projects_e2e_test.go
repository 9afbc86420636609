package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/projects"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// The projects tools through the edge, over the projects service as
// `toolmesh serve projects` builds it, its health workflow on a real
// Temporal dev server run by the worker `toolmesh worker projects`
// registers, and the tasks service for tasks of a project.
func TestProjectsToolsThroughTheEdge(t *testing.T) {
	temporaltest.SkipShort(t)
	ctx := context.Background()
	dev := temporaltest.Start(t)
	tc, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: dev.HostPort, Namespace: dev.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)

	// The base holds the parsers' fixtures: a Go module, TypeScript,
	// JavaScript and Python.
	base := t.TempDir()
	if err := os.CopyFS(base, os.DirFS("../../services/projects/code/testdata")); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{projectsBaseEnv: base, "TOOLMESH_PROJECTS_HEALTH_INTERVAL": "1s"}
	getenv := func(k string) string { return env[k] }
	svc, err := domainBuild(t, "projects", getenv)(ctx, sqldbtest.Open(t, filepath.Join(t.TempDir(), "projects.db")),
		serveDeps{Getenv: getenv, Log: logging.Discard(), Temporal: tc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	projectsSrv := servertest.Start(t, svc...)
	tst, err := tasksstore.Open(ctx, sqldbtest.Open(t, filepath.Join(t.TempDir(), "tasks.db")))
	if err != nil {
		t.Fatal(err)
	}
	tasksSrv := servertest.Start(t, tasks.New(tst, tasks.Config{}).Registration())

	w := worker.New(tc, "projects", temporalclient.WorkerOptions())
	if err := workerQueues["projects"].register(w, workerDeps{
		Temporal: tc, Mesh: servertest.MeshSigner(), HTTPClient: servertest.HTTPClient(),
		Services: map[string]string{projectsv1connect.ProjectsServiceName: projectsSrv.URL},
		Getenv:   func(string) string { return "" }, Log: logging.Discard(),
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			projectsv1connect.ProjectsServiceName: projectsSrv.URL,
			tasksv1connect.TasksServiceName:       tasksSrv.URL,
		},
		DevAgent:   "agent-e2e",
		HTTPClient: edgeClient,
	})
	tools := listTools(t, s)
	for _, name := range []string{"projects_get", "projects_list", "projects_code_symbols", "projects_find_references", "projects_health_trends"} {
		if tool, ok := tools[name]; !ok || !tool.Annotations.ReadOnlyHint {
			t.Errorf("tools/list: %s missing or not read-only", name)
		}
	}
	for _, name := range []string{"projects_create", "projects_archive"} {
		if _, ok := tools[name]; !ok {
			t.Errorf("tools/list: %s missing", name)
		}
	}

	// A path out of the base is refused; one inside makes a project.
	if env := callTool(t, s, "projects_create", map[string]any{"name": "escape", "path": "../.."}); env.DomainCode != "invalid_argument" ||
		!strings.Contains(env.Message, "outside the project base") {
		t.Errorf("a project outside the base: %+v, want invalid_argument", env)
	}
	created := callTool(t, s, "projects_create", map[string]any{"name": "shop", "path": "gomod", "description": "the shop"})
	var project struct {
		Project struct{ ID, Path string } `json:"project"`
	}
	if created.Status != "ok" || json.Unmarshal(created.Data, &project) != nil || project.Project.Path != "gomod" {
		t.Fatalf("projects_create: %+v", created)
	}
	id := project.Project.ID

	// Symbols and typed references, through the edge.
	symbols := callTool(t, s, "projects_code_symbols", map[string]any{"project_id": id, "query": "add", "kind": "SYMBOL_KIND_METHOD"})
	var found struct {
		Symbols []struct{ Name, Container, Path string } `json:"symbols"`
	}
	if symbols.Status != "ok" || json.Unmarshal(symbols.Data, &found) != nil || len(found.Symbols) != 3 || symbols.Pagination == nil || symbols.Pagination.Total != 3 {
		t.Errorf("projects_code_symbols: %+v, want the three Add methods", symbols)
	}
	refs := callTool(t, s, "projects_find_references", map[string]any{"project_id": id, "symbol": "Cart.Add"})
	var used struct {
		References []struct {
			Path, Kind, Resolution string
			Line                   int
		} `json:"references"`
	}
	if refs.Status != "ok" || json.Unmarshal(refs.Data, &used) != nil || len(used.References) != 5 {
		t.Fatalf("projects_find_references: %+v, want Cart.Add's five references", refs)
	}
	for _, r := range used.References {
		if r.Resolution != "RESOLUTION_TYPED" || r.Line < 1 {
			t.Errorf("reference %+v: want a typed one with its line", r)
		}
	}

	// Tasks of the project.
	task := callTool(t, s, "tasks_create", map[string]any{"description": "fix the cart", "project_id": id})
	other := callTool(t, s, "tasks_create", map[string]any{"description": "unrelated"})
	listed := callTool(t, s, "tasks_list", map[string]any{"project_id": id})
	if task.Status != "ok" || other.Status != "ok" || listed.Pagination == nil || listed.Pagination.Total != 1 || !strings.Contains(string(listed.Data), "fix the cart") {
		t.Errorf("tasks_list of the project: %+v, want the one task of the project", listed)
	}

	// The health workflow took a snapshot at once and one each second.
	var trends struct {
		Snapshots int `json:"snapshots"`
		Metrics   []struct {
			Metric   string `json:"metric"`
			Measured bool   `json:"measured"`
			Last     string `json:"last"`
		} `json:"metrics"`
	}
	eventually(t, time.Minute, "two health snapshots", func() bool {
		env := callTool(t, s, "projects_health_trends", map[string]any{"project_id": id, "days": 1})
		return env.Status == "ok" && json.Unmarshal(env.Data, &trends) == nil && trends.Snapshots >= 2
	})
	if m := trends.Metrics[0]; m.Metric != "METRIC_FILES" || !m.Measured || m.Last != "3" {
		t.Errorf("files trend %+v, want 3 files measured", m)
	}

	// Archiving ends the health workflow.
	if env := callTool(t, s, "projects_archive", map[string]any{"project_id": id}); env.Status != "ok" {
		t.Fatalf("projects_archive: %+v", env)
	}
	err = tc.GetWorkflow(ctx, projects.HealthWorkflowID("agent-e2e", id), "").Get(ctx, nil)
	if !temporal.IsCanceledError(err) && err != nil {
		t.Errorf("the health workflow of an archived project ended with %v, want cancelled", err)
	}
	desc, err := tc.DescribeWorkflow(ctx, projects.HealthWorkflowID("agent-e2e", id), "")
	if err != nil {
		t.Fatal(err)
	}
	if status := desc.RawResponse.GetWorkflowExecutionInfo().GetStatus(); status != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Errorf("the health workflow after archiving is %v, want cancelled", status)
	}
}
