// Package workflows is the worker of the "workflows" task queue: the run
// workflow of agents' own workflows, and its activities. The workflow's
// names (type, task queue, id prefix, handlers) come from the
// toolmesh.workflows.v1 contract messages, which WorkflowsService reads
// too; neither side imports the other.
//
// A run interprets its definition from the start node, deterministically:
// nodes are looked up by id, never by iterating a map; time is workflow
// time; branches of a parallel node are workflow coroutines. Each action
// node is the calls worker's calls.invoke activity on the "calls" task
// queue (the path elicited calls take), acting as the run's starter at its
// depth + 1, with an idempotency key from the run and the node, so a
// retried or replayed node has its side effect once. A tool the starter
// could not call when the run started fails its node with
// permission_denied. Expressions (internal/flowexpr) are evaluated inside
// workflow.SideEffect: their values are recorded in the history, so
// replays never evaluate them again. Approval nodes ask the owner through
// OwnerService.Ask as the starter and wait for the answer in a heartbeating
// activity; delay nodes are durable timers. The run fails when its deadline
// passes; the extend update moves the deadline, up to the run's maximum.
//
// The run records itself with WorkflowsService (RecordRun) when it suspends
// for an approval, when it resumes and before it ends; the state query
// answers where it is at any moment.
package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/flowexpr"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md). The action nodes' activity is the calls
// worker's (calls.ActivityInvoke).
const (
	ActivityAsk             = "workflows.ask"
	ActivityAwaitAnswer     = "workflows.await_answer"
	ActivityWithdrawAsk     = "workflows.withdraw_ask"
	ActivityRecordRun       = "workflows.record_run"
	ActivityRecordExtension = "workflows.record_extension"
)

// Values of the ToolmeshStatus search attribute. WorkflowsService starts a
// run as "running".
const (
	StatusRunning   = "running"
	StatusSuspended = "suspended"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Answers an approval's ask takes.
const (
	AnswerApprove = "approve"
	AnswerReject  = "reject"
)

// Contract names, read from the proto options.
func runContract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&workflowsv1.RunWorkflowInput{})
}
func stateQuery() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&workflowsv1.StateQuery{})
}
func extendUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&workflowsv1.ExtendUpdate{})
}

// TaskQueue is the queue this worker polls ("workflows").
func TaskQueue() string { return runContract().TaskQueue }

// Register adds the run workflow and its activities to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterWorkflows adds the run workflow, under its contract name, to r (a
// worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(RunWorkflow, workflow.RegisterOptions{Name: runContract().Name})
}

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.Ask, activity.RegisterOptions{Name: ActivityAsk})
	r.RegisterActivityWithOptions(a.AwaitAnswer, activity.RegisterOptions{Name: ActivityAwaitAnswer})
	r.RegisterActivityWithOptions(a.WithdrawAsk, activity.RegisterOptions{Name: ActivityWithdrawAsk})
	r.RegisterActivityWithOptions(a.RecordRun, activity.RegisterOptions{Name: ActivityRecordRun})
	r.RegisterActivityWithOptions(a.RecordExtension, activity.RegisterOptions{Name: ActivityRecordExtension})
}

// run is the state of one run.
type run struct {
	in *workflowsv1.RunWorkflowInput
	// nodes are the definition's nodes by id (looked up, never iterated).
	nodes map[string]*workflowsv1.Node
	// exec are the nodes' executions, in definition order; index finds one.
	exec  []*workflowsv1.NodeExecution
	index map[string]int
	// outputs are the completed nodes' outputs by id (looked up; read in
	// full only inside SideEffect).
	outputs  map[string]*structpb.Value
	deadline time.Time
	status   workflowsv1.RunStatus
	failure  *workflowsv1.RunError
	output   *structpb.Value
	endTime  time.Time
	// waiting counts the approvals waiting for the owner.
	waiting int
	// over is set once the run has ended: extensions are refused.
	over bool
	// env compiles expressions; built inside SideEffect, when first needed.
	env *flowexpr.Env
	// auditing counts extensions still being recorded in the audit trail.
	auditing int
}

func newRun(in *workflowsv1.RunWorkflowInput) *run {
	r := &run{in: in, nodes: map[string]*workflowsv1.Node{}, index: map[string]int{}, outputs: map[string]*structpb.Value{},
		deadline: in.GetDeadline().AsTime(), status: workflowsv1.RunStatus_RUN_STATUS_RUNNING}
	for i, n := range in.GetDefinition().GetNodes() {
		r.nodes[n.GetId()] = n
		r.index[n.GetId()] = i
		r.exec = append(r.exec, &workflowsv1.NodeExecution{NodeId: n.GetId(), Status: workflowsv1.NodeStatus_NODE_STATUS_PENDING})
	}
	return r
}

