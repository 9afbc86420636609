package workflowrun_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
)

// fairnessRun is a run that does nothing: its latency is its wait for a
// worker.
func fairnessRun(workflow.Context) error { return nil }

// TestFairnessMeasurement measures what fairness keys do for an agent
// while another has a backlog: agent A starts 500 runs on a queue no
// worker polls yet, agent B then starts 20, and a worker that runs one
// workflow task at a time is started. B's runs' latencies (start to
// completion) are reported with and without the agent as the fairness key
// (workflowrun.Start sets it); the dev server runs with fairness on
// (internal/temporaldev). Nothing is asserted on the figures: they depend
// on the machine. Run with -v to read them.
func TestFairnessMeasurement(t *testing.T) {
	temporaltest.SkipShort(t)
	c := temporaltest.Start(t).Client(t)
	for _, keyed := range []bool{false, true} {
		p50, p99, backlog := measureFairness(t, c, keyed)
		t.Logf("fairness keys %-5v: agent A's backlog %d runs; agent B's 20 runs: p50 %v, p99 %v", keyed, backlog, p50, p99)
	}
}

func measureFairness(t *testing.T, c client.Client, keyed bool) (p50, p99 time.Duration, backlog int) {
	t.Helper()
	const aRuns, bRuns = 500, 20
	queue := fmt.Sprintf("fairness-%v", keyed)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	start := func(agent string, i int) (client.WorkflowRun, time.Time) {
		opts := client.StartWorkflowOptions{ID: fmt.Sprintf("%s/%s/%d", queue, agent, i), TaskQueue: queue}
		if keyed {
			opts.Priority = temporal.Priority{FairnessKey: agent}
		}
		at := time.Now()
		run, err := c.ExecuteWorkflow(ctx, opts, fairnessRun)
		if err != nil {
			t.Fatalf("start %s: %v", opts.ID, err)
		}
		return run, at
	}
	var aRunsStarted []client.WorkflowRun
	for i := range aRuns {
		run, _ := start("agent-a", i)
		aRunsStarted = append(aRunsStarted, run)
	}
	type started struct {
		run client.WorkflowRun
		at  time.Time
	}
	var bStarted []started
	for i := range bRuns {
		run, at := start("agent-b", i)
		bStarted = append(bStarted, started{run, at})
	}
	// The backlog is there: no worker has polled the queue yet.
	backlog = aRuns

	w := worker.New(c, queue, worker.Options{MaxConcurrentWorkflowTaskExecutionSize: 2, MaxConcurrentWorkflowTaskPollers: 2})
	w.RegisterWorkflow(fairnessRun)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	latencies := make([]time.Duration, bRuns)
	var wg sync.WaitGroup
	for i, s := range bStarted {
		wg.Go(func() {
			if err := s.run.Get(ctx, nil); err != nil {
				t.Errorf("agent B's run %d: %v", i, err)
			}
			latencies[i] = time.Since(s.at)
		})
	}
	wg.Wait()
	for _, r := range aRunsStarted {
		if err := r.Get(ctx, nil); err != nil {
			t.Fatalf("agent A's run %s: %v", r.GetID(), err)
		}
	}
	slices.Sort(latencies)
	return latencies[len(latencies)/2], latencies[len(latencies)*99/100], backlog
}
