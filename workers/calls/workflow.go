// Package calls runs tool calls that a workflow carries, on the "calls" task
// queue: calls that need more input from the user before they can run (MCP
// multi-round elicitation, SEP-2322), and calls that are MCP tasks.
//
// The edge starts one ElicitedCall workflow per such call with
// update-with-start and delivers every round of answers as a "round" update;
// the edge itself keeps nothing. The workflow holds the arguments and the
// answers so far, decides the next question (which may depend on the
// previous answers: a confirmation shows the preview of what the gathered
// arguments would do), and after the last round calls the tool's service
// once, in an activity, with an idempotency key derived from the workflow id.
// Its update validator refuses a stale or repeated round without writing to
// the history, so a round's answers are applied at most once whichever edge
// instance delivers them, however often.
//
// A call nobody answers is given up after the round timeout: the workflow
// fails with an Abandoned error and its ToolmeshStatus search attribute says
// "abandoned".
//
// A call that is an MCP task (ElicitedCallInput.task; the workflow id is the
// task id) asks its FIELDS steps in rounds as above; from its first later
// question on, or at once when there is none, it is the task (task.go): its
// questions are answered with "answer" updates (tasks/update) — bound to the
// caller, checked against their forms, applied once — the "task" query shows
// where it is, and its side effect runs in the workflow's main loop, in an
// activity that heartbeats, so that cancelling the workflow (tasks/cancel)
// cancels the service call.
package calls

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Contract is the elicited call's workflow contract (name, task queue, id
// prefix), shared with the edge through toolmesh.calls.v1.
func Contract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&callsv1.ElicitedCallInput{})
}

// RoundUpdate is the update that delivers a round.
func RoundUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&callsv1.RoundRequest{})
}

// PendingQuery is the query that returns the pending question or the
// result.
func PendingQuery() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&callsv1.PendingQuery{})
}

// AnswerUpdate is the update that delivers a task's answers.
func AnswerUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&callsv1.AnswerRequest{})
}

// ExtendUpdate is the update that moves a running task's deadline.
func ExtendUpdate() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&callsv1.ExtendTaskUpdate{})
}

// TaskQuery is the query that shows a running call as an MCP task.
func TaskQuery() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&callsv1.TaskQuery{})
}

// Activity names (private to this queue: only the workflow schedules them).
// They are the activity types in every recorded history: never change one
// (docs/temporal-versioning.md).
const (
	ActivityInvoke  = "calls.invoke"
	ActivityPreview = "calls.preview"
	// ActivityRecordExtension records a task's extension in the audit
	// trail.
	ActivityRecordExtension = "calls.record_extension"
	// ActivityEndVisit tells a tool's service that the call which asked
	// for a visit ended without it.
	ActivityEndVisit = "calls.end_visit"
)

// Values of the ToolmeshStatus search attribute.
const (
	StatusWaiting   = "waiting"   // a question is out (the edge sets it at start)
	StatusRunning   = "running"   // a task's side effect runs
	StatusSucceeded = "succeeded" // the call ran and succeeded
	StatusFailed    = "failed"    // the call ran (or was refused) with an error
	StatusDeclined  = "declined"  // the user declined or cancelled
	StatusAbandoned = "abandoned" // nobody answered in time
	StatusCancelled = "cancelled" // an operator cancelled the workflow
)

// ErrTypeAbandoned is the failure type of an abandoned call.
const ErrTypeAbandoned = "Abandoned"

// KindTask is the ToolmeshKind of a call that is an MCP task (the edge
// starts every call with its contract's id prefix, "call").
const KindTask = "task"

// callTimeout is the deadline of the call's service calls: the one its
// input carries (the edge always sets it), or, for the input of an edge
// that did not, the mesh's default.
func callTimeout(d *durationpb.Duration) time.Duration {
	return durationOr(d, toolcall.DefaultTimeout)
}

// Refusals of the round validator. The edge shows them all alike.
var (
	errOver      = errors.New("the call is over")
	errBusy      = errors.New("a round of this call is being answered")
	errStale     = errors.New("stale or repeated round")
	errArguments = errors.New("the arguments differ from the call's")
	errTask      = errors.New("the call is an MCP task: its questions are answered with tasks/update")
)

// IdempotencyKey is the key the call's side effect is stored under by its
// service: derived from the workflow id, so every attempt of the call's one
// activity, on any worker, applies once.
func IdempotencyKey(workflowID string) string {
	return strings.ReplaceAll(workflowID, "/", ":")
}

