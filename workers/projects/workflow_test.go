package projects_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/workers/projects"
)

// start is when every test workflow starts (the test clock).
var start = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

const projectID = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1"

// wfEnv is one health workflow under the Temporal test suite (time
// skipping), its activity answered by answer and each call recorded with
// the workflow time it was made at.
type wfEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu    sync.Mutex
	calls []call
}

type call struct {
	at  time.Duration // since start
	key string
}

func newWfEnv(t *testing.T, answer func(n int, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error)) *wfEnv {
	t.Helper()
	env := &wfEnv{TestWorkflowEnvironment: workflowtest.NewEnv()}
	env.SetStartTime(start)
	projects.Register(env, &projects.Activities{})
	env.OnActivity(projects.ActivityRecordHealth, mock.Anything, mock.Anything).Return(
		func(_ context.Context, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
			env.mu.Lock()
			n := len(env.calls)
			env.calls = append(env.calls, call{env.Now().Sub(start), req.GetKey()})
			env.mu.Unlock()
			return answer(n, req)
		})
	return env
}

func (env *wfEnv) run(interval time.Duration) {
	env.ExecuteWorkflow("projects.health", &projectsv1.HealthInput{ProjectId: projectID, AgentId: "agent-a", Interval: durationpb.New(interval)})
}

// times are the workflow times of the activity calls.
func (env *wfEnv) times() []time.Duration {
	env.mu.Lock()
	defer env.mu.Unlock()
	var out []time.Duration
	for _, c := range env.calls {
		out = append(out, c.at)
	}
	return out
}

func active(next time.Duration) *projectsv1.RecordHealthResponse {
	return &projectsv1.RecordHealthResponse{
		Snapshot: &projectsv1.HealthSnapshot{ProjectId: projectID},
		Status:   projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, NextAfter: durationpb.New(next),
	}
}

func wantTimes(t *testing.T, got []time.Duration, want ...time.Duration) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("snapshots at %v, want at %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("snapshots at %v, want at %v", got, want)
		}
	}
}

// A snapshot at once, then one a day, until the project is archived (the
// service cancels the workflow); each under a key of its own.
func TestSnapshotsEachIntervalUntilCancelled(t *testing.T) {
	env := newWfEnv(t, func(int, *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
		return active(24 * time.Hour), nil
	})
	env.RegisterDelayedCallback(env.CancelWorkflow, 84*time.Hour)
	env.run(24 * time.Hour)
	if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
		t.Fatalf("workflow: completed %v, error %v; want cancelled", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	wantTimes(t, env.times(), 0, 24*time.Hour, 48*time.Hour, 72*time.Hour)
	keys := map[string]bool{}
	for _, c := range env.calls {
		if keys[c.key] || !strings.HasPrefix(c.key, "default-test-workflow-id/") {
			t.Errorf("snapshot key %q repeats or does not name the workflow", c.key)
		}
		keys[c.key] = true
	}
}

// The service names the interval: a changed setting applies from the next
// snapshot on.
func TestTheServiceNamesTheInterval(t *testing.T) {
	env := newWfEnv(t, func(n int, _ *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
		if n == 2 {
			return &projectsv1.RecordHealthResponse{Status: projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED}, nil
		}
		return active(6 * time.Hour), nil
	})
	env.run(time.Hour)
	if err := env.GetWorkflowError(); !env.IsWorkflowCompleted() || err != nil {
		t.Fatalf("workflow: completed %v, error %v; want it ended by the archived project", env.IsWorkflowCompleted(), err)
	}
	wantTimes(t, env.times(), 0, 6*time.Hour, 12*time.Hour)
}

// A project that is gone ends the workflow at once; a failed snapshot is
// skipped (after its retries) and the next is taken an interval later.
func TestGoneEndsAndFailedIsSkipped(t *testing.T) {
	gone := newWfEnv(t, func(int, *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
		return nil, temporal.NewNonRetryableApplicationError("project not found", projects.ErrProjectGone, nil)
	})
	gone.run(time.Hour)
	if err := gone.GetWorkflowError(); !gone.IsWorkflowCompleted() || err != nil || len(gone.times()) != 1 {
		t.Errorf("a gone project: completed %v, error %v, %d calls; want one call, then the end", gone.IsWorkflowCompleted(), err, len(gone.times()))
	}

	var firstKey string
	env := newWfEnv(t, func(n int, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
		if n == 0 {
			firstKey = req.GetKey()
		}
		switch {
		case req.GetKey() == firstKey:
			return nil, errors.New("projects service unavailable")
		case n > 20:
			return &projectsv1.RecordHealthResponse{Status: projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED}, nil
		}
		return active(3 * time.Hour), nil
	})
	env.run(3 * time.Hour)
	if err := env.GetWorkflowError(); !env.IsWorkflowCompleted() || err != nil {
		t.Fatalf("workflow: completed %v, error %v", env.IsWorkflowCompleted(), err)
	}
	times := env.times()
	if len(times) < projects.SnapshotAttempts+2 {
		t.Fatalf("snapshots at %v: want the failed one's attempts, then more", times)
	}
	// The failed snapshot was tried SnapshotAttempts times; the next one is
	// an interval after its last attempt.
	lastTry, next := times[projects.SnapshotAttempts-1], times[projects.SnapshotAttempts]
	if lastTry > time.Hour || next != lastTry+3*time.Hour {
		t.Errorf("snapshots at %v: want %d attempts, then one 3h after the last", times, projects.SnapshotAttempts)
	}
}

// The workflow continues as new after SnapshotsPerRun snapshots, with the
// interval it last learnt.
func TestContinuesAsNew(t *testing.T) {
	env := newWfEnv(t, func(int, *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
		return active(time.Minute), nil
	})
	env.run(time.Hour)
	var cont *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &cont) {
		t.Fatalf("workflow error %v, want continue-as-new", err)
	}
	if n := len(env.times()); n != projects.SnapshotsPerRun {
		t.Errorf("%d snapshots before continuing as new, want %d", n, projects.SnapshotsPerRun)
	}
	if cont.WorkflowType.Name != "projects.health" {
		t.Errorf("continues as %s, want projects.health", cont.WorkflowType.Name)
	}
}
