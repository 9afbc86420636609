package projects_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/workers/projects"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

// dial connects to the shared dev server the way a worker does.
func dial(t *testing.T) client.Client { return workflowtest.Dial(t, temporalServer.Server(t)) }

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break the health workflows in flight fails
// here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, projects.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { projects.Register(r, &projects.Activities{}) })
}

// runHealth starts a health workflow on the dev server, its activity
// calling f every interval.
func runHealth(t *testing.T, c client.Client, id string) client.WorkflowRun {
	t.Helper()
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: projects.TaskQueue()}, "projects.health",
		&projectsv1.HealthInput{ProjectId: projectID, AgentId: "agent-a", Interval: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// waitFor polls cond until it holds, for at most a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Once against a real dev server: the workflow takes its first snapshot
// at once through the real activity, waits its interval, and ends when
// cancelled (the project archived) or when a snapshot finds the project
// archived.
func TestHealthOnADevServer(t *testing.T) {
	temporaltest.SkipShort(t)
	ctx := context.Background()
	c := dial(t)
	f, acts := startFakeProjects(t, time.Second)
	workflowtest.StartWorker(t, c, projects.TaskQueue(), func(r worker.Registry) { projects.Register(r, acts) })

	run := runHealth(t, c, "project-health/agent-a/dev-server")
	waitFor(t, "two snapshots a second apart", func() bool { return f.snapshots() >= 2 })
	f.set(projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED, nil)
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("the workflow of an archived project ended with %v, want completed", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := map[string]bool{}
	for _, k := range f.keys {
		if keys[k] {
			t.Errorf("two snapshots under the key %s", k)
		}
		keys[k] = true
	}
}

// TestRecordHistories adds the history of each path of the health workflow,
// open and closed, to testdata/histories: the real activity over a fake
// ProjectsService, on a dev server. It never overwrites a history:
//
//	go test ./workers/projects -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	ctx := context.Background()
	c := dial(t)
	f, acts := startFakeProjects(t, time.Second)
	workflowtest.StartWorker(t, c, projects.TaskQueue(), func(r worker.Registry) { projects.Register(r, acts) })
	capture := func(scenario string, next time.Duration, drive func(id string, run client.WorkflowRun)) {
		t.Run(scenario, func(t *testing.T) {
			f.set(projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, nil)
			f.mu.Lock()
			f.next = next
			f.mu.Unlock()
			id := "project-health/agent-a/" + scenario
			run := runHealth(t, c, id)
			drive(id, run)
			if err := workflowtest.WaitIdle(ctx, c, id, run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			workflowtest.Record(t, c, *record, scenario, id, run.GetRunID())
		})
	}
	capture("waiting", time.Hour, func(id string, run client.WorkflowRun) {
		before := f.snapshots()
		waitFor(t, "the first snapshot", func() bool { return f.snapshots() > before })
	})
	capture("archived", time.Second, func(id string, run client.WorkflowRun) {
		before := f.snapshots()
		waitFor(t, "two snapshots", func() bool { return f.snapshots() >= before+2 })
		f.set(projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED, nil)
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	capture("cancelled", time.Hour, func(id string, run client.WorkflowRun) {
		before := f.snapshots()
		waitFor(t, "the first snapshot", func() bool { return f.snapshots() > before })
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		_ = run.Get(ctx, nil)
	})
}
