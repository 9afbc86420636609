package remoteagents

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Engine runs invocations (the remoteagents.invoke workflow of the
// toolmesh.remoteagents.v1 contract) and the pushes of inbound tasks (the
// remoteagents.inbound workflow).
type Engine interface {
	// StartInvoke starts the invocation's workflow unless one with its id
	// exists, running or ended; then it does nothing.
	StartInvoke(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) error
	// WaitInvoke blocks until the workflow ends, or ctx does, and returns
	// its outcome (a cancelled workflow's has status CANCELLED).
	WaitInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error)
	// QueryInvoke asks the running workflow where the invocation is.
	QueryInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error)
	// CancelInvoke asks the workflow to cancel; one that has ended is left
	// alone.
	CancelInvoke(ctx context.Context, workflowID string) error
	// ExtendInvoke sends the workflow the extend update under updateID (a
	// repeated id answers the first update's outcome) and returns the
	// invocation as it is. An ExtendRefusedError when the workflow refused
	// it, ErrNoWorkflow when it has ended.
	ExtendInvoke(ctx context.Context, workflowID, updateID string, up *remoteagentsv1.ExtendInvocationUpdate) (*remoteagentsv1.InvokeOutcome, error)
	// NotifyInbound tells the inbound task's workflow that the task or its
	// push configs changed, starting it when it is not running.
	NotifyInbound(ctx context.Context, in *remoteagentsv1.InboundWorkflowInput) error
}

// ErrNoWorkflow reports that an invocation's workflow does not exist or
// has ended.
var ErrNoWorkflow = workflowrun.ErrNoWorkflow

// SearchStatusWorking is the ToolmeshStatus of a running invocation.
const SearchStatusWorking = "working"

func invokeWorkflow() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&remoteagentsv1.InvokeWorkflowInput{})
}

// WorkflowID is the id of an invocation's workflow:
// "invoke/<agent>/<invocation id>".
func WorkflowID(agent, invocationID string) string {
	return invokeWorkflow().IDPrefix + "/" + agent + "/" + invocationID
}

func inboundWorkflow() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&remoteagentsv1.InboundWorkflowInput{})
}

// InboundWorkflowID is the id of an inbound task's workflow:
// "a2a-task/<agent>/<task id>".
func InboundWorkflowID(agent, taskID string) string {
	return inboundWorkflow().IDPrefix + "/" + agent + "/" + taskID
}

// ExtendRefusedError is the invoke workflow's refusal of an extension: the
// invocation has ended, or the expiry is not later than its own.
type ExtendRefusedError struct{ Message string }

func (e *ExtendRefusedError) Error() string { return e.Message }