// outcome is the run so far: the state query's answer and, once it ended,
// the workflow's result.
func (r *run) outcome() *workflowsv1.RunOutcome {
	o := &workflowsv1.RunOutcome{RunId: r.in.GetRunId(), Status: r.status, Output: r.output, Error: r.failure,
		Nodes: r.exec, Deadline: timestamppb.New(r.deadline)}
	if !r.endTime.IsZero() {
		o.EndTime = timestamppb.New(r.endTime)
	}
	return o
}

// checkExtend says whether the run's deadline may move to d.
func (r *run) checkExtend(d time.Time) error {
	if r.over {
		return temporal.NewApplicationError("the run has ended", workflowsv1.ExtendRejection_EXTEND_REJECTION_NOT_RUNNING.String())
	}
	if !d.After(r.deadline) {
		return temporal.NewApplicationError(fmt.Sprintf("the new deadline %s is not later than the run's deadline %s",
			d.UTC().Format(time.RFC3339), r.deadline.UTC().Format(time.RFC3339)), workflowsv1.ExtendRejection_EXTEND_REJECTION_INVALID_DEADLINE.String())
	}
	if limit := r.in.GetMaxDeadline().AsTime(); d.After(limit) {
		return temporal.NewApplicationError(fmt.Sprintf("the new deadline %s is past the run's maximum %s",
			d.UTC().Format(time.RFC3339), limit.UTC().Format(time.RFC3339)), workflowsv1.ExtendRejection_EXTEND_REJECTION_INVALID_DEADLINE.String())
	}
	return nil
}

// RunWorkflow is the workflows.run workflow.
func RunWorkflow(ctx workflow.Context, in *workflowsv1.RunWorkflowInput) (*workflowsv1.RunOutcome, error) {
	r := newRun(in)
	q := stateQuery()
	if err := workflow.SetQueryHandlerWithOptions(ctx, q.Name, func() (*workflowsv1.RunOutcome, error) { return r.outcome(), nil },
		workflow.QueryHandlerOptions{Description: q.Description}); err != nil {
		return nil, err
	}
	x := extendUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, x.Name,
		func(ctx workflow.Context, up *workflowsv1.ExtendUpdate) (*workflowsv1.RunOutcome, error) {
			r.deadline = up.GetDeadline().AsTime()
			if up.GetRequestedBy() == "" { // sent from the Temporal UI or CLI
				up.RequestedBy = "temporal"
			}
			if up.GetCallId() == "" {
				up.CallId = "workflows-extend:" + workflow.GetCurrentUpdateInfo(ctx).ID
			}
			r.details(ctx)
			r.auditing++
			workflow.Go(ctx, func(ctx workflow.Context) {
				recordExtension(ctx, up)
				r.auditing--
			})
			return r.outcome(), nil
		},
		workflow.UpdateHandlerOptions{
			// Runs before the update is accepted: a refusal leaves no
			// trace in the history.
			Validator: func(_ workflow.Context, up *workflowsv1.ExtendUpdate) error {
				return r.checkExtend(up.GetDeadline().AsTime())
			},
			Description: x.Description,
		}); err != nil {
		return nil, err
	}
	r.details(ctx)

	// The nodes run in a coroutine of their own; this one keeps the
	// deadline, which an extension moves.
	nodes, stop := workflow.WithCancel(ctx)
	var failure error
	done := false
	workflow.Go(nodes, func(ctx workflow.Context) {
		failure = r.interpret(ctx)
		done = true
	})
	timedOut, cancelled := false, false
	for !done {
		deadline := r.deadline
		wait := deadline.Sub(workflow.Now(ctx))
		if wait <= 0 {
			timedOut = true
			break
		}
		ok, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
			Timeout:      wait,
			TimerOptions: workflow.TimerOptions{Summary: "The run's deadline"},
		}, func() bool { return done || !r.deadline.Equal(deadline) })
		if err != nil {
			cancelled = true
			break
		}
		if !ok {
			timedOut = true
			break
		}
	}
	// From here on nothing the run's cancellation reaches: the nodes
	// unwind, and the end is recorded.
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if !done {
		stop()
		if err := workflow.Await(ctx, func() bool { return done }); err != nil {
			return nil, err
		}
	}
	r.finish(ctx, failure, timedOut, cancelled)
	r.over = true
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus).ValueSet(statusWord(r.status))); err != nil {
		return nil, err
	}
	r.details(ctx)
	r.record(ctx, true)
	// An extension still being recorded finishes first.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && r.auditing == 0 }); err != nil {
		return nil, err
	}
	if cancelled {
		return nil, temporal.NewCanceledError("the run was cancelled")
	}
	return r.outcome(), nil
}

