// Package remoteagents is the worker of the "remoteagents" task queue: the
// invoke workflow and its activities. The workflow's names come from the
// toolmesh.remoteagents.v1 contract messages, which RemoteAgentsService
// reads too; neither side imports the other.
//
// An invoke workflow sends one message to a remote A2A agent, signed with
// the invocation depth, then follows the remote task until it ends, needs
// input, or the invocation expires: by its stream when the agent streams
// (stream.go, recording what the agent reports as the invocation's
// progress), else by polling tasks/get at growing intervals. Cancelling the workflow cancels the remote task (tasks/cancel).
// It records the outcome with RemoteAgentsService before it ends.
//
// An inbound task workflow (push.go) pushes the events of an A2A task the
// mesh serves to the webhooks its sender registered.
package remoteagents

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowaudit"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md).
const (
	ActivitySendMessage   = "SendMessage"
	ActivityGetTask       = "GetTask"
	ActivityCancelTask    = "CancelTask"
	ActivityRecordOutcome = "RecordOutcome"
	// ActivityRecordExtension records an extension in the audit trail.
	ActivityRecordExtension = "RecordExtension"
)

// Rejections of the extend update's validator (application error types);
// each leaves no trace in the history.
const (
	ExtendNotRunning    = "NotRunning"
	ExtendInvalidExpiry = "InvalidExpiry"
)

// ToolmeshStatus values of an invoke workflow; RemoteAgentsService starts
// it as "working".
const (
	StatusWorking       = "working"
	StatusCompleted     = "completed"
	StatusFailed        = "failed"
	StatusCancelled     = "cancelled"
	StatusRejected      = "rejected"
	StatusInputRequired = "input_required"
)

// Poll intervals: the first poll comes FirstPoll after the send, each
// next one twice as late, at most MaxPoll.
const (
	FirstPoll = time.Second
	MaxPoll   = 10 * time.Second
)

// ErrTypeRefused is the application error type of a remote refusal no
// retry can change (an invalid request, an unknown task, a refused
// address, no card).
const ErrTypeRefused = "RemoteRefused"

func invokeContract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&remoteagentsv1.InvokeWorkflowInput{})
}

func statusQuery() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&remoteagentsv1.InvokeStatusQuery{})
}

func extendUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&remoteagentsv1.ExtendInvocationUpdate{})
}

// TaskQueue is the queue this worker polls ("remoteagents").
func TaskQueue() string { return invokeContract().TaskQueue }

// Register adds the workflows and their activities to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterWorkflows adds the invoke and inbound task workflows, under their
// contract names, to r (a worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(InvokeWorkflow, workflow.RegisterOptions{Name: invokeContract().Name})
	r.RegisterWorkflowWithOptions(InboundWorkflow, workflow.RegisterOptions{Name: inboundContract().Name})
}

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.SendMessage, activity.RegisterOptions{Name: ActivitySendMessage})
	r.RegisterActivityWithOptions(a.StreamMessage, activity.RegisterOptions{Name: ActivityStreamMessage})
	r.RegisterActivityWithOptions(a.GetTask, activity.RegisterOptions{Name: ActivityGetTask})
	r.RegisterActivityWithOptions(a.CancelTask, activity.RegisterOptions{Name: ActivityCancelTask})
	r.RegisterActivityWithOptions(a.RecordOutcome, activity.RegisterOptions{Name: ActivityRecordOutcome})
	r.RegisterActivityWithOptions(a.RecordExtension, activity.RegisterOptions{Name: ActivityRecordExtension})
	r.RegisterActivityWithOptions(a.RefreshInbound, activity.RegisterOptions{Name: ActivityRefreshInbound})
	r.RegisterActivityWithOptions(a.DeliverPush, activity.RegisterOptions{Name: ActivityDeliverPush})
}

// Remote is where the remote task is, as the activities report it.
type Remote struct {
	// Endpoint is the URL of the remote agent's interface the message went
	// through; Binding and Version name its protocol binding and A2A
	// version (both empty in histories from before the mesh spoke A2A
	// 1.0: JSON-RPC, 0.3).
	Endpoint string `json:"endpoint"`
	Binding  string `json:"binding,omitempty"`
	Version  string `json:"version,omitempty"`
	// Streaming is set when the agent's card says it streams (and the mesh
	// speaks A2A 1.0 to it: the invocation streams).
	Streaming bool `json:"streaming,omitempty"`
	// TaskID and ContextID name the remote task; TaskID is empty when the
	// agent answered with a message.
	TaskID    string `json:"task_id"`
	ContextID string `json:"context_id"`
	// State is the task's A2A state ("completed" for a message answer).
	State string `json:"state"`
	// Answer is what the agent said.
	Answer string `json:"answer"`
}

// TaskRef names a remote task for GetTask and CancelTask: the interface
// it was opened through and its id.
type TaskRef struct {
	Endpoint string `json:"endpoint"`
	Binding  string `json:"binding,omitempty"`
	Version  string `json:"version,omitempty"`
	TaskID   string `json:"task_id"`
}

