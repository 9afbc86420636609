// Package calls runs tool calls that need more input from the user before
// they can run (MCP multi-round elicitation, SEP-2322), on the "calls" task
// queue.
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
package calls

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
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

// Activity names (private to this queue: only the workflow schedules them).
const (
	ActivityInvoke  = "calls.invoke"
	ActivityPreview = "calls.preview"
)

// Values of the ToolmeshStatus search attribute.
const (
	StatusWaiting   = "waiting"   // a question is out (the edge sets it at start)
	StatusSucceeded = "succeeded" // the call ran and succeeded
	StatusFailed    = "failed"    // the call ran (or was refused) with an error
	StatusDeclined  = "declined"  // the user declined or cancelled
	StatusAbandoned = "abandoned" // nobody answered in time
	StatusCancelled = "cancelled" // an operator cancelled the workflow
)

// ErrTypeAbandoned is the failure type of an abandoned call.
const ErrTypeAbandoned = "Abandoned"

// Defaults of an input that leaves them out.
const (
	DefaultRoundTimeout = 11 * time.Minute
	DefaultMaxRounds    = 8
	DefaultCallTimeout  = 15 * time.Second
)

// Refusals of the round validator. The edge shows them all alike.
var (
	errOver      = errors.New("the call is over")
	errBusy      = errors.New("a round of this call is being answered")
	errStale     = errors.New("stale or repeated round")
	errArguments = errors.New("the arguments differ from the call's")
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

	round    int32    // the round of the question that is out (0: none yet)
	step     int      // index of the step being asked
	pending  *pending // the question that is out
	elicited []string // fields whose values came from answers
	note     string   // prefixed to the next question (why it is asked again)

	deadline time.Time // when the round out is given up
	state    string    // the ToolmeshStatus last set

	busy      bool
	done      bool
	abandoned bool
	final     string               // the final envelope
	current   *callsv1.RoundResult // the pending question, or the result
	callID    string               // the side effect's idempotency key, once it ran
}

// pending is the question of the current round.
type pending struct {
	key    string
	kind   callsv1.StepKind
	fields []string
	schema *structpb.Struct
}

// ElicitedCall is the workflow of one elicited tool call. It returns the
// final round's result (the call's envelope) or fails as abandoned.
func ElicitedCall(ctx workflow.Context, in *callsv1.ElicitedCallInput) (*callsv1.RoundResult, error) {
	c := &call{in: in, timeout: durationOr(in.GetRoundTimeout(), DefaultRoundTimeout)}
	c.state, _ = workflow.GetTypedSearchAttributes(ctx).GetKeyword(statusKey())
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
	// One timer runs at a time, to the deadline of the round out; a round
	// moves the deadline without touching the timer (a middle round then
	// costs no timer commands), and a timer that fires early is followed by
	// one for the rest.
	c.deadline = workflow.Now(ctx).Add(c.timeout)
	for !c.done {
		if wait := c.deadline.Sub(workflow.Now(ctx)); wait > 0 {
			if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return c.done }); err != nil {
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
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return nil, err
	}
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

// apply takes the answer to the pending question. It returns a result when
// the answer ends the call or the question must be asked again, nil when the
// call moves on.
func (c *call) apply(ctx workflow.Context, answers map[string]*callsv1.Answer) *callsv1.RoundResult {
	q := c.pending
	a, ok := answers[q.key]
	if !ok || a.GetAction() == callsv1.Action_ACTION_UNSPECIFIED {
		return c.reask(ctx, "No answer was given. ")
	}
	switch a.GetAction() {
	case callsv1.Action_ACTION_DECLINE:
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user declined to %s; nothing was done.", c.what(q.kind))), StatusDeclined)
	case callsv1.Action_ACTION_CANCEL:
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user cancelled instead of answering (%s); nothing was done.", c.what(q.kind))), StatusDeclined)
	}
	content := a.GetContent().AsMap()
	if confirm, ok := content[toolcall.AdminConfirm]; ok && confirm == false && q.kind != callsv1.StepKind_STEP_KIND_FIELDS {
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user did not confirm %s; nothing was done.", c.in.GetTool())), StatusDeclined)
	}
	// The answers given are checked against the form (required aside) and
	// kept; what is still missing is asked again, alone.
	missing := missingProperties(q.schema, content)
	var given []string
	for _, f := range q.fields {
		if _, ok := content[f]; ok && !slices.Contains(missing, f) {
			given = append(given, f)
		}
	}
	if err := validateAnswer(optional(subSchema(q.schema, given)), content); err != nil {
		return c.reask(ctx, fmt.Sprintf("That answer does not fit: %s. ", err))
	}
	switch q.kind {
	case callsv1.StepKind_STEP_KIND_FIELDS:
		for _, f := range given {
			b, err := json.Marshal(content[f])
			if err != nil {
				continue
			}
			c.args[f] = b
			if !slices.Contains(c.elicited, f) {
				c.elicited = append(c.elicited, f)
			}
		}
	case callsv1.StepKind_STEP_KIND_ADMIN:
		if slices.Contains(given, toolcall.AdminConfirm) {
			c.args[toolcall.AdminConfirm] = json.RawMessage("true") // false declined above
		}
		if slices.Contains(given, toolcall.AdminReason) {
			b, _ := json.Marshal(content[toolcall.AdminReason])
			c.args[toolcall.AdminReason] = b
		}
	case callsv1.StepKind_STEP_KIND_PREVIEW:
		if content[toolcall.AdminConfirm] != true {
			return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
				fmt.Sprintf("The user did not confirm %s; nothing was done.", c.in.GetTool())), StatusDeclined)
		}
	}
	if len(missing) > 0 {
		return c.reask(ctx, fmt.Sprintf("Still needed: %s. ", strings.Join(titles(q.schema, missing), ", ")))
	}
	c.step++
	return nil
}