// finish sets how the run ended: cancelled, out of time, failed at a node
// or completed; nodes still pending were skipped, nodes cut short
// cancelled.
func (r *run) finish(ctx workflow.Context, failure error, timedOut, cancelled bool) {
	now := workflow.Now(ctx)
	r.endTime = now
	switch {
	case cancelled:
		r.status = workflowsv1.RunStatus_RUN_STATUS_CANCELLED
	case timedOut:
		r.status = workflowsv1.RunStatus_RUN_STATUS_FAILED
		r.failure = &workflowsv1.RunError{DomainCode: "deadline_exceeded",
			Message: fmt.Sprintf("the run did not end by its deadline %s (extend a run with workflows_extend_run)", r.deadline.UTC().Format(time.RFC3339))}
		for _, e := range r.exec {
			if active(e.GetStatus()) {
				r.failure.NodeId = e.GetNodeId()
				r.failure.Message = fmt.Sprintf("node %q was still running when the run reached its deadline %s (extend a run with workflows_extend_run)",
					e.GetNodeId(), r.deadline.UTC().Format(time.RFC3339))
				break
			}
		}
	case failure != nil:
		r.status = workflowsv1.RunStatus_RUN_STATUS_FAILED
		r.failure = failureOf(failure)
	default:
		r.status = workflowsv1.RunStatus_RUN_STATUS_COMPLETED
	}
	for _, e := range r.exec {
		switch {
		case e.GetStatus() == workflowsv1.NodeStatus_NODE_STATUS_PENDING:
			e.Status = workflowsv1.NodeStatus_NODE_STATUS_SKIPPED
		case active(e.GetStatus()):
			e.Status, e.EndTime = workflowsv1.NodeStatus_NODE_STATUS_CANCELLED, timestamppb.New(now)
		}
	}
}

// active reports whether a node was under way.
func active(st workflowsv1.NodeStatus) bool {
	switch st {
	case workflowsv1.NodeStatus_NODE_STATUS_RUNNING, workflowsv1.NodeStatus_NODE_STATUS_WAITING_APPROVAL,
		workflowsv1.NodeStatus_NODE_STATUS_WAITING_DELAY, workflowsv1.NodeStatus_NODE_STATUS_WAITING_JOIN:
		return true
	}
	return false
}

// statusWord is a run status as the ToolmeshStatus search attribute says it.
func statusWord(st workflowsv1.RunStatus) string {
	switch st {
	case workflowsv1.RunStatus_RUN_STATUS_SUSPENDED:
		return StatusSuspended
	case workflowsv1.RunStatus_RUN_STATUS_COMPLETED:
		return StatusCompleted
	case workflowsv1.RunStatus_RUN_STATUS_FAILED:
		return StatusFailed
	case workflowsv1.RunStatus_RUN_STATUS_CANCELLED:
		return StatusCancelled
	}
	return StatusRunning
}

// details shows the run in the Temporal UI: its status, deadline and every
// node, as a Markdown table.
func (r *run) details(ctx workflow.Context) {
	var b strings.Builder
	b.WriteString(fmt.Sprintf("**%s** (deadline %s)\n\n| node | status | |\n|---|---|---|\n", statusWord(r.status), r.deadline.UTC().Format(time.RFC3339)))
	for _, e := range r.exec {
		note := ""
		switch {
		case e.GetError() != nil:
			note = e.GetError().GetDomainCode() + ": " + clip(e.GetError().GetMessage(), 200)
		case e.GetAskId() != "":
			note = "ask " + e.GetAskId()
		}
		b.WriteString(fmt.Sprintf("| `%s` | %s | %s |\n", e.GetNodeId(), nodeWord(e.GetStatus()), note))
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// nodeWord is a node status in a word.
func nodeWord(st workflowsv1.NodeStatus) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "NODE_STATUS_"))
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
