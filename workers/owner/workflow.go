// Package owner is the worker of the "owner" task queue: the ask workflow
// and its activities. The workflow's names (type, task queue, id prefix,
// handlers) come from the toolmesh.owner.v1 contract messages, which
// OwnerService reads too; neither side imports the other.
//
// An ask workflow notifies the owner, then waits until the owner answers —
// the "answer" update, validated so a wrong answer leaves no trace, or the
// "answer" signal — or the ask expires, or it is cancelled. It records the
// outcome with OwnerService before it ends, so the service's record is
// current by the time anyone sees the workflow's result.
package owner

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowaudit"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md).
const (
	ActivityNotifyOwner     = "NotifyOwner"
	ActivityRecordOutcome   = "RecordOutcome"
	ActivityRecordExtension = "RecordExtension"
)

// ToolmeshStatus values of an ask workflow. OwnerService starts it as
// "waiting".
const (
	StatusWaiting   = "waiting"
	StatusAnswered  = "answered"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// AnsweredByTemporal names the answerer of an update or signal that names
// none (the Temporal UI or CLI).
const AnsweredByTemporal = "temporal"

// Contract names, read from the proto options.
func askContract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&ownerv1.AskWorkflowInput{})
}
func answerUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&ownerv1.AnswerUpdate{})
}
func answerSignal() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&ownerv1.AnswerSignal{})
}
func statusQuery() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&ownerv1.StatusQuery{})
}
func extendUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&ownerv1.ExtendUpdate{})
}

// TaskQueue is the queue this worker polls ("owner").
func TaskQueue() string { return askContract().TaskQueue }

// Register adds the ask workflow and its activities to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterWorkflows adds the ask workflow, under its contract name, to r (a
// worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(AskWorkflow, workflow.RegisterOptions{Name: askContract().Name})
}

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.NotifyOwner, activity.RegisterOptions{Name: ActivityNotifyOwner})
	r.RegisterActivityWithOptions(a.RecordOutcome, activity.RegisterOptions{Name: ActivityRecordOutcome})
	r.RegisterActivityWithOptions(a.RecordExtension, activity.RegisterOptions{Name: ActivityRecordExtension})
}

// State is the ask as the status query and the answer update report it:
// plain JSON (not protobuf JSON), so that `temporal workflow query` and
// `temporal workflow update execute` print it as it is. The workflow's
// result is the typed ownerv1.AskOutcome.
type State struct {
	AskID      string `json:"ask_id"`
	Status     string `json:"status"` // waiting, answered, expired or cancelled
	Answer     string `json:"answer,omitempty"`
	AnsweredBy string `json:"answered_by,omitempty"`
	// ExpireTime is when the ask expires unless answered (RFC 3339).
	ExpireTime string `json:"expire_time,omitempty"`
}

// ask is the state of one ask workflow.
type ask struct {
	in      *ownerv1.AskWorkflowInput
	outcome *ownerv1.AskOutcome
	// expire is when it expires: the input's, then the extend updates'.
	expire time.Time
	// auditing counts extensions still being recorded in the audit trail.
	auditing int
}

func (a *ask) state() State {
	return State{AskID: a.in.GetAskId(), Status: statusOf(a.outcome.GetStatus()), Answer: a.outcome.GetAnswer(), AnsweredBy: a.outcome.GetAnsweredBy(),
		ExpireTime: a.expire.UTC().Format(time.RFC3339Nano)}
}

// checkExtend says whether the ask may expire at expire instead.
func (a *ask) checkExtend(expire time.Time) error {
	if !a.waiting() {
		return temporal.NewApplicationError(fmt.Sprintf("the ask is no longer waiting: it is %s", statusOf(a.outcome.GetStatus())),
			ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING.String())
	}
	if !expire.After(a.expire) {
		return temporal.NewApplicationError(fmt.Sprintf("the new expire time %s is not later than the ask's expiry %s",
			expire.UTC().Format(time.RFC3339), a.expire.UTC().Format(time.RFC3339)), ownerv1.AskRejection_ASK_REJECTION_INVALID_EXPIRY.String())
	}
	return nil
}

func (a *ask) waiting() bool { return a.outcome.GetStatus() == ownerv1.AskStatus_ASK_STATUS_PENDING }

