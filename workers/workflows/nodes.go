package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowaudit"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// nodeFailure is a node that failed, and so its run.
type nodeFailure struct{ e *workflowsv1.RunError }

func (f *nodeFailure) Error() string { return f.e.GetMessage() }

// failureOf is the run's error for the error a node path ended with.
func failureOf(err error) *workflowsv1.RunError {
	if f, ok := errors.AsType[*nodeFailure](err); ok {
		return f.e
	}
	return &workflowsv1.RunError{DomainCode: "internal", Message: "the run failed: " + err.Error()}
}

// exec is the execution of node id.
func (r *run) node(id string) *workflowsv1.NodeExecution { return r.exec[r.index[id]] }

// set moves a node to status (stamping its start the first time).
func (r *run) set(ctx workflow.Context, id string, st workflowsv1.NodeStatus) {
	e := r.node(id)
	e.Status = st
	if e.StartTime == nil {
		e.StartTime = timestamppb.New(workflow.Now(ctx))
	}
	r.details(ctx)
}

// complete ends a node with its output.
func (r *run) complete(ctx workflow.Context, id string, out *structpb.Value) {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_COMPLETED)
	e := r.node(id)
	e.Output, e.EndTime = out, timestamppb.New(workflow.Now(ctx))
	if out != nil {
		r.outputs[id] = out
	}
	r.details(ctx)
}

// fail ends a node, and its run, with a domain code and a message that
// names the node.
func (r *run) fail(ctx workflow.Context, id, code, format string, args ...any) error {
	e := r.node(id)
	e.Status, e.EndTime = workflowsv1.NodeStatus_NODE_STATUS_FAILED, timestamppb.New(workflow.Now(ctx))
	if e.StartTime == nil {
		e.StartTime = e.EndTime
	}
	e.Error = &workflowsv1.RunError{NodeId: id, DomainCode: code, Message: fmt.Sprintf("node %q: ", id) + fmt.Sprintf(format, args...)}
	r.details(ctx)
	return &nodeFailure{e: e.Error}
}

// interpret runs the definition from its start node to an end node.
func (r *run) interpret(ctx workflow.Context) error {
	for _, n := range r.in.GetDefinition().GetNodes() {
		if s := n.GetStart(); s != nil {
			r.complete(ctx, n.GetId(), nil)
			_, err := r.path(ctx, s.GetNext())
			return err
		}
	}
	return errors.New("the definition has no start node")
}

// path runs nodes from id until an end node (it returns "") or a join
// node (it returns the join's id, for the parallel node whose branch this
// is).
func (r *run) path(ctx workflow.Context, id string) (string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n := r.nodes[id]
		switch k := n.GetKind().(type) {
		case *workflowsv1.Node_End:
			return "", r.end(ctx, id, k.End)
		case *workflowsv1.Node_Join:
			r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_WAITING_JOIN)
			return id, nil
		case *workflowsv1.Node_Action:
			if err := r.action(ctx, id, k.Action); err != nil {
				return "", err
			}
			id = k.Action.GetNext()
		case *workflowsv1.Node_Condition:
			next, err := r.condition(ctx, id, k.Condition)
			if err != nil {
				return "", err
			}
			id = next
		case *workflowsv1.Node_Parallel:
			if err := r.parallel(ctx, id, k.Parallel); err != nil {
				return "", err
			}
			id = r.nodes[k.Parallel.GetJoin()].GetJoin().GetNext()
		case *workflowsv1.Node_Approval:
			next, err := r.approval(ctx, id, k.Approval)
			if err != nil {
				return "", err
			}
			id = next
		case *workflowsv1.Node_Delay:
			if err := r.delay(ctx, id, k.Delay); err != nil {
				return "", err
			}
			id = k.Delay.GetNext()
		default:
			return "", fmt.Errorf("node %q has no kind this worker knows", id)
		}
	}
}

// IdempotencyKey is the key an action node's tool call carries: the same
// for every attempt and every replay of the node in the run.
func IdempotencyKey(runID, nodeID string) string { return "run:" + runID + ":" + nodeID }

