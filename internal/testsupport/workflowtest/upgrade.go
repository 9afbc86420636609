package workflowtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
)

// ChangeID is the change id of the change Upgrade makes to a workflow.
const ChangeID = "workflowtest-new-step"

// StepActivity is the activity that change adds.
const StepActivity = "workflowtest.new-step"

// Patch is how the change is deployed.
type Patch int

const (
	// Unpatched deploys the change as it is: a run in flight replays into
	// a command its history does not have, and fails.
	Unpatched Patch = iota
	// Patched guards the change with GetVersion(ChangeID, DefaultVersion,
	// 1): runs in flight keep the old path, new runs take the new one.
	Patched
	// Retired keeps only the new path, GetVersion(ChangeID, 1, 1): a run
	// from before the change is refused by name.
	Retired
)

// Change returns wf changed the way a contributor may change a workflow: it
// gains a new activity (StepActivity) that runs beside the workflow's own
// work, scheduled before anything else and awaited before the workflow
// returns (as the ask workflow notifies its owner). Scheduling it first is
// the hardest case for a run in flight: every such run is past that point.
func Change[In, Out any](wf func(workflow.Context, In) (Out, error), p Patch) func(workflow.Context, In) (Out, error) {
	return func(ctx workflow.Context, in In) (Out, error) {
		step := true
		switch p {
		case Patched:
			step = workflow.GetVersion(ctx, ChangeID, workflow.DefaultVersion, 1) == 1
		case Retired:
			workflow.GetVersion(ctx, ChangeID, 1, 1)
		}
		var done workflow.Future
		if step {
			done = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second}), StepActivity)
		}
		out, err := wf(ctx, in)
		if done != nil {
			if serr := done.Get(ctx, nil); serr != nil && err == nil {
				return out, serr
			}
		}
		return out, err
	}
}

// Case is one workflow for Upgrade.
type Case[In, Out any] struct {
	// Workflow is the workflow's type name.
	Workflow string
	// Code is the workflow's current code.
	Code func(workflow.Context, In) (Out, error)
	// Activities registers the activities the workflow calls.
	Activities func(worker.ActivityRegistry)
	// Start starts a run on queue and brings it to where it waits for the
	// outside world (an answer, an approval, the next round). Upgrade then
	// waits until it is idle.
	Start func(ctx context.Context, c client.Client, queue string) (client.WorkflowRun, error)
	// Finish sends what the run waits for and returns nil when the run then
	// ended as it should.
	Finish func(ctx context.Context, c client.Client, run client.WorkflowRun) error
}