// check says whether answer may answer the ask now; the error is what the
// update's caller reads.
func (a *ask) check(answer string) error {
	if !a.waiting() {
		return temporal.NewApplicationError(fmt.Sprintf("the ask is no longer waiting: it is %s", statusOf(a.outcome.GetStatus())),
			ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING.String())
	}
	if strings.TrimSpace(answer) == "" {
		return temporal.NewApplicationError("the answer is empty", ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER.String())
	}
	if opts := a.in.GetOptions(); len(opts) > 0 && !slices.Contains(opts, answer) {
		return temporal.NewApplicationError(fmt.Sprintf("the answer must be one of the options: %q", opts),
			ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER.String())
	}
	return nil
}

func (a *ask) answer(ctx workflow.Context, answer, by string) {
	if by == "" {
		by = AnsweredByTemporal
	}
	a.outcome = &ownerv1.AskOutcome{
		AskId:       a.in.GetAskId(),
		Status:      ownerv1.AskStatus_ASK_STATUS_ANSWERED,
		Answer:      answer,
		AnsweredBy:  by,
		ResolveTime: timestamppb.New(workflow.Now(ctx)),
	}
}

// AskWorkflow is the owner.ask workflow.
func AskWorkflow(ctx workflow.Context, in *ownerv1.AskWorkflowInput) (*ownerv1.AskOutcome, error) {
	log := workflow.GetLogger(ctx)
	a := &ask{in: in, outcome: &ownerv1.AskOutcome{AskId: in.GetAskId(), Status: ownerv1.AskStatus_ASK_STATUS_PENDING}, expire: in.GetExpireTime().AsTime()}

	q := statusQuery()
	if err := workflow.SetQueryHandlerWithOptions(ctx, q.Name, func() (State, error) { return a.state(), nil },
		workflow.QueryHandlerOptions{Description: q.Description}); err != nil {
		return nil, err
	}
	u := answerUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, u.Name,
		func(ctx workflow.Context, up *ownerv1.AnswerUpdate) (State, error) {
			a.answer(ctx, up.GetAnswer(), up.GetAnsweredBy())
			return a.state(), nil
		},
		workflow.UpdateHandlerOptions{
			// Runs before the update is accepted: a refusal is written
			// nowhere, the history stays as it was.
			Validator:   func(_ workflow.Context, up *ownerv1.AnswerUpdate) error { return a.check(up.GetAnswer()) },
			Description: u.Description,
		}); err != nil {
		return nil, err
	}
	x := extendUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, x.Name,
		func(ctx workflow.Context, up *ownerv1.ExtendUpdate) (State, error) {
			a.expire = up.GetExpireTime().AsTime()
			if up.GetRequestedBy() == "" { // sent from the Temporal UI or CLI
				up.RequestedBy = AnsweredByTemporal
			}
			if up.GetCallId() == "" {
				up.CallId = "owner-extend:" + workflow.GetCurrentUpdateInfo(ctx).ID
			}
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("Waiting for the owner's answer (extended by %s until %s).",
				up.GetRequestedBy(), a.expire.UTC().Format(time.RFC3339)))
			a.auditing++
			workflow.Go(ctx, func(ctx workflow.Context) {
				recordExtension(ctx, up)
				a.auditing--
			})
			return a.state(), nil
		},
		workflow.UpdateHandlerOptions{
			Validator: func(_ workflow.Context, up *ownerv1.ExtendUpdate) error {
				return a.checkExtend(up.GetExpireTime().AsTime())
			},
			Description: x.Description,
		}); err != nil {
		return nil, err
	}
	s := answerSignal()
	signals := workflow.GetSignalChannelWithOptions(ctx, s.Name, workflow.SignalChannelOptions{Description: s.Description})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sig ownerv1.AnswerSignal
			signals.Receive(ctx, &sig)
			if err := a.check(sig.GetAnswer()); err != nil {
				// A signal cannot be refused; it is ignored.
				log.Warn("owner.ask.signal_ignored", "ask_id", in.GetAskId(), "reason", err.Error())
				continue
			}
			a.answer(ctx, sig.GetAnswer(), sig.GetAnsweredBy())
		}
	})

	workflow.SetCurrentDetails(ctx, "Waiting for the owner's answer.")
	// The notification goes out beside the wait: an owner who answers
	// before it is delivered is not kept waiting for it.
	workflow.Go(ctx, func(ctx workflow.Context) {
		nctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 8},
			Summary:             "Notify the owner's channels",
		})
		if err := workflow.ExecuteActivity(nctx, ActivityNotifyOwner, in).Get(nctx, nil); err != nil && !temporal.IsCanceledError(err) {
			log.Warn("owner.ask.notify_failed", "ask_id", in.GetAskId(), "error", err)
		}
	})

	// Wait for the answer until the ask expires; an extension moves the
	// expiry, and the wait starts again with a new timer. (An ask never
	// extended issues exactly the commands it issued before extensions
	// existed.)
	var err error
	for a.waiting() {
		expire := a.expire
		wait := expire.Sub(workflow.Now(ctx))
		if wait <= 0 {
			break
		}
		var ok bool
		ok, err = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
			Timeout:      wait,
			TimerOptions: workflow.TimerOptions{Summary: "The ask expires unless answered"},
		}, func() bool { return !a.waiting() || !a.expire.Equal(expire) })
		if err != nil || !ok {
			break
		}
	}
	status := StatusAnswered
	switch {
	case err != nil && temporal.IsCanceledError(err):
		a.outcome = &ownerv1.AskOutcome{AskId: in.GetAskId(), Status: ownerv1.AskStatus_ASK_STATUS_CANCELLED, ResolveTime: timestamppb.New(workflow.Now(ctx))}
		status = StatusCancelled
		// Record on a context the cancellation does not reach.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	case err != nil:
		return nil, err
	case a.waiting():
		a.outcome = &ownerv1.AskOutcome{AskId: in.GetAskId(), Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, ResolveTime: timestamppb.New(workflow.Now(ctx))}
		status = StatusExpired
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus).ValueSet(status)); err != nil {
		return nil, err
	}
	workflow.SetCurrentDetails(ctx, describe(a.outcome))

	// A local activity: it runs in this workflow task, so the workflow ends
	// (and whoever waits on its result hears of it) without another trip
	// through the task queue.
	rctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: time.Minute},
		Summary:                "Record the outcome with OwnerService",
	})
	rec := &ownerv1.RecordAskOutcomeRequest{AskId: in.GetAskId(), Status: a.outcome.GetStatus(), Answer: a.outcome.GetAnswer(),
		AnsweredBy: a.outcome.GetAnsweredBy(), ResolveTime: a.outcome.GetResolveTime()}
	if err := workflow.ExecuteLocalActivity(rctx, ActivityRecordOutcome, rec).Get(rctx, nil); err != nil {
		// The result still carries the outcome; OwnerService records it
		// when it sees the result.
		log.Error("owner.ask.record_failed", "ask_id", in.GetAskId(), "error", err)
	}
	// An extension still being recorded finishes first.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && a.auditing == 0 }); err != nil {
		return nil, err
	}
	if status == StatusCancelled {
		return nil, temporal.NewCanceledError("the ask was cancelled")
	}
	return a.outcome, nil
}