// ref names r's task.
func (r Remote) ref() TaskRef {
	return TaskRef{Endpoint: r.Endpoint, Binding: r.Binding, Version: r.Version, TaskID: r.TaskID}
}

// remote is where the task ref names is, before it is read.
func (ref TaskRef) remote() Remote {
	return Remote{Endpoint: ref.Endpoint, Binding: ref.Binding, Version: ref.Version, TaskID: ref.TaskID}
}

var send = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
		MaximumAttempts: 6, NonRetryableErrorTypes: []string{ErrTypeRefused}},
	Summary: "Send the message to the remote agent",
}

// ChangeStream is the change (workflow.GetVersion) from SendMessage and
// polling to StreamMessage, which follows a streaming agent's task itself
// (polling stays for agents that do not stream).
const ChangeStream = "stream-message"

// streamOptions are StreamMessage's: it may run until the invocation
// expires, heartbeating; a cancel waits for it to say where the task is.
func streamOptions(ctx workflow.Context, expire time.Time) workflow.ActivityOptions {
	left := expire.Sub(workflow.Now(ctx))
	if left < time.Minute {
		left = time.Minute
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout:    left,
		ScheduleToCloseTimeout: left,
		HeartbeatTimeout:       5 * time.Second,
		WaitForCancellation:    true,
		RetryPolicy:            send.RetryPolicy,
		Summary:                "Send the message to the remote agent and follow its task's stream",
	}
}

var poll = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
		MaximumAttempts: 4, NonRetryableErrorTypes: []string{ErrTypeRefused}},
	Summary: "Read the remote task",
}

var cancelOpts = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3, NonRetryableErrorTypes: []string{ErrTypeRefused}},
	Summary:             "Cancel the remote task",
}

// InvokeWorkflow is the remoteagents.invoke workflow.
func InvokeWorkflow(ctx workflow.Context, in *remoteagentsv1.InvokeWorkflowInput) (*remoteagentsv1.InvokeOutcome, error) {
	log := workflow.GetLogger(ctx)
	st := &remoteagentsv1.InvokeOutcome{InvocationId: in.GetInvocationId(), Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING,
		TaskId: in.GetTaskId(), ContextId: in.GetContextId()}
	q := statusQuery()
	if err := workflow.SetQueryHandlerWithOptions(ctx, q.Name, func() (*remoteagentsv1.InvokeOutcome, error) { return st, nil },
		workflow.QueryHandlerOptions{Description: q.Description}); err != nil {
		return nil, err
	}
	// expire is when the invocation stops being followed: the input's,
	// then the extend updates'. ended refuses extensions once the
	// following is over.
	expire, ended, auditing := in.GetExpireTime().AsTime(), false, 0
	st.ExpireTime = in.GetExpireTime()
	x := extendUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, x.Name,
		func(ctx workflow.Context, up *remoteagentsv1.ExtendInvocationUpdate) (*remoteagentsv1.InvokeOutcome, error) {
			expire, st.ExpireTime = up.GetExpireTime().AsTime(), up.GetExpireTime()
			if up.GetRequestedBy() == "" { // sent from the Temporal UI or CLI
				up.RequestedBy = "temporal"
			}
			if up.GetCallId() == "" {
				up.CallId = "remoteagents-extend:" + workflow.GetCurrentUpdateInfo(ctx).ID
			}
			auditing++
			workflow.Go(ctx, func(ctx workflow.Context) {
				recordExtension(ctx, up)
				auditing--
			})
			return st, nil
		},
		workflow.UpdateHandlerOptions{
			// Runs before the update is accepted: a refusal leaves no
			// trace in the history.
			Validator: func(_ workflow.Context, up *remoteagentsv1.ExtendInvocationUpdate) error {
				if ended {
					return temporal.NewApplicationError("the invocation has ended", ExtendNotRunning)
				}
				if d := up.GetExpireTime().AsTime(); !d.After(expire) {
					return temporal.NewApplicationError(fmt.Sprintf("the new expiry %s is not later than the invocation's %s",
						d.UTC().Format(time.RFC3339), expire.UTC().Format(time.RFC3339)), ExtendInvalidExpiry)
				}
				return nil
			},
			Description: x.Description,
		}); err != nil {
		return nil, err
	}
	workflow.SetCurrentDetails(ctx, "Sending the message to "+in.GetUrl())

	var remote Remote
	var err error
	if workflow.GetVersion(ctx, ChangeStream, workflow.DefaultVersion, 1) == 1 {
		// A streaming agent's task is followed by the activity itself.
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, streamOptions(ctx, expire)), ActivityStreamMessage, in).Get(ctx, &remote)
		if r, ok := canceledRemote(err); ok {
			remote = r
		}
		if r, ok := timedOutRemote(err); ok && expire.After(in.GetExpireTime().AsTime()) && workflow.Now(ctx).Before(expire) {
			// The invocation was extended while the stream was followed
			// until the old expiry: the task is polled from where the
			// stream left it.
			remote, err = r, nil
		}
	} else {
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, send), ActivitySendMessage, in).Get(ctx, &remote)
	}
	if err == nil {
		st.TaskId, st.ContextId = remote.TaskID, remote.ContextID
		st.ProtocolVersion, st.ProtocolBinding = remote.Version, remote.Binding
		apply(st, remote)
	}
	// The first poll comes soon; later ones less often.
	for wait := FirstPoll; err == nil && st.GetStatus() == remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING; wait = min(2*wait, MaxPoll) {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("The remote agent is working on task %s (%s).", remote.TaskID, remote.State))
		left := expire.Sub(workflow.Now(ctx))
		if left <= 0 {
			break
		}
		if err = workflow.Sleep(ctx, min(wait, left)); err != nil {
			break
		}
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, poll), ActivityGetTask, remote.ref()).Get(ctx, &remote)
		if err == nil {
			apply(st, remote)
		}
	}

	ended = true
	status := StatusFailed
	switch {
	case err != nil && (temporal.IsCanceledError(err) || temporal.IsCanceledError(ctx.Err())):
		// Tell the remote agent, on a context the cancellation does not
		// reach; a task it never opened needs no cancel.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		if remote.TaskID != "" {
			if cerr := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, cancelOpts), ActivityCancelTask,
				remote.ref()).Get(ctx, nil); cerr != nil {
				log.Warn("remoteagents.invoke.cancel_failed", "invocation_id", in.GetInvocationId(), "error", cerr)
			}
		}
		st.Status, st.RemoteState = remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED, "canceled"
		status = StatusCancelled
	case err != nil && temporal.IsTimeoutError(err) && !workflow.Now(ctx).Before(expire):
		// StreamMessage runs until the invocation expires.
		st.Status, st.Error = remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED, "the remote agent did not finish before the invocation expired"
	case err != nil:
		st.Status, st.Error = remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED, failure(err)
	case st.GetStatus() == remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING:
		st.Status, st.Error = remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED, "the remote agent did not finish before the invocation expired"
	default:
		status = searchStatus(st.GetStatus())
	}
	st.ResolveTime = timestamppb.New(workflow.Now(ctx))
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus).ValueSet(status)); err != nil {
		return nil, err
	}
	workflow.SetCurrentDetails(ctx, "Ended: "+status)

	rctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: time.Minute},
		Summary:                "Record the outcome with RemoteAgentsService",
	})
	rec := &remoteagentsv1.RecordInvocationOutcomeRequest{InvocationId: st.GetInvocationId(), Status: st.GetStatus(), Answer: clip(st.GetAnswer(), 100000),
		TaskId: st.GetTaskId(), ContextId: st.GetContextId(), RemoteState: st.GetRemoteState(), Error: clip(st.GetError(), 4000), ResolveTime: st.GetResolveTime(),
		ProtocolVersion: st.GetProtocolVersion(), ProtocolBinding: st.GetProtocolBinding()}
	if err := workflow.ExecuteLocalActivity(rctx, ActivityRecordOutcome, rec).Get(rctx, nil); err != nil {
		// The result still carries the outcome; the service records it
		// when it sees the result.
		log.Error("remoteagents.invoke.record_failed", "invocation_id", in.GetInvocationId(), "error", err)
	}
	// An extension's audit record is written before the workflow ends.
	_ = workflow.Await(ctx, func() bool { return auditing == 0 })
	if status == StatusCancelled {
		return nil, temporal.NewCanceledError("the invocation was cancelled")
	}
	return st, nil
}

