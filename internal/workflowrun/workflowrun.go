// Package workflowrun is how a service runs the workflow behind one of its
// long-running calls (an owner ask, a remote agent invocation): start it
// once per deterministic id, wait for its result, ask its status query,
// cancel it. The edge turns such calls into MCP tasks; this is the service
// side of the same mechanism.
package workflowrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// ErrNoWorkflow reports a workflow that does not exist (or no longer
// takes queries: it has ended).
var ErrNoWorkflow = errors.New("the workflow has ended or does not exist")

// Start describes one run of a workflow.
type Start struct {
	// Contract names the workflow type and task queue.
	Contract workflowcontract.Workflow
	// ID is the run's deterministic id ("<prefix>/<agent>/<id>").
	ID string
	// Agent, Tool and Status are the ToolmeshAgent, ToolmeshTool and
	// ToolmeshStatus search attributes; the kind is the contract's prefix.
	Agent, Tool, Status string
	// Summary and Details are shown in the Temporal UI.
	Summary, Details string
}

// Once starts s with input unless a workflow with its id exists, running
// or ended: a retried start finds the running one, and an ended one is
// never run again.
func Once(ctx context.Context, c client.Client, s Start, input any) error {
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       s.ID,
		TaskQueue:                s.Contract.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    s.searchAttributes(),
		StaticSummary:            s.Summary,
		StaticDetails:            s.Details,
		Priority:                 s.priority(),
	}, s.Contract.Name, input)
	if _, started := errors.AsType[*serviceerror.WorkflowExecutionAlreadyStarted](err); started {
		return nil
	}
	if err != nil {
		return fmt.Errorf("start workflow %s: %w", s.ID, err)
	}
	return nil
}

// searchAttributes are the workflow's, by which operators and the edge
// find it.
func (s Start) searchAttributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrAgent).ValueSet(s.Agent),
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrTool).ValueSet(s.Tool),
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrKind).ValueSet(s.Contract.IDPrefix),
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus).ValueSet(s.Status),
	)
}

// priority makes the run's agent its fairness key: on a server with
// fairness on (internal/temporaldev turns it on), the tasks of one agent's
// runs, and of their activities, which inherit it, take turns with other
// agents' on the same task queue, so one agent's backlog does not delay
// everyone's.
func (s Start) priority() temporal.Priority {
	return temporal.Priority{FairnessKey: s.Agent}
}

// SignalWithStart sends signal to the running workflow s.ID, starting it
// with input first when it is not running — also when one with its id has
// ended: a workflow that follows something until it has nothing left to do
// is started again when there is.
func SignalWithStart(ctx context.Context, c client.Client, s Start, signal string, input any) error {
	_, err := c.SignalWithStartWorkflow(ctx, s.ID, signal, nil, client.StartWorkflowOptions{
		TaskQueue:             s.Contract.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: s.searchAttributes(),
		StaticSummary:         s.Summary,
		StaticDetails:         s.Details,
		Priority:              s.priority(),
	}, s.Contract.Name, input)
	if err != nil {
		return fmt.Errorf("signal workflow %s: %w", s.ID, err)
	}
	return nil
}

// Wait blocks until workflow id ends (it long-polls the workflow's history
// for its close event, so it returns as soon as the workflow ends) and
// decodes its result into out; cancelled is true for a workflow that ended
// cancelled (out is then untouched). ErrNoWorkflow when there is none.
func Wait(ctx context.Context, c client.Client, id string, out any) (cancelled bool, err error) {
	err = c.GetWorkflow(ctx, id, "").Get(ctx, out)
	if _, ok := errors.AsType[*temporal.CanceledError](err); ok {
		return true, nil
	}
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return false, ErrNoWorkflow
	}
	return false, err
}

// Query asks workflow id's query name and decodes the answer into out.
// ErrNoWorkflow when there is no such workflow.
func Query(ctx context.Context, c client.Client, id, name string, out any) error {
	v, err := c.QueryWorkflow(ctx, id, "", name)
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return ErrNoWorkflow
	}
	if err != nil {
		return err
	}
	if err := v.Get(out); err != nil {
		return fmt.Errorf("read the %s query: %w", name, err)
	}
	return nil
}

// Update sends workflow id the update name with arg under updateID (a
// repeated id gets the first update's outcome), waits for its outcome and
// decodes it into out. A refusal of the update's validator or handler is
// the workflow's *temporal.ApplicationError; ErrNoWorkflow when there is
// no running workflow of that id.
func Update(ctx context.Context, c client.Client, id, updateID, name string, arg, out any) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateID:     updateID,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, out)
	}
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return ErrNoWorkflow
	}
	return err
}

// Cancel asks workflow id to cancel; one that has ended (or never was) is
// left alone.
func Cancel(ctx context.Context, c client.Client, id string) error {
	err := c.CancelWorkflow(ctx, id, "")
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return nil
	}
	return err
}

// Within runs wait, which waits for a workflow (its result: Wait), for at
// most budget and never past ctx's deadline less margin (kept to answer
// the call that waits). done is false when the budget ran out, or was
// none; err is a failure of wait itself.
func Within[T any](ctx context.Context, budget, margin time.Duration, wait func(context.Context) (T, error)) (out T, done bool, err error) {
	if d, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(d)-margin)
	}
	if budget <= 0 {
		return out, false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	out, err = wait(wctx)
	if err != nil {
		if wctx.Err() != nil {
			return out, false, nil
		}
		return out, false, err
	}
	return out, true, nil
}