// recordExtension records an extension in the audit trail beside the wait
// (workflowaudit.Record).
func recordExtension(ctx workflow.Context, up *ownerv1.ExtendUpdate) {
	workflowaudit.Record(ctx, ActivityRecordExtension, up, up.GetCallId(), "owner.ask.extension_not_audited")
}

// describe is the workflow's current details once it has ended.
func describe(o *ownerv1.AskOutcome) string {
	switch o.GetStatus() {
	case ownerv1.AskStatus_ASK_STATUS_ANSWERED:
		return fmt.Sprintf("Answered by %s: %s", o.GetAnsweredBy(), o.GetAnswer())
	case ownerv1.AskStatus_ASK_STATUS_EXPIRED:
		return "Expired without an answer."
	case ownerv1.AskStatus_ASK_STATUS_CANCELLED:
		return "Cancelled by the asking agent."
	}
	return statusOf(o.GetStatus())
}

func statusOf(st ownerv1.AskStatus) string {
	switch st {
	case ownerv1.AskStatus_ASK_STATUS_PENDING:
		return StatusWaiting
	case ownerv1.AskStatus_ASK_STATUS_ANSWERED:
		return StatusAnswered
	case ownerv1.AskStatus_ASK_STATUS_EXPIRED:
		return StatusExpired
	case ownerv1.AskStatus_ASK_STATUS_CANCELLED:
		return StatusCancelled
	}
	return st.String()
}