// recordExtension records an accepted extension in the audit trail
// (workflowaudit.Record).
func recordExtension(ctx workflow.Context, up *remoteagentsv1.ExtendInvocationUpdate) {
	workflowaudit.Record(ctx, ActivityRecordExtension, up, up.GetCallId(), "remoteagents.invoke.extension_not_audited")
}

// apply moves the invocation to where the remote task is.
func apply(st *remoteagentsv1.InvokeOutcome, r Remote) {
	st.RemoteState = r.State
	if r.TaskID != "" {
		st.TaskId = r.TaskID
	}
	if r.ContextID != "" {
		st.ContextId = r.ContextID
	}
	if r.Answer != "" {
		st.Answer = r.Answer
	}
	st.Status = StatusOf(r.State)
}

// StatusOf maps an A2A task state to an invocation's status.
func StatusOf(state string) remoteagentsv1.InvocationStatus {
	switch state {
	case "completed":
		return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED
	case "failed":
		return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_FAILED
	case "canceled":
		return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED
	case "rejected":
		return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_REJECTED
	case "input-required", "auth-required":
		return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_INPUT_REQUIRED
	}
	// submitted, working, unknown: still going.
	return remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING
}

func searchStatus(s remoteagentsv1.InvocationStatus) string {
	switch s {
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_COMPLETED:
		return StatusCompleted
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED:
		return StatusCancelled
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_REJECTED:
		return StatusRejected
	case remoteagentsv1.InvocationStatus_INVOCATION_STATUS_INPUT_REQUIRED:
		return StatusInputRequired
	}
	return StatusFailed
}

// failure is what an activity's error says, without the SDK's wrapping.
func failure(err error) string {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return app.Message()
	}
	return err.Error()
}