// starter is the identity a node acts for: the run's starter, one level
// deeper.
func (r *run) starter() *callsv1.Caller {
	c := toolcall.CallerOf(r.in.GetStarter())
	c.Depth++
	return toolcall.CallerProto(c)
}

// action calls the node's tool through the calls worker and keeps the
// result's data as the node's output; an error result fails the node.
func (r *run) action(ctx workflow.Context, id string, a *workflowsv1.ActionNode) error {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_RUNNING)
	tool := a.GetTool()
	if why, refused := r.in.GetRefusedTools()[tool]; refused {
		return r.fail(ctx, id, "permission_denied", "the agent that started the run may not call %s: %s", tool, why)
	}
	args, err := r.arguments(ctx, a.GetArguments())
	if err != nil {
		return r.fail(ctx, id, "invalid_argument", "its arguments: %v", err)
	}
	// The call's own deadline, and one attempt's bound from the calls
	// worker's retry policy (its retries here are the run's, below).
	timeout := r.in.GetCallTimeout().AsDuration()
	if timeout <= 0 {
		timeout = toolcall.DefaultTimeout
	}
	var out callsv1.InvokeOutput
	for {
		deadline := r.deadline
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           calls.Contract().TaskQueue,
			StartToCloseTimeout: toolcall.RetryOf(timeout).Attempt,
			// Tried again while the service is unreachable (the same key:
			// applied once), until the run's deadline.
			ScheduleToCloseTimeout: max(deadline.Sub(workflow.Now(ctx)), time.Second),
			RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
			Summary:                "node " + id + ": " + tool,
		})
		err = workflow.ExecuteActivity(actx, calls.ActivityInvoke, &callsv1.InvokeInput{
			Tool:           tool,
			Arguments:      args,
			Caller:         r.starter(),
			IdempotencyKey: IdempotencyKey(r.in.GetRunId(), id),
			Timeout:        durationpb.New(timeout),
		}).Get(actx, &out)
		// An extension moved the deadline while the call was being tried:
		// try on, with the same key, until the new one.
		if err == nil || temporal.IsCanceledError(err) || !r.deadline.After(deadline) {
			break
		}
	}
	if err != nil {
		if temporal.IsCanceledError(err) {
			return err
		}
		return r.fail(ctx, id, "unavailable", "%s could not be called before the run's deadline", tool)
	}
	env := decodeEnvelope(out.GetEnvelope())
	if env.status != "ok" {
		return r.fail(ctx, id, env.code, "%s failed: %s", tool, env.message)
	}
	r.complete(ctx, id, env.data)
	return nil
}

// condition evaluates the node's expression and names the node that runs
// next.
func (r *run) condition(ctx workflow.Context, id string, c *workflowsv1.ConditionNode) (string, error) {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_RUNNING)
	ok, err := r.evalBool(ctx, c.GetExpression())
	if err != nil {
		return "", r.fail(ctx, id, "invalid_argument", "its expression: %v", err)
	}
	r.complete(ctx, id, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"result": structpb.NewBoolValue(ok)}}))
	if ok {
		return c.GetThen(), nil
	}
	return c.GetElse(), nil
}

// parallel runs the node's branches as coroutines up to its join. When one
// fails, the others are cancelled; the first failure, in branch order, is
// the node's.
func (r *run) parallel(ctx workflow.Context, id string, p *workflowsv1.ParallelNode) error {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_RUNNING)
	bctx, cancel := workflow.WithCancel(ctx)
	branches := p.GetBranches()
	errs := make([]error, len(branches))
	finished := 0
	for i, b := range branches {
		workflow.Go(bctx, func(ctx workflow.Context) {
			_, errs[i] = r.path(ctx, b)
			finished++
			if errs[i] != nil {
				cancel()
			}
		})
	}
	// Every branch unwinds, even when the run is cancelled meanwhile.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(dctx, func() bool { return finished == len(branches) }); err != nil {
		return err
	}
	cancel()
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || temporal.IsCanceledError(first) && !temporal.IsCanceledError(err)) {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.complete(ctx, id, nil)
	r.complete(ctx, p.GetJoin(), nil)
	return nil
}