// what names what a question asked, for the declined envelope.
func (c *call) what(kind callsv1.StepKind) string {
	switch kind {
	case callsv1.StepKind_STEP_KIND_FIELDS:
		return "give " + strings.Join(c.pending.fields, ", ") + " for " + c.in.GetTool()
	}
	return "confirm " + c.in.GetTool()
}

// next asks the first question of the plan whose input is still missing,
// or, when nothing is missing, runs the call.
func (c *call) next(ctx workflow.Context) *callsv1.RoundResult {
	steps := c.in.GetSteps()
	for c.step < len(steps) {
		st := steps[c.step]
		switch st.GetKind() {
		case callsv1.StepKind_STEP_KIND_FIELDS:
			var missing []string
			for _, f := range st.GetFields() {
				if v, ok := c.args[f]; !ok || string(v) == "null" {
					missing = append(missing, f)
				}
			}
			if len(missing) > 0 {
				return c.ask(ctx, st.GetKind(), missing, subSchema(st.GetRequestedSchema(), missing),
					fmt.Sprintf("%s needs more information: %s.", c.in.GetTitle(), strings.Join(titles(st.GetRequestedSchema(), missing), ", ")))
			}
		case callsv1.StepKind_STEP_KIND_ADMIN:
			if missing := toolcall.MissingAdmin(c.args); len(missing) > 0 {
				return c.ask(ctx, st.GetKind(), missing, subSchema(st.GetRequestedSchema(), missing),
					fmt.Sprintf("%s is an administrative action. Confirm it and give a reason; both are recorded in the audit trail.\nArguments: %s",
						c.in.GetTitle(), c.arguments(toolcall.AdminConfirm, toolcall.AdminReason)))
			}
		case callsv1.StepKind_STEP_KIND_PREVIEW:
			return c.preview(ctx, st)
		}
		c.step++
	}
	return c.run(ctx)
}

// preview calls the step's preview tool with the arguments gathered so far
// and asks the user to confirm what it shows. When the preview refuses the
// arguments, the fields the user gave are asked again, with the reason.
func (c *call) preview(ctx workflow.Context, st *callsv1.Step) *callsv1.RoundResult {
	env := c.activity(ctx, ActivityPreview, &callsv1.InvokeInput{
		Tool:      st.GetPreviewTool(),
		Arguments: c.arguments(),
		Caller:    c.in.GetCaller(),
		Timeout:   durationpb.New(durationOr(c.in.GetCallTimeout(), DefaultCallTimeout)),
	})
	if env.IsError() {
		if env.DomainCode == toolcall.CodeInvalidArgument && len(c.elicited) > 0 {
			if back := c.fieldsStep(); back >= 0 {
				for _, f := range c.elicited {
					delete(c.args, f)
				}
				c.elicited = nil
				c.step = back
				c.note = env.Message + ". "
				return c.next(ctx)
			}
		}
		env.Tool = c.in.GetTool()
		return c.finish(ctx, env, StatusFailed)
	}
	schema := &structpb.Struct{Fields: map[string]*structpb.Value{
		"type": structpb.NewStringValue("object"),
		"properties": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			toolcall.AdminConfirm: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"type":        structpb.NewStringValue("boolean"),
				"title":       structpb.NewStringValue("Confirm"),
				"description": structpb.NewStringValue("Run " + c.in.GetTool() + " as shown."),
			}}),
		}}),
		"required": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(toolcall.AdminConfirm)}}),
	}}
	return c.ask(ctx, callsv1.StepKind_STEP_KIND_PREVIEW, []string{toolcall.AdminConfirm}, schema,
		fmt.Sprintf("%s: please confirm.\n%s\nArguments: %s", c.in.GetTitle(), describe(env.Data), c.arguments()))
}

