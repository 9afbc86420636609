package workflows

import (
	"context"
	"errors"
	"strings"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// Engine runs workflow runs as workflows of the workflows.run contract
// (RunWorkflowInput). TemporalEngine implements it with a Temporal client;
// the service's tests use an in-memory stand-in.
type Engine interface {
	// StartRun starts the run's workflow unless one with its id exists,
	// running or ended; then it does nothing.
	StartRun(ctx context.Context, in *workflowsv1.RunWorkflowInput) error
	// WaitRun blocks until the workflow ends and returns its outcome (a
	// cancelled workflow's has status RUN_STATUS_CANCELLED), or until ctx
	// ends. It watches the workflow's result, not a timer.
	WaitRun(ctx context.Context, workflowID string) (*workflowsv1.RunOutcome, error)
	// QueryRun asks the running workflow for the run so far (its state
	// query).
	QueryRun(ctx context.Context, workflowID string) (*workflowsv1.RunOutcome, error)
	// ExtendRun delivers u as the extend update (idempotent per updateID)
	// and returns the run so far once the workflow took it: an
	// *ExtendRejectedError when the workflow's validator refuses it,
	// ErrNoWorkflow when the workflow has ended.
	ExtendRun(ctx context.Context, workflowID, updateID string, u *workflowsv1.ExtendUpdate) (*workflowsv1.RunOutcome, error)
	// CancelRun asks the workflow to cancel; one that has ended is left
	// alone.
	CancelRun(ctx context.Context, workflowID string) error
}

// ErrNoWorkflow reports that a run's workflow does not exist or has ended.
var ErrNoWorkflow = errors.New("the run's workflow has ended or does not exist")

// ExtendRejectedError is the extend update's validator refusing it; the
// workflow's history is unchanged.
type ExtendRejectedError struct {
	Reason  workflowsv1.ExtendRejection
	Message string
}

func (e *ExtendRejectedError) Error() string { return e.Message }

// runWorkflow is the run workflow's contract.
func runWorkflow() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&workflowsv1.RunWorkflowInput{})
}

// WorkflowID is the id of a run's workflow, "workflow-run/<agent>/<run id>".
func WorkflowID(agent, runID string) string {
	return runWorkflow().IDPrefix + "/" + agent + "/" + runID
}

// ParseWorkflowID splits a run workflow id into the agent and the run id.
func ParseWorkflowID(id string) (agent, runID string, ok bool) {
	rest, ok := strings.CutPrefix(id, runWorkflow().IDPrefix+"/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}