// delay waits on a durable timer.
func (r *run) delay(ctx workflow.Context, id string, d *workflowsv1.DelayNode) error {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_WAITING_DELAY)
	wait := time.Duration(d.GetSeconds()) * time.Second
	if err := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: fmt.Sprintf("node %s: wait %s", id, wait)}).Get(ctx, nil); err != nil {
		return err
	}
	r.complete(ctx, id, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"seconds": structpb.NewNumberValue(float64(d.GetSeconds()))}}))
	return nil
}

// end completes the run with the end node's output: its expression's
// value, or every completed node's output by node id.
func (r *run) end(ctx workflow.Context, id string, e *workflowsv1.EndNode) error {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_RUNNING)
	out, err := r.endOutput(ctx, e.GetOutput())
	if err != nil {
		return r.fail(ctx, id, "invalid_argument", "its output: %v", err)
	}
	r.output = out
	r.complete(ctx, id, out)
	return nil
}

// defaultApprovalTimeout is an approval's timeout when its node names
// none.
const defaultApprovalTimeout = time.Hour

// approval asks the owner, through OwnerService.Ask as the run's starter,
// and waits for the answer; the run is suspended meanwhile. It names the
// node that runs next: next when approved, on_reject otherwise (or the run
// fails, declined, when there is none).
func (r *run) approval(ctx workflow.Context, id string, a *workflowsv1.ApprovalNode) (string, error) {
	r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_RUNNING)
	question, err := r.text(ctx, a.GetQuestion())
	if err != nil {
		return "", r.fail(ctx, id, "invalid_argument", "its question: %v", err)
	}
	timeout := time.Duration(a.GetTimeoutSeconds()) * time.Second
	if timeout == 0 {
		timeout = defaultApprovalTimeout
	}
	in := &workflowsv1.ApprovalInput{
		RunId:          r.in.GetRunId(),
		NodeId:         id,
		Question:       clip(question, 2000), // an ask's longest question
		Context:        fmt.Sprintf("Workflow %s (version %d), run %s, node %s. Answer %q to go on, %q to stop.", r.in.GetWorkflowName(), r.in.GetVersion(), r.in.GetRunId(), id, AnswerApprove, AnswerReject),
		TimeoutSeconds: int32(timeout / time.Second),
		Caller:         r.starter(),
		IdempotencyKey: IdempotencyKey(r.in.GetRunId(), id),
	}
	var asked workflowsv1.ApprovalOutcome
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: max(r.deadline.Sub(workflow.Now(ctx)), time.Second),
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
		Summary:                "node " + id + ": ask the owner",
	})
	if err := workflow.ExecuteActivity(actx, ActivityAsk, in).Get(actx, &asked); err != nil {
		if temporal.IsCanceledError(err) {
			return "", err
		}
		return "", r.fail(ctx, id, askFailureCode(err), "the owner could not be asked: %s", applicationMessage(err))
	}
	in.AskId = asked.GetAskId()
	r.node(id).AskId = asked.GetAskId()
	r.suspend(ctx, id, true)

	got := &asked
	if asked.GetStatus() == "pending" {
		got = &workflowsv1.ApprovalOutcome{}
		wctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			// The ask's own timeout ends the wait; the slack covers a
			// worker that is away meanwhile.
			StartToCloseTimeout: timeout + 10*time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
			Summary:             "node " + id + ": wait for the owner's answer",
		})
		err = workflow.ExecuteActivity(wctx, ActivityAwaitAnswer, in).Get(wctx, got)
	}
	if err != nil {
		if temporal.IsCanceledError(err) {
			// Withdraw the ask: nobody waits for its answer any more.
			dctx, _ := workflow.NewDisconnectedContext(ctx)
			dctx = workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
				StartToCloseTimeout: 30 * time.Second, ScheduleToCloseTimeout: 5 * time.Minute, Summary: "node " + id + ": withdraw the ask",
			})
			_ = workflow.ExecuteActivity(dctx, ActivityWithdrawAsk, in).Get(dctx, nil)
			return "", err
		}
		return "", r.fail(ctx, id, "unavailable", "the owner's answer could not be read: %s", applicationMessage(err))
	}
	r.suspend(ctx, id, false)
	approved := got.GetStatus() == "answered" && got.GetAnswer() == AnswerApprove
	r.complete(ctx, id, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"approved":    structpb.NewBoolValue(approved),
		"answer":      structpb.NewStringValue(got.GetAnswer()),
		"answered_by": structpb.NewStringValue(got.GetAnsweredBy()),
		"status":      structpb.NewStringValue(got.GetStatus()),
		"ask_id":      structpb.NewStringValue(asked.GetAskId()),
	}}))
	switch {
	case approved:
		return a.GetNext(), nil
	case a.GetOnReject() != "":
		return a.GetOnReject(), nil
	}
	e := r.node(id)
	e.Status = workflowsv1.NodeStatus_NODE_STATUS_FAILED
	e.Error = &workflowsv1.RunError{NodeId: id, DomainCode: "declined",
		Message: fmt.Sprintf("node %q: the owner did not approve (ask %s %s)", id, asked.GetAskId(), describeAnswer(got))}
	r.details(ctx)
	return "", &nodeFailure{e: e.Error}
}