// fieldsStep is the index of the last FIELDS step before the current one,
// or -1.
func (c *call) fieldsStep() int {
	for i := min(c.step, len(c.in.GetSteps())) - 1; i >= 0; i-- {
		if c.in.GetSteps()[i].GetKind() == callsv1.StepKind_STEP_KIND_FIELDS {
			return i
		}
	}
	return -1
}

// ask puts out a new round with one question.
func (c *call) ask(ctx workflow.Context, kind callsv1.StepKind, fields []string, schema *structpb.Struct, message string) *callsv1.RoundResult {
	if int(c.round) >= maxRounds(c.in) {
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeInvalidArgument,
			fmt.Sprintf("%s asked %d rounds of questions without getting complete answers; call it again with the missing arguments", c.in.GetTool(), c.round)), StatusFailed)
	}
	c.round++
	key := fmt.Sprintf("r%d.%s", c.round, stepName(kind))
	c.pending = &pending{key: key, kind: kind, fields: fields, schema: schema}
	message = c.note + message
	c.note = ""
	deadline := workflow.Now(ctx).Add(c.timeout).UTC().Format(time.RFC3339)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Round %d** of `%s`: waiting until %s for %s.\n\n%s", c.round, c.in.GetTool(), deadline, strings.Join(fields, ", "), message))
	c.deadline = workflow.Now(ctx).Add(c.timeout)
	c.status(ctx, StatusWaiting)
	c.current = &callsv1.RoundResult{Round: c.round, Questions: []*callsv1.Question{{Key: key, Message: message, RequestedSchema: schema}}}
	return c.current
}

// reask asks the pending question again (for the fields still missing) as
// a new round, saying why.
func (c *call) reask(ctx workflow.Context, why string) *callsv1.RoundResult {
	c.note = why
	return c.next(ctx)
}

// run calls the tool's service once, with the gathered arguments, and ends
// the call with its result.
func (c *call) run(ctx workflow.Context) *callsv1.RoundResult {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Running `%s` after %d round(s) of questions.", c.in.GetTool(), c.round))
	env := c.activity(ctx, ActivityInvoke, &callsv1.InvokeInput{
		Tool:           c.in.GetTool(),
		Arguments:      c.arguments(),
		Caller:         c.in.GetCaller(),
		IdempotencyKey: IdempotencyKey(workflow.GetInfo(ctx).WorkflowExecution.ID),
		Audit:          c.in.GetAdmin(),
		Timeout:        durationpb.New(durationOr(c.in.GetCallTimeout(), DefaultCallTimeout)),
	})
	status := StatusSucceeded
	if env.IsError() {
		status = StatusFailed
	}
	c.callID = IdempotencyKey(workflow.GetInfo(ctx).WorkflowExecution.ID)
	res := c.finish(ctx, env, status)
	res.CallId = c.callID
	return res // also c.current
}

// activity runs a tool-calling activity and returns its envelope; an
// activity that fails after its retries becomes an unavailable envelope.
//
// It is a local activity: it runs on this worker inside the workflow task
// that took the round, so a round costs one workflow task, not three (the
// schedule, the activity task, the task that reads its result). Its result
// is recorded in the history like any activity's. A worker that dies after
// the service call but before the task completes makes another worker run
// it again, with the same idempotency key, which the service applies once.
func (c *call) activity(ctx workflow.Context, name string, in *callsv1.InvokeInput) *toolcall.Envelope {
	timeout := durationOr(in.GetTimeout(), DefaultCallTimeout)
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    timeout + 5*time.Second,
		ScheduleToCloseTimeout: 3 * (timeout + 5*time.Second),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    200 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumAttempts:    3,
		},
		Summary: in.GetTool(),
	})
	var out callsv1.InvokeOutput
	if err := workflow.ExecuteLocalActivity(actx, name, in).Get(actx, &out); err != nil {
		return failedAttempts(in.GetTool(), err)
	}
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(out.GetEnvelope()), &env); err != nil || env.Status == "" {
		return toolcall.Fail(in.GetTool(), toolcall.CodeInternal, "the call returned no result envelope")
	}
	return &env
}

// finish ends the call with env.
func (c *call) finish(ctx workflow.Context, env *toolcall.Envelope, status string) *callsv1.RoundResult {
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
	return err
}

// abandon gives the call up: nobody answered the pending question in time.
func (c *call) abandon(ctx workflow.Context) {
	c.done, c.abandoned = true, true
	what := "its first round"
	if c.pending != nil {
		what = strings.Join(c.pending.fields, ", ")
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Abandoned**: round %d of `%s` (%s) got no answer within %s; nothing was done.", c.round, c.in.GetTool(), what, c.timeout))
	c.status(ctx, StatusAbandoned)
}

// status sets the ToolmeshStatus search attribute when it changes (an
// upsert is a command and a visibility write: middle rounds make none).
func (c *call) status(ctx workflow.Context, s string) {
	if s == c.state {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, statusKey().ValueSet(s)); err != nil {
		workflow.GetLogger(ctx).Warn("calls.status_not_recorded", "status", s, "error", err)
		return
	}
	c.state = s
}

func statusKey() temporal.SearchAttributeKeyKeyword {
	return temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus)
}

