package temporaltest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// devServer is the one dev server of this test binary.
var devServer temporaltest.Shared

func TestMain(m *testing.M) { os.Exit(devServer.Run(m)) }

// The test workflow keeps a running total: the "add" update adds a positive
// number and returns the total, "finish" ends the workflow, which then
// reports the total through an activity.
const (
	updateAdd    = "add"
	updateFinish = "finish"
)

func totalWorkflow(ctx workflow.Context) (string, error) {
	total, done := 0, false
	if err := workflow.SetUpdateHandlerWithOptions(ctx, updateAdd,
		func(ctx workflow.Context, n int) (int, error) {
			total += n
			return total, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n int) error {
			if n <= 0 {
				return fmt.Errorf("add %d: must be positive", n)
			}
			return nil
		}},
	); err != nil {
		return "", err
	}
	if err := workflow.SetUpdateHandler(ctx, updateFinish, func(ctx workflow.Context) error {
		done = true
		return nil
	}); err != nil {
		return "", err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, keyword(workflowcontract.SearchAttrStatus).ValueSet("waiting")); err != nil {
		return "", err
	}
	if err := workflow.Await(ctx, func() bool { return done }); err != nil {
		return "", err
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var report string
	err := workflow.ExecuteActivity(ctx, reportTotal, total).Get(ctx, &report)
	return report, err
}

func keyword(name string) temporal.SearchAttributeKeyKeyword {
	return temporal.NewSearchAttributeKeyKeyword(name)
}

func reportTotal(ctx context.Context, total int) (string, error) {
	return fmt.Sprintf("total %d (activity %s)", total, activity.GetInfo(ctx).ActivityType.Name), nil
}

// startWorker runs a worker for the test workflow on a queue of its own.
func startWorker(t *testing.T, c client.Client) string {
	t.Helper()
	queue := "temporaltest-" + strings.ReplaceAll(t.Name(), "/", "-")
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(totalWorkflow)
	w.RegisterActivity(reportTotal)
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return queue
}

func update[T any](t *testing.T, c client.Client, workflowID, name string, args ...any) (T, error) {
	t.Helper()
	var got T
	h, err := c.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return got, err
	}
	err = h.Get(t.Context(), &got)
	return got, err
}

func TestWorkflowWithUpdates(t *testing.T) {
	c := devServer.Server(t).Client(t)
	queue := startWorker(t, c)

	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
		ID: "total-" + t.Name(), TaskQueue: queue, EnableEagerStart: true,
	}, totalWorkflow)
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	for _, step := range []struct{ add, want int }{{2, 2}, {3, 5}} {
		got, err := update[int](t, c, run.GetID(), updateAdd, step.add)
		if err != nil || got != step.want {
			t.Fatalf("update add %d = %d, %v; want %d", step.add, got, err, step.want)
		}
	}
	if got, err := update[int](t, c, run.GetID(), updateAdd, -1); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Fatalf("update add -1 = %d, %v; want rejection by the validator", got, err)
	}
	if _, err := update[any](t, c, run.GetID(), updateFinish); err != nil {
		t.Fatalf("update finish: %v", err)
	}
	var report string
	if err := run.Get(t.Context(), &report); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if want := "total 5 (activity reportTotal)"; report != want {
		t.Errorf("workflow result = %q, want %q (the rejected update must not count)", report, want)
	}
}

// Update-with-start is how a multi-round elicitation starts its workflow and
// delivers a round in one call; a second call with the same id reaches the
// same running workflow.
func TestUpdateWithStart(t *testing.T) {
	c := devServer.Server(t).Client(t)
	queue := startWorker(t, c)
	id := "uws-" + t.Name()

	var runIDs []string
	for _, step := range []struct{ add, want int }{{1, 1}, {4, 5}} {
		op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: id, TaskQueue: queue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, totalWorkflow)
		h, err := c.UpdateWithStartWorkflow(t.Context(), client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: op,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateName: updateAdd, Args: []any{step.add},
				WaitForStage: client.WorkflowUpdateStageCompleted,
			},
		})
		if err != nil {
			t.Fatalf("update-with-start add %d: %v", step.add, err)
		}
		var got int
		if err := h.Get(t.Context(), &got); err != nil || got != step.want {
			t.Fatalf("update-with-start add %d = %d, %v; want %d", step.add, got, err, step.want)
		}
		run, err := op.Get(t.Context())
		if err != nil {
			t.Fatalf("start operation: %v", err)
		}
		runIDs = append(runIDs, run.GetRunID())
	}
	if runIDs[0] != runIDs[1] {
		t.Errorf("update-with-start started runs %v, want one run reused", runIDs)
	}
	if _, err := update[any](t, c, id, updateFinish); err != nil {
		t.Fatalf("update finish: %v", err)
	}
	// The workflow ends before the test does: the dev server outlives the
	// test under -count=N, and a run still open would take the next run's
	// update-with-start.
	var report string
	if err := c.GetWorkflow(t.Context(), id, runIDs[0]).Get(t.Context(), &report); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if want := "total 5 (activity reportTotal)"; report != want {
		t.Errorf("workflow result = %q, want %q", report, want)
	}
}