func describeAnswer(o *workflowsv1.ApprovalOutcome) string {
	if o.GetStatus() == "answered" {
		return fmt.Sprintf("answered %q by %s", o.GetAnswer(), o.GetAnsweredBy())
	}
	return o.GetStatus()
}

// suspend marks the run suspended while an approval waits (or running
// again), in the search attributes and in WorkflowsService.
func (r *run) suspend(ctx workflow.Context, id string, waiting bool) {
	if waiting {
		r.waiting++
		r.set(ctx, id, workflowsv1.NodeStatus_NODE_STATUS_WAITING_APPROVAL)
	} else {
		r.waiting--
	}
	st := workflowsv1.RunStatus_RUN_STATUS_RUNNING
	if r.waiting > 0 {
		st = workflowsv1.RunStatus_RUN_STATUS_SUSPENDED
	}
	if st == r.status {
		return
	}
	r.status = st
	_ = workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus).ValueSet(statusWord(st)))
	r.details(ctx)
	r.record(ctx, false)
}

// record reports the run's state to WorkflowsService, a local activity.
// The end is retried for an hour (the service also records it when it
// sees the workflow's result); a suspension for half a minute.
func (r *run) record(ctx workflow.Context, final bool) {
	stop := 30 * time.Second
	if final {
		stop = time.Hour
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: stop,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: time.Minute},
		Summary:                "Record the run with WorkflowsService",
	})
	o := r.outcome()
	req := &workflowsv1.RecordRunRequest{RunId: o.GetRunId(), Status: o.GetStatus(), Output: o.GetOutput(), Error: o.GetError(),
		Nodes: o.GetNodes(), Deadline: o.GetDeadline(), EndTime: o.GetEndTime()}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityRecordRun, req).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("workflows.run.record_failed", "run_id", r.in.GetRunId(), "final", final, "error", err)
	}
}

// recordExtension records an extension in the audit trail beside the run
// (workflowaudit.Record).
func recordExtension(ctx workflow.Context, up *workflowsv1.ExtendUpdate) {
	workflowaudit.Record(ctx, ActivityRecordExtension, up, up.GetCallId(), "workflows.run.extension_not_audited")
}

// askFailureCode is the domain code of an ask the owner service refused.
func askFailureCode(err error) string {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok && app.Type() != "" {
		return app.Type()
	}
	return "unavailable"
}

// applicationMessage is the message of an activity's failure.
func applicationMessage(err error) string {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return app.Message()
	}
	return "the activity failed"
}
