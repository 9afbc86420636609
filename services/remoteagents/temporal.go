package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// TemporalEngine runs invocations on Temporal.
type TemporalEngine struct {
	c client.Client
}

var _ Engine = (*TemporalEngine)(nil)

// NewTemporalEngine returns Engine over a connected client (one that
// encodes payloads as protobuf JSON: internal/temporalclient).
func NewTemporalEngine(c client.Client) *TemporalEngine { return &TemporalEngine{c: c} }

// StartInvoke implements Engine.
func (t *TemporalEngine) StartInvoke(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) error {
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

// WaitInvoke implements Engine.
func (t *TemporalEngine) WaitInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error) {
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

// QueryInvoke implements Engine.
func (t *TemporalEngine) QueryInvoke(ctx context.Context, workflowID string) (*remoteagentsv1.InvokeOutcome, error) {
	var out remoteagentsv1.InvokeOutcome
	if err := workflowrun.Query(ctx, t.c, workflowID, workflowcontract.HandlerOf(&remoteagentsv1.InvokeStatusQuery{}).Name, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelInvoke implements Engine.
func (t *TemporalEngine) CancelInvoke(ctx context.Context, workflowID string) error {
	return workflowrun.Cancel(ctx, t.c, workflowID)
}

// ExtendInvoke implements Engine.
func (t *TemporalEngine) ExtendInvoke(ctx context.Context, workflowID, updateID string, up *remoteagentsv1.ExtendInvocationUpdate) (*remoteagentsv1.InvokeOutcome, error) {
	var out remoteagentsv1.InvokeOutcome
	err := workflowrun.Update(ctx, t.c, workflowID, updateID, workflowcontract.HandlerOf(up).Name, up, &out)
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return nil, &ExtendRefusedError{Message: app.Message()}
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// NotifyInbound implements Engine.
func (t *TemporalEngine) NotifyInbound(ctx context.Context, in *remoteagentsv1.InboundWorkflowInput) error {
	return workflowrun.SignalWithStart(ctx, t.c, workflowrun.Start{
		Contract: inboundWorkflow(),
		ID:       InboundWorkflowID(in.GetAgentId(), in.GetTaskId()),
		Agent:    in.GetAgentId(),
		Status:   SearchStatusWorking,
		Summary:  fmt.Sprintf("A2A task %s of %s, pushed to its webhooks", in.GetTaskId(), in.GetAgentId()),
		Details: fmt.Sprintf("**%s** (over A2A) sent %s a message that opened task %s; each change of the task is sent to the webhooks %s registered.",
			in.GetSender(), in.GetAgentId(), in.GetTaskId(), in.GetSender()),
	}, workflowcontract.HandlerOf(&remoteagentsv1.InboundChangedSignal{}).Name, in)
}

// invocationOf is the invocation id at the end of a workflow id.
func invocationOf(workflowID string) string {
	i := strings.LastIndexByte(workflowID, '/')
	return workflowID[i+1:]
}

// errIsNoWorkflow reports whether err says the workflow is gone.
func errIsNoWorkflow(err error) bool { return errors.Is(err, ErrNoWorkflow) }