// Operators find toolmesh workflows by the custom search attributes.
func TestSearchAttributes(t *testing.T) {
	c := devServer.Server(t).Client(t)
	queue := startWorker(t, c)
	agent := fmt.Sprintf("agent-%d", time.Now().UnixNano())

	var ids []string
	for i, tool := range []string{"owner_ask", "tasks_create"} {
		run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
			ID: fmt.Sprintf("sa-%s-%d", agent, i), TaskQueue: queue,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				keyword(workflowcontract.SearchAttrAgent).ValueSet(agent),
				keyword(workflowcontract.SearchAttrTool).ValueSet(tool),
				keyword(workflowcontract.SearchAttrKind).ValueSet("WRITE")),
		}, totalWorkflow)
		if err != nil {
			t.Fatalf("start workflow: %v", err)
		}
		ids = append(ids, run.GetID())
	}
	// A workflow of another agent must not match.
	if _, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
		ID: "sa-other-" + agent, TaskQueue: queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(keyword(workflowcontract.SearchAttrAgent).ValueSet(agent + "-other")),
	}, totalWorkflow); err != nil {
		t.Fatalf("start workflow: %v", err)
	}

	// Visibility is eventually consistent: wait for the workflows to upsert
	// their status and for the records to be listed.
	query := fmt.Sprintf("%s = '%s' AND %s = 'waiting'", workflowcontract.SearchAttrAgent, agent, workflowcontract.SearchAttrStatus)
	want := map[string]string{ids[0]: "owner_ask", ids[1]: "tasks_create"}
	var got map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("list %q: %v", query, err)
		}
		got = map[string]string{}
		for _, e := range resp.GetExecutions() {
			var tool string
			if p := e.GetSearchAttributes().GetIndexedFields()[workflowcontract.SearchAttrTool]; p != nil {
				if err := converter.GetDefaultDataConverter().FromPayload(p, &tool); err != nil {
					t.Fatalf("decode %s: %v", workflowcontract.SearchAttrTool, err)
				}
			}
			got[e.GetExecution().GetWorkflowId()] = tool
		}
		if cmp.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list %q (-want +got):\n%s", query, diff)
	}
}

func TestBinaryMissingSaysMakeTools(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pkgDir := filepath.Join(dir, "internal", "x")
	if err := os.MkdirAll(pkgDir, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := temporaltest.Binary(pkgDir)
	if err == nil || !strings.Contains(err.Error(), "run make tools") {
		t.Fatalf("Binary in a module without bin/temporal: err = %v, want it to say run make tools", err)
	}
}

// BenchmarkRoundTrips measures, against the dev server as configured by
// temporaldev, the Temporal round trips a multi-round elicitation makes: an
// update on a running workflow (a middle round), update-with-start (a first
// round) and a final round (an update that ends the workflow, which runs an
// activity and completes).
func BenchmarkRoundTrips(b *testing.B) {
	c := devServer.Server(b).Client(b)
	queue := "bench"
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(totalWorkflow)
	w.RegisterActivity(reportTotal)
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	ctx := context.Background()
	start := func(id string) client.WorkflowRun {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, totalWorkflow)
		if err != nil {
			b.Fatal(err)
		}
		return run
	}
	updateDone := func(opts client.UpdateWorkflowOptions) {
		opts.WaitForStage = client.WorkflowUpdateStageCompleted
		h, err := c.UpdateWorkflow(ctx, opts)
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
	}

	b.Run("update", func(b *testing.B) {
		run := start(fmt.Sprintf("bench-update-%d", time.Now().UnixNano()))
		timed(b, func(int) {
			updateDone(client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: updateAdd, Args: []any{1}})
		})
	})
	b.Run("update-with-start", func(b *testing.B) {
		prefix := fmt.Sprintf("bench-uws-%d", time.Now().UnixNano())
		timed(b, func(i int) {
			op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
				ID: fmt.Sprintf("%s-%d", prefix, i), TaskQueue: queue,
				WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			}, totalWorkflow)
			h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: op,
				UpdateOptions: client.UpdateWorkflowOptions{
					UpdateName: updateAdd, Args: []any{1}, WaitForStage: client.WorkflowUpdateStageCompleted,
				},
			})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("final-round", func(b *testing.B) {
		prefix := fmt.Sprintf("bench-final-%d", time.Now().UnixNano())
		runs := make([]client.WorkflowRun, b.N)
		for i := range runs {
			runs[i] = start(fmt.Sprintf("%s-%d", prefix, i))
		}
		timed(b, func(i int) {
			updateDone(client.UpdateWorkflowOptions{WorkflowID: runs[i].GetID(), UpdateName: updateFinish})
			if err := runs[i].Get(ctx, nil); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// timed runs op b.N times and reports the median and 99th percentile.
func timed(b *testing.B, op func(i int)) {
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		op(i)
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
