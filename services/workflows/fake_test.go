package workflows_test

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/services/workflows"
)

// fakeEngine stands in for Temporal in the service's tests: it keeps each
// started run in memory and ends it when the test says. It checks
// extensions as the real workflow's validator does. The workflow itself is
// tested in workers/workflows, and the two together against a real
// Temporal dev server in cmd/toolmesh.
type fakeEngine struct {
	mu      sync.Mutex
	runs    map[string]*fakeRun // by workflow id
	starts  int
	extends []*workflowsv1.ExtendUpdate
}

type fakeRun struct {
	in      *workflowsv1.RunWorkflowInput
	outcome *workflowsv1.RunOutcome
	done    chan struct{}
}

func newFakeEngine() *fakeEngine { return &fakeEngine{runs: map[string]*fakeRun{}} }

func (f *fakeEngine) StartRun(_ context.Context, in *workflowsv1.RunWorkflowInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	id := workflows.WorkflowID(in.GetStarter().GetAgent(), in.GetRunId())
	if _, ok := f.runs[id]; !ok {
		f.runs[id] = &fakeRun{in: in, done: make(chan struct{}),
			outcome: &workflowsv1.RunOutcome{RunId: in.GetRunId(), Status: workflowsv1.RunStatus_RUN_STATUS_RUNNING, Deadline: in.GetDeadline()}}
	}
	return nil
}

// forget drops the workflow of a run, as if it had never started.
func (f *fakeEngine) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.runs, id)
}

func (f *fakeEngine) get(id string) *fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

// input is the input the run with workflow id was started with.
func (f *fakeEngine) input(id string) *workflowsv1.RunWorkflowInput {
	if r := f.get(id); r != nil {
		return r.in
	}
	return nil
}

// end ends a run as the workflow would.
func (f *fakeEngine) end(id string, o *workflowsv1.RunOutcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r == nil || workflows.Ended(r.outcome.GetStatus()) {
		return
	}
	o.RunId, o.EndTime, o.Deadline = r.in.GetRunId(), timestamppb.Now(), r.outcome.GetDeadline()
	r.outcome = o
	close(r.done)
}

func (f *fakeEngine) WaitRun(ctx context.Context, id string) (*workflowsv1.RunOutcome, error) {
	r := f.get(id)
	if r == nil {
		return nil, workflows.ErrNoWorkflow
	}
	select {
	case <-r.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return r.outcome, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeEngine) QueryRun(_ context.Context, id string) (*workflowsv1.RunOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r == nil {
		return nil, workflows.ErrNoWorkflow
	}
	return r.outcome, nil
}

func (f *fakeEngine) ExtendRun(_ context.Context, id, _ string, u *workflowsv1.ExtendUpdate) (*workflowsv1.RunOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r == nil || workflows.Ended(r.outcome.GetStatus()) {
		return nil, &workflows.ExtendRejectedError{Reason: workflowsv1.ExtendRejection_EXTEND_REJECTION_NOT_RUNNING, Message: "the run has ended"}
	}
	if !u.GetDeadline().AsTime().After(r.outcome.GetDeadline().AsTime()) || u.GetDeadline().AsTime().After(r.in.GetMaxDeadline().AsTime()) {
		return nil, &workflows.ExtendRejectedError{Reason: workflowsv1.ExtendRejection_EXTEND_REJECTION_INVALID_DEADLINE, Message: "not a later deadline within the maximum"}
	}
	r.outcome.Deadline = u.GetDeadline()
	f.extends = append(f.extends, u)
	return r.outcome, nil
}

func (f *fakeEngine) CancelRun(_ context.Context, id string) error {
	f.end(id, &workflowsv1.RunOutcome{Status: workflowsv1.RunStatus_RUN_STATUS_CANCELLED})
	return nil
}

// waitStarted waits until the run's workflow has been started.
func (f *fakeEngine) waitStarted(ctx context.Context, id string) *workflowsv1.RunWorkflowInput {
	for {
		if r := f.get(id); r != nil {
			return r.in
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}