// call is the state of one elicited call.
type call struct {
	in      *callsv1.ElicitedCallInput
	args    map[string]json.RawMessage
	timeout time.Duration

	round    int32             // the round of the questions out (0: none yet)
	step     int               // index of the step being asked
	pending  []*pending        // the questions out
	elicited []string          // fields whose values came from answers
	note     string            // prefixed to the next question (why it is asked again)
	notes    map[string]string // the same, by question, for QUESTIONS steps

	deadline time.Time // when the round out is given up
	state    string    // the ToolmeshStatus last set
	kind     string    // the ToolmeshKind last set

	task    bool      // the call is an MCP task (in.task, past its FIELDS rounds)
	ready   bool      // a task that asks nothing more: the main loop runs it
	message string    // what the call does, for people (the task's view)
	updated time.Time // when it last changed

	// running says a task's side effect runs under its deadline
	// (extendable): taskDeadline is when it is given up, taskMax the
	// latest an extension may move it to; auditing counts the extensions
	// whose audit record is being written.
	running               bool
	taskDeadline, taskMax time.Time
	auditing              int

	busy      bool
	done      bool
	abandoned bool
	final     string               // the final envelope
	current   *callsv1.RoundResult // the pending question, or the result
	callID    string               // the side effect's idempotency key, once it ran

	// skipped are the tool's questions given up for their fallback (an
	// answer that broke the field's rules), by name; notes say so in the
	// result, after the edge's (in.notes).
	skipped  map[string]bool
	notesOut []string

	// visitRounds are the rounds that asked for a visit (askVisit), and
	// visitAsked says the edge's visit (in.visit) was asked.
	visitRounds int
	visitAsked  bool
	// visit is the visit asked for and not done (nil once the service
	// answered otherwise): the call's end tells the service (endVisit).
	visit *toolv1.VisitRequired
}

// pending is a question of the current round.
type pending struct {
	key     string
	name    string // the key's last part: the step's, or the tool's question's
	kind    callsv1.StepKind
	fields  []string
	schema  *structpb.Struct
	message string

	// Of a tool's question (QUESTIONS): what it asks of whom, how a
	// completion is bounded, what the call does without the answer, and
	// the literal key it is asked under ("" for "r<round>.<name>").
	input        callsv1.InputKind
	maxTokens    int32
	systemPrompt string
	fallback     string
	literalKey   string

	// Of a visit (URL): the page and the visit's id.
	url, visitID string
}

// question is q as the round carries it.
func (q *pending) question() *callsv1.Question {
	out := &callsv1.Question{Key: q.key, Message: q.message, Kind: q.input}
	switch q.input {
	case callsv1.InputKind_INPUT_KIND_SAMPLING:
		out.MaxTokens, out.SystemPrompt = q.maxTokens, q.systemPrompt
	case callsv1.InputKind_INPUT_KIND_ROOTS:
	case callsv1.InputKind_INPUT_KIND_URL:
		out.Url, out.ElicitationId = q.url, q.visitID
	default:
		out.RequestedSchema = q.schema
	}
	return out
}

// ElicitedCall is the workflow of one elicited tool call. It returns the
// final round's result (the call's envelope) or fails as abandoned.
func ElicitedCall(ctx workflow.Context, in *callsv1.ElicitedCallInput) (*callsv1.RoundResult, error) {
	c := &call{in: in, timeout: durationOr(in.GetRoundTimeout(), toolcall.RoundTimeout(toolcall.DefaultStateTTL)), notes: map[string]string{}}
	c.state, _ = workflow.GetTypedSearchAttributes(ctx).GetKeyword(statusKey())
	c.kind, _ = workflow.GetTypedSearchAttributes(ctx).GetKeyword(kindKey())
	c.updated = workflow.Now(ctx)
	if err := json.Unmarshal([]byte(in.GetArguments()), &c.args); err != nil || c.args == nil {
		c.args = map[string]json.RawMessage{}
	}
	round := RoundUpdate()
	if err := workflow.SetUpdateHandlerWithOptions(ctx, round.Name, c.onRound, workflow.UpdateHandlerOptions{
		Validator:   c.validate,
		Description: round.Description,
	}); err != nil {
		return nil, err
	}
	pending := PendingQuery()
	if err := workflow.SetQueryHandlerWithOptions(ctx, pending.Name, func() (*callsv1.RoundResult, error) {
		return c.current, nil
	}, workflow.QueryHandlerOptions{Description: pending.Description}); err != nil {
		return nil, err
	}
	if err := c.handleTask(ctx); err != nil {
		return nil, err
	}
	// One timer runs at a time, to the deadline of the round out; a round
	// moves the deadline without touching the timer (a middle round then
	// costs no timer commands), and a timer that fires early is followed by
	// one for the rest.
	c.deadline = workflow.Now(ctx).Add(c.timeout)
	for !c.done {
		if c.ready && !c.busy {
			// A task that asks nothing more runs here, outside any update,
			// for as long as its call takes.
			if err := c.runTask(ctx); err != nil {
				return nil, c.cancelled(ctx, err)
			}
			continue
		}
		if wait := c.deadline.Sub(workflow.Now(ctx)); wait > 0 {
			if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return c.done || (c.ready && !c.busy) }); err != nil {
				return nil, c.cancelled(ctx, err)
			}
			continue
		}
		if c.busy {
			if err := workflow.Await(ctx, func() bool { return !c.busy }); err != nil {
				return nil, c.cancelled(ctx, err)
			}
			continue
		}
		c.abandon(ctx)
	}
	// An extension's audit record is written before the workflow ends.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && c.auditing == 0 }); err != nil {
		return nil, err
	}
	c.endVisit(ctx)
	if c.abandoned {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("abandoned: round %d of %s got no answer within %s", c.round, c.in.GetTool(), c.timeout), ErrTypeAbandoned, nil)
	}
	return &callsv1.RoundResult{Envelope: c.final, CallId: c.callID}, nil
}

