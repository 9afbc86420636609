package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// SearchStatusRunning is the ToolmeshStatus of a run when it starts; the
// worker moves it to suspended, completed, failed or cancelled.
const SearchStatusRunning = "running"

// TemporalEngine runs workflow runs on Temporal.
type TemporalEngine struct {
	c client.Client
}

var _ Engine = (*TemporalEngine)(nil)

// NewTemporalEngine returns Engine over a connected client (one that
// encodes payloads as protobuf JSON: internal/temporalclient).
func NewTemporalEngine(c client.Client) *TemporalEngine {
	return &TemporalEngine{c: c}
}

// StartRun implements Engine.
func (t *TemporalEngine) StartRun(ctx context.Context, in *workflowsv1.RunWorkflowInput) error {
	id := WorkflowID(in.GetStarter().GetAgent(), in.GetRunId())
	return workflowrun.Once(ctx, t.c, workflowrun.Start{
		Contract: runWorkflow(),
		ID:       id,
		Agent:    in.GetStarter().GetAgent(),
		Tool:     ToolRun,
		Status:   SearchStatusRunning,
		Summary:  RunSummary(in),
		Details:  RunDetails(in, id),
	}, in)
}

// RunSummary is the one line the Temporal UI shows for a run.
func RunSummary(in *workflowsv1.RunWorkflowInput) string {
	return fmt.Sprintf("%s v%d, run by %s", in.GetWorkflowName(), in.GetVersion(), in.GetStarter().GetAgent())
}

// RunDetails is a run's static details (Markdown): what it runs, for whom,
// its nodes, and how to read or extend it from a shell.
func RunDetails(in *workflowsv1.RunWorkflowInput, workflowID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Workflow** `%s` (%s) version %d, **run** `%s` by agent `%s`.\n\n",
		in.GetWorkflowName(), in.GetWorkflowId(), in.GetVersion(), in.GetRunId(), in.GetStarter().GetAgent())
	if d := in.GetDeadline(); d != nil {
		fmt.Fprintf(&b, "**Deadline:** %s (at most %s).\n\n", d.AsTime().UTC().Format(time.RFC3339), in.GetMaxDeadline().AsTime().UTC().Format(time.RFC3339))
	}
	b.WriteString("| node | does |\n|---|---|\n")
	for _, n := range in.GetDefinition().GetNodes() {
		fmt.Fprintf(&b, "| `%s` | %s |\n", n.GetId(), NodeSummary(n))
	}
	listed := map[string]bool{}
	for _, n := range in.GetDefinition().GetNodes() {
		tool := n.GetAction().GetTool()
		if why, ok := in.GetRefusedTools()[tool]; ok && !listed[tool] {
			listed[tool] = true
			fmt.Fprintf(&b, "\nThe starting agent may not call `%s`: %s.\n", tool, why)
		}
	}
	fmt.Fprintf(&b, "\nWhere it is: `temporal workflow query --workflow-id '%s' --name state`\n", workflowID)
	return b.String()
}

// NodeSummary says in a few words what a node does.
func NodeSummary(n *workflowsv1.Node) string {
	switch k := n.GetKind().(type) {
	case *workflowsv1.Node_Start:
		return "start → " + k.Start.GetNext()
	case *workflowsv1.Node_End:
		return "end"
	case *workflowsv1.Node_Action:
		return "calls `" + k.Action.GetTool() + "` → " + k.Action.GetNext()
	case *workflowsv1.Node_Condition:
		return fmt.Sprintf("if `%s` → %s, else → %s", k.Condition.GetExpression(), k.Condition.GetThen(), k.Condition.GetElse())
	case *workflowsv1.Node_Parallel:
		return "runs " + strings.Join(k.Parallel.GetBranches(), ", ") + " in parallel, up to " + k.Parallel.GetJoin()
	case *workflowsv1.Node_Join:
		return "joins → " + k.Join.GetNext()
	case *workflowsv1.Node_Approval:
		return "asks the owner to approve → " + k.Approval.GetNext()
	case *workflowsv1.Node_Delay:
		return fmt.Sprintf("waits %ds → %s", k.Delay.GetSeconds(), k.Delay.GetNext())
	}
	return "?"
}

// WaitRun implements Engine.
func (t *TemporalEngine) WaitRun(ctx context.Context, workflowID string) (*workflowsv1.RunOutcome, error) {
	var out workflowsv1.RunOutcome
	cancelled, err := workflowrun.Wait(ctx, t.c, workflowID, &out)
	if cancelled {
		_, runID, _ := ParseWorkflowID(workflowID)
		// The workflow recorded its nodes before it ended; the query is
		// gone, so the record keeps them.
		return &workflowsv1.RunOutcome{RunId: runID, Status: workflowsv1.RunStatus_RUN_STATUS_CANCELLED, EndTime: timestamppb.Now()}, nil
	}
	if errors.Is(err, workflowrun.ErrNoWorkflow) {
		return nil, ErrNoWorkflow
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// QueryRun implements Engine.
func (t *TemporalEngine) QueryRun(ctx context.Context, workflowID string) (*workflowsv1.RunOutcome, error) {
	var out workflowsv1.RunOutcome
	err := workflowrun.Query(ctx, t.c, workflowID, workflowcontract.HandlerOf(&workflowsv1.StateQuery{}).Name, &out)
	if errors.Is(err, workflowrun.ErrNoWorkflow) {
		return nil, ErrNoWorkflow
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ExtendRun implements Engine.
func (t *TemporalEngine) ExtendRun(ctx context.Context, workflowID, updateID string, u *workflowsv1.ExtendUpdate) (*workflowsv1.RunOutcome, error) {
	h, err := t.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID,
		UpdateID:     updateID,
		UpdateName:   workflowcontract.HandlerOf(u).Name,
		Args:         []any{u},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return nil, extendError(err)
	}
	var out workflowsv1.RunOutcome
	if err := h.Get(ctx, &out); err != nil {
		return nil, extendError(err)
	}
	return &out, nil
}

// extendError maps the extend update's failures: the validator's
// rejections (application errors typed by ExtendRejection) and a workflow
// that has ended.
func extendError(err error) error {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		for _, r := range []workflowsv1.ExtendRejection{workflowsv1.ExtendRejection_EXTEND_REJECTION_NOT_RUNNING, workflowsv1.ExtendRejection_EXTEND_REJECTION_INVALID_DEADLINE} {
			if app.Type() == r.String() {
				return &ExtendRejectedError{Reason: r, Message: app.Message()}
			}
		}
	}
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return ErrNoWorkflow
	}
	return err
}

// CancelRun implements Engine.
func (t *TemporalEngine) CancelRun(ctx context.Context, workflowID string) error {
	return workflowrun.Cancel(ctx, t.c, workflowID)
}
