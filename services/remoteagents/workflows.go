package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Workflows runs invocations: the remoteagents.invoke workflow of the
// toolmesh.remoteagents.v1 contract.
type Workflows interface {
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

// TemporalWorkflows runs invocations on Temporal.
type TemporalWorkflows struct {
	c client.Client
}

var _ Workflows = (*TemporalWorkflows)(nil)

// NewTemporalWorkflows returns Workflows over a connected client (one that
// encodes payloads as protobuf JSON: internal/temporalclient).
func NewTemporalWorkflows(c client.Client) *TemporalWorkflows { return &TemporalWorkflows{c: c} }

// StartInvoke implements Workflows.
func (t *TemporalWorkflows) StartInvoke(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) error {
	id := WorkflowID(in.GetAgentId(), in.GetInvocationId())
	return workflowrun.Once(ctx, t.c, workflowrun.Start{
		Contract: invokeWorkflow(),
		ID:       id,
		Agent:    in.GetAgentId(),
		Tool:     in.GetTool(),
		Status:   SearchStatusWorking,
		Summary:  fmt.Sprintf("%s invokes %s", in.GetAgentId(), in.GetUrl()),
		Details: fmt.Sprintf("**%s** sent this message to the A2A agent at %s (invocation depth %d):\n\n%s\n\n"+
			"Cancel the workflow to cancel the remote task.", in.GetAgentId(), in.GetUrl(), in.GetDepth()+1, clip(in.GetMessage(), 2000)),
	}, in)
}

// WaitInvoke implements Workflows.
func (t *TemporalWorkflows) WaitInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error) {
	var out remoteagentsv1.InvokeOutcome
	cancelled, err := workflowrun.Wait(ctx, t.c, workflowID, &out)
	if cancelled {
		return &remoteagentsv1.InvokeOutcome{InvocationId: invocationOf(workflowID), Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED,
			ResolveTime: timestamppb.Now()}, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// QueryInvoke implements Workflows.
func (t *TemporalWorkflows) QueryInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error) {
	var out remoteagentsv1.InvokeOutcome
	if err := workflowrun.Query(ctx, t.c, workflowID, workflowcontract.HandlerOf(&remoteagentsv1.InvokeStatusQuery{}).Name, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelInvoke implements Workflows.
func (t *TemporalWorkflows) CancelInvoke(ctx context.Context, workflowID string) error {
	return workflowrun.Cancel(ctx, t.c, workflowID)
}

// invocationOf is the invocation id at the end of a workflow id.
func invocationOf(workflowID string) string {
	i := strings.LastIndexByte(workflowID, '/')
	return workflowID[i+1:]
}

// errIsNoWorkflow reports whether err says the workflow is gone.
func errIsNoWorkflow(err error) bool { return errors.Is(err, ErrNoWorkflow) }