// validate refuses a round that is not the one the call waits for: late,
// repeated, concurrent with another, or for other arguments. A refused
// update leaves no trace in the history.
func (c *call) validate(req *callsv1.RoundRequest) error {
	switch {
	case c.done:
		return errOver
	case c.task:
		return errTask
	case c.busy:
		return errBusy
	case req.GetRound() != c.round:
		return errStale
	case req.GetArgumentsDigest() != c.in.GetArgumentsDigest():
		return errArguments
	}
	return nil
}

// onRound applies a round's answers and returns the next question or the
// final result. It never fails: every outcome is a result.
func (c *call) onRound(ctx workflow.Context, req *callsv1.RoundRequest) (*callsv1.RoundResult, error) {
	// A round arriving while another is answered was refused by validate;
	// this guards a second one delivered before the first handler ran.
	if c.busy || c.done || req.GetRound() != c.round {
		return nil, temporal.NewNonRetryableApplicationError(errStale.Error(), "StaleRound", nil)
	}
	c.busy = true
	defer func() { c.busy = false }()
	if req.GetRound() > 0 {
		if res := c.apply(ctx, req.GetAnswers()); res != nil {
			return res, nil
		}
	}
	return c.next(ctx), nil
}

// finish ends the call with env.
func (c *call) finish(ctx workflow.Context, env *toolcall.Envelope, status string) *callsv1.RoundResult {
	// The fallbacks taken, also on an error: they may say why it came.
	if len(c.in.GetNotes()) > 0 || len(c.notesOut) > 0 {
		env.Notes = append(append(env.Notes, c.in.GetNotes()...), c.notesOut...)
	}
	b, err := json.Marshal(env)
	if err != nil {
		b = []byte(`{"status":"error","error_type":"InternalError","domain_code":"internal","message":"encode result"}`)
	}
	c.done, c.final = true, string(b)
	c.pending = nil
	summary := "succeeded"
	if env.IsError() {
		summary = env.DomainCode + ": " + env.Message
	}
	c.changed(ctx, "The call is over: "+summary)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("`%s` is over after %d round(s): %s", c.in.GetTool(), c.round, summary))
	c.status(ctx, status)
	c.current = &callsv1.RoundResult{Envelope: c.final}
	return c.current
}

// cancelled records that an operator cancelled the call (its rounds are
// refused from then on) and returns err, the cancellation.
func (c *call) cancelled(ctx workflow.Context, err error) error {
	c.done = true
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("**Cancelled** in round %d of `%s`; nothing was done.", c.round, c.in.GetTool()))
	c.status(dctx, StatusCancelled)
	c.endVisit(dctx)
	return err
}

// abandon gives the call up: nobody answered the pending question in time.
func (c *call) abandon(ctx workflow.Context) {
	c.done, c.abandoned = true, true
	what := "its first round"
	if len(c.pending) > 0 {
		what = strings.Join(pendingFields(c.pending), ", ")
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Abandoned**: round %d of `%s` (%s) got no answer within %s; nothing was done.", c.round, c.in.GetTool(), what, c.timeout))
	c.status(ctx, StatusAbandoned)
}

// status sets the ToolmeshStatus search attribute when it changes (an
// upsert is a command and a visibility write: middle rounds make none), and,
// in the same upsert, ToolmeshKind once the call became a task.
func (c *call) status(ctx workflow.Context, s string) {
	var updates []temporal.SearchAttributeUpdate
	if s != c.state {
		updates = append(updates, statusKey().ValueSet(s))
	}
	kind := c.task && c.kind != KindTask
	if kind {
		updates = append(updates, kindKey().ValueSet(KindTask))
	}
	if len(updates) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("calls.status_not_recorded", "status", s, "error", err)
		return
	}
	c.state = s
	if kind {
		c.kind = KindTask
	}
}

// changed records what the call does from now on, for its task's view.
func (c *call) changed(ctx workflow.Context, message string) {
	c.message, c.updated = message, workflow.Now(ctx)
}

func statusKey() temporal.SearchAttributeKeyKeyword {
	return temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus)
}

func kindKey() temporal.SearchAttributeKeyKeyword {
	return temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrKind)
}

func maxRounds(in *callsv1.ElicitedCallInput) int {
	if n := in.GetMaxRounds(); n > 0 {
		return int(n)
	}
	return toolcall.DefaultMaxRounds
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil || d.AsDuration() <= 0 {
		return def
	}
	return d.AsDuration()
}