// arguments is the JSON object of the arguments gathered so far, without
// the names left out (keys sorted: encoding/json sorts map keys).
func (c *call) arguments(leaveOut ...string) string {
	args := c.args
	if len(leaveOut) > 0 {
		args = make(map[string]json.RawMessage, len(c.args))
		for k, v := range c.args {
			if !slices.Contains(leaveOut, k) {
				args[k] = v
			}
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func stepName(k callsv1.StepKind) string {
	switch k {
	case callsv1.StepKind_STEP_KIND_FIELDS:
		return "fields"
	case callsv1.StepKind_STEP_KIND_ADMIN:
		return "admin"
	case callsv1.StepKind_STEP_KIND_PREVIEW:
		return "confirm"
	}
	return "input"
}

func maxRounds(in *callsv1.ElicitedCallInput) int {
	if n := in.GetMaxRounds(); n > 0 {
		return int(n)
	}
	return DefaultMaxRounds
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil || d.AsDuration() <= 0 {
		return def
	}
	return d.AsDuration()
}

// subSchema is schema with only the properties named in fields (and only
// those of them that were required).
func subSchema(schema *structpb.Struct, fields []string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}}
	props := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, f := range fields {
		if p, ok := schema.GetFields()["properties"].GetStructValue().GetFields()[f]; ok {
			props.Fields[f] = p
		}
	}
	out.Fields["properties"] = structpb.NewStructValue(props)
	var req []*structpb.Value
	for _, r := range schema.GetFields()["required"].GetListValue().GetValues() {
		if slices.Contains(fields, r.GetStringValue()) {
			req = append(req, r)
		}
	}
	if len(req) > 0 {
		out.Fields["required"] = structpb.NewListValue(&structpb.ListValue{Values: req})
	}
	return out
}

// optional is schema without its required list (missing answers are
// handled apart).
func optional(schema *structpb.Struct) *structpb.Struct {
	delete(schema.GetFields(), "required")
	return schema
}

// titles are the form titles of fields (their names when untitled).
func titles(schema *structpb.Struct, fields []string) []string {
	props := schema.GetFields()["properties"].GetStructValue().GetFields()
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f
		if t := props[f].GetStructValue().GetFields()["title"].GetStringValue(); t != "" {
			out[i] = t
		}
	}
	return out
}

// missingProperties lists the required properties of schema that content
// lacks (or has as null or a blank string), in the schema's order.
func missingProperties(schema *structpb.Struct, content map[string]any) []string {
	var missing []string
	for _, r := range schema.GetFields()["required"].GetListValue().GetValues() {
		name := r.GetStringValue()
		v, ok := content[name]
		if s, isString := v.(string); !ok || v == nil || (isString && strings.TrimSpace(s) == "") {
			missing = append(missing, name)
		}
	}
	return missing
}

// validateAnswer checks content against the schema that was asked: the SDK
// does not, and a client may send anything.
func validateAnswer(schema *structpb.Struct, content map[string]any) error {
	raw, err := schema.MarshalJSON()
	if err != nil {
		return err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return err
	}
	if err := resolved.Validate(content); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "validating root: "))
	}
	return nil
}

// describe renders a preview's data for a person: one line per top-level
// field, lists cut to their first three items.
func describe(data json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(data, &m) != nil || len(m) == 0 {
		return string(data)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.ReplaceAll(k, "_", " "))
		b.WriteString(": ")
		switch v := m[k].(type) {
		case []any:
			parts := make([]string, 0, 3)
			for _, item := range v[:min(3, len(v))] {
				parts = append(parts, scalar(item))
			}
			b.WriteString(strings.Join(parts, ", "))
		default:
			b.WriteString(scalar(v))
		}
	}
	return b.String()
}

func scalar(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// failedAttempts is the envelope of a tool-calling activity whose every
// attempt failed: the last attempt's unavailable envelope (error id
// included), or, when the activity itself failed (a timeout, a crash), a
// fixed message. Nothing of the failure's text goes into the result.
func failedAttempts(tool string, err error) *toolcall.Envelope {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == errUnavailable {
		var raw string
		var env toolcall.Envelope
		if ae.HasDetails() && ae.Details(&raw) == nil && json.Unmarshal([]byte(raw), &env) == nil && env.Status != "" {
			return &env
		}
	}
	return toolcall.Fail(tool, toolcall.CodeUnavailable, rpcerror.MessageUnreachable)
}