// Upgrade shows that a change deployed as docs/temporal-versioning.md says keeps the
// runs in flight working, and that the same change without GetVersion
// breaks them:
//
//  1. Two runs start on the current code, one on each of two task queues,
//     and are left waiting.
//  2. Their workers stop. Workers with the changed code (Change) take over
//     the queues: patched on the first, unpatched on the second.
//  3. The first run completes on the patched code without the new step;
//     the second fails with a non-determinism error.
//  4. A new run on the patched code takes the new step and completes.
//  5. Retiring the patch refuses the first run's history by name and
//     replays the new run's.
func Upgrade[In, Out any](t *testing.T, c client.Client, tc Case[In, Out]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	queue := "upgrade-" + strings.ToLower(tc.Workflow) + "-" + randomSuffix()
	patchedQueue, unpatchedQueue := queue+"-patched", queue+"-unpatched"
	var steps atomic.Int32
	run := func(q string, code func(workflow.Context, In) (Out, error)) worker.Worker {
		return StartWorker(t, c, q, func(w worker.Registry) {
			w.RegisterWorkflowWithOptions(code, workflow.RegisterOptions{Name: tc.Workflow})
			tc.Activities(w)
			w.RegisterActivityWithOptions(func(context.Context) error {
				steps.Add(1)
				return nil
			}, activity.RegisterOptions{Name: StepActivity})
		})
	}
	start := func(q string) client.WorkflowRun {
		t.Helper()
		r, err := tc.Start(ctx, c, q)
		if err != nil {
			t.Fatalf("start %s on %s: %v", tc.Workflow, q, err)
		}
		if err := WaitIdle(ctx, c, r.GetID(), r.GetRunID()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	register := func(p Patch) func(worker.WorkflowRegistry) {
		return func(r worker.WorkflowRegistry) {
			r.RegisterWorkflowWithOptions(Change(tc.Code, p), workflow.RegisterOptions{Name: tc.Workflow})
		}
	}

	// 1. Runs in flight on the current code.
	old := []worker.Worker{run(patchedQueue, tc.Code), run(unpatchedQueue, tc.Code)}
	inFlight, broken := start(patchedQueue), start(unpatchedQueue)

	// 2. The change is deployed.
	for _, w := range old {
		w.Stop()
	}
	run(patchedQueue, Change(tc.Code, Patched))
	run(unpatchedQueue, Change(tc.Code, Unpatched))

	// 3. The run in flight completes on the patched code, on its old path.
	if err := tc.Finish(ctx, c, inFlight); err != nil {
		t.Fatalf("the run in flight failed on the patched code: %v", err)
	}
	if n := steps.Load(); n != 0 {
		t.Errorf("the run in flight took the new step (%d times); it must keep its old path", n)
	}
	// Without GetVersion the same change breaks it.
	if err := tc.Finish(ctx, c, broken); err == nil {
		t.Error("the run in flight completed on the unpatched change; the change must break it, or this test proves nothing")
	}
	if err := broken.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), "[TMPRL1100]") {
		t.Errorf("the run in flight on the unpatched change ended with %v, want a non-determinism failure", err)
	}

	// 4. A new run takes the new path.
	fresh := start(patchedQueue)
	if n := steps.Load(); n != 1 {
		t.Errorf("a new run on the patched code took the new step %d times, want 1", n)
	}
	if err := tc.Finish(ctx, c, fresh); err != nil {
		t.Fatalf("a new run failed on the patched code: %v", err)
	}

	// 5. The patch retired: the old run's history is refused by name, the
	// new run's replays, and both replay on the patched code.
	oldHistory, err := History(ctx, c, inFlight.GetID(), inFlight.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	newHistory, err := History(ctx, c, fresh.GetID(), fresh.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	if err := Replay(oldHistory, register(Retired)); err == nil {
		t.Error("the retired patch replayed a run from before the change")
	} else if _, ok := RetiredChange(err, ChangeID); !ok {
		t.Errorf("the retired patch refused a run from before the change with %v, want its change id named", err)
	}
	for name, h := range map[string]*historypb.History{"the old run": oldHistory, "the new run": newHistory} {
		if err := Replay(h, register(Patched)); err != nil {
			t.Errorf("%s does not replay on the patched code: %v", name, err)
		}
	}
	if err := Replay(newHistory, register(Retired)); err != nil {
		t.Errorf("the new run does not replay once the patch is retired: %v", err)
	}
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StartWorker starts a worker on queue with what register adds and the
// options of every toolmesh worker, except that a run that hits a
// non-determinism error fails at once instead of retrying its task forever
// (worker.BlockWorkflow, which production keeps): a test sees the failure
// instead of hanging. The worker stops when tb's test ends.
func StartWorker(tb testing.TB, c client.Client, queue string, register func(worker.Registry)) worker.Worker {
	tb.Helper()
	opts := temporalclient.WorkerOptions()
	opts.WorkflowPanicPolicy = worker.FailWorkflow
	w := worker.New(c, queue, opts)
	register(w)
	if err := w.Start(); err != nil {
		tb.Fatalf("start worker on %s: %v", queue, err)
	}
	tb.Cleanup(w.Stop)
	return w
}

// Dial connects to a dev server the way every toolmesh process does
// (temporalclient.Dial); the client is closed when tb's test ends.
func Dial(tb testing.TB, s *temporaltest.Server) client.Client {
	tb.Helper()
	c, err := temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: s.HostPort, Namespace: s.Namespace}, logging.Discard())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
