package elicit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Package elicit is the edge's door for multi-round elicitation (MCP
// MRTR, SEP-2322; docs/elicitation.md) and for the MCP tasks that calls
// become when the calls worker carries them (docs/mcp-tasks.md).
//
// A call that lacks admin inputs (confirm, reason) or fields its tool marks
// elicitable, from a client that declares elicitation, asks the user instead
// of failing. The call lives in a Temporal workflow (toolmesh.calls.v1,
// run by the calls worker), never in the edge: round 1 starts it with
// update-with-start and gets the first question back in the same round
// trip; each later round is an update addressed by the workflow and run ids
// in the verified requestState. The workflow keeps the answers, decides the
// next question and runs the side effect once, after the last round.
//
// Clients of 2026-07-28 get the questions as an input_required result with
// inputRequests and a sealed requestState, and retry the call with their
// inputResponses and the same state. Clients of the session era get the same
// questions as server-sent elicitation/create requests, every round, inside
// the one tools/call, and then the same result.
//
// A call from a client that follows MCP tasks becomes a task (tasks.go) when
// its tool supports tasks or, once its input is complete, it waits for the
// user's answers: the FIELDS rounds above come first, then the workflow —
// whose id is the task's — is the task.

// Options configure multi-round elicitation and the MCP tasks the calls
// worker carries (edge.Config.Elicitation): each declared and documented
// here, and defaulted once, in New. Without them the edge refuses calls
// that lack inputs, naming what is missing.
type Options struct {
	// Temporal starts and updates call workflows. Its data converter must
	// be temporalclient.DataConverter(), the calls worker's.
	Temporal client.Client
	// States seals requestState with the current key and opens states of
	// the current and previous keys.
	States *requeststate.Sealer
	// StateTTL is how long a requestState is accepted: how long a user
	// has to answer one round (default toolcall.DefaultStateTTL).
	StateTTL time.Duration
	// AbandonAfter is how long the workflow waits for the answers of a
	// round before it gives the call up (at least, and by default,
	// toolcall.RoundTimeout(StateTTL), so no state outlives its call).
	AbandonAfter time.Duration
	// MaxRounds bounds the rounds of questions of one call (default
	// toolcall.DefaultMaxRounds).
	MaxRounds int
	// TaskCallTimeout bounds the service call of a call that is an MCP
	// task, instead of the call timeout (default
	// toolcall.DefaultTaskCallTimeout).
	TaskCallTimeout time.Duration
	// TaskQueue overrides the contract's task queue of the call workflows
	// (the calls worker must poll the same one).
	TaskQueue string
	// Namespace is the Temporal namespace of the client (default
	// "default"): its retention is how long a task is kept at least.
	Namespace string
	// Now is the clock a requestState's expiry is set and checked by;
	// time.Now when nil.
	Now clock.Clock
	// VisitWait is how long a call over a session waits, once the user
	// accepted to visit a page a service asked for, for the visit to be
	// done, calling the service again now and then: past it the client is
	// answered "URL elicitation required" (-32042) and calls again later
	// (default and at most DefaultVisitWait, so that every request is
	// answered within 30 seconds).
	VisitWait time.Duration
}

// replyMargin is how much longer than the workflow's work a round waits
// for its reply.
const replyMargin = 5 * time.Second

// withDefaults is o with every default applied: the one place the
// elicitor's defaults are.
func (o Options) withDefaults() Options {
	if o.StateTTL <= 0 {
		o.StateTTL = toolcall.DefaultStateTTL
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = toolcall.DefaultMaxRounds
	}
	if o.AbandonAfter < o.StateTTL {
		o.AbandonAfter = toolcall.RoundTimeout(o.StateTTL)
	}
	if o.TaskCallTimeout <= 0 {
		o.TaskCallTimeout = toolcall.DefaultTaskCallTimeout
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.VisitWait <= 0 || o.VisitWait > DefaultVisitWait {
		o.VisitWait = DefaultVisitWait
	}
	return o
}

// Params is what the edge gives the elicitor besides its Options.
type Params struct {
	// Tools are the edge's tools; each gets its forms at start.
	Tools []port.Tool
	// CallTimeout is the deadline of the call's service call, carried with
	// the call to the worker that makes it.
	CallTimeout time.Duration
	// Log receives the elicitor's events.
	Log *slog.Logger
}

// Elicitor runs elicited calls for an edge. It holds no per-call state.
type Elicitor struct {
	log      *slog.Logger
	tc       client.Client
	states   *requeststate.Sealer
	ttl      time.Duration
	patience time.Duration // how long the workflow waits for a round
	max      int
	timeout  time.Duration // the call timeout
	wf       workflowcontract.Workflow
	round    workflowcontract.Handler
	pending  workflowcontract.Handler
	wait     time.Duration // the longest a round waits for the workflow
	// startWait bounds round 1 (and resuming a call), which never runs a
	// side effect: an unreachable Temporal is reported sooner.
	startWait time.Duration
	forms     map[string]*toolForms

	taskTimeout time.Duration
	now         clock.Clock
	visitWait   time.Duration // how long a session call waits for a visit
	// tasks follows the calls that became MCP tasks (tasks.go).
	tasks *tasks
}

// toolForms are a tool's forms, built once at start.
type toolForms struct {
	fields    *structpb.Struct        // its elicitable fields (nil: none)
	admin     *structpb.Struct        // confirm and reason (nil: not ADMIN)
	questions []*callsv1.StepQuestion // its questions (nil: none)
}

// New returns the elicitor of cfg.
func New(cfg Options, p Params) (*Elicitor, error) {
	cfg = cfg.withDefaults()
	if cfg.Temporal == nil || cfg.States == nil {
		return nil, errors.New("edge: elicitation needs a Temporal client and request state keys")
	}
	x := &Elicitor{
		log: p.Log, tc: cfg.Temporal, states: cfg.States, ttl: cfg.StateTTL, max: cfg.MaxRounds,
		patience: cfg.AbandonAfter, timeout: p.CallTimeout,
		wf:          workflowcontract.WorkflowOf(&callsv1.ElicitedCallInput{}),
		round:       workflowcontract.HandlerOf(&callsv1.RoundRequest{}),
		pending:     workflowcontract.HandlerOf(&callsv1.PendingQuery{}),
		forms:       map[string]*toolForms{},
		taskTimeout: cfg.TaskCallTimeout,
		now:         cfg.Now,
		visitWait:   cfg.VisitWait,
	}
	if cfg.TaskQueue != "" {
		x.wf.TaskQueue = cfg.TaskQueue
	}
	// The final round waits for the side effect, which the calls worker
	// tries as its retry policy says, but never past MaxRoundWait: a
	// round that takes longer is answered unavailable and its retry
	// attaches to the same update. Round 1 never runs the side effect.
	retry := toolcall.RetryOf(p.CallTimeout)
	x.wait = min(retry.Budget()+replyMargin, toolcall.MaxRoundWait)
	x.startWait = min(retry.Attempt, toolcall.MaxRoundWait)
	x.tasks = &tasks{
		log: p.Log, tc: cfg.Temporal, prefix: x.wf.IDPrefix,
		answer:    workflowcontract.HandlerOf(&callsv1.AnswerRequest{}),
		view:      workflowcontract.HandlerOf(&callsv1.TaskQuery{}),
		extend:    workflowcontract.HandlerOf(&callsv1.ExtendTaskUpdate{}),
		wait:      x.wait,
		startWait: x.startWait,
		namespace: cfg.Namespace,
	}
	for _, pt := range p.Tools {
		t := port.Catalog(pt)
		f := &toolForms{}
		var err error
		if f.fields, err = fieldsForm(t); err != nil {
			return nil, err
		}
		if f.admin, err = adminForm(t); err != nil {
			return nil, err
		}
		if f.questions, err = questionForms(t); err != nil {
			return nil, err
		}
		x.forms[t.Name] = f
	}
	return x, nil
}

// Tasks follows the calls that became MCP tasks.
func (x *Elicitor) Tasks() port.Tasks { return x.tasks }

// CanAsk reports whether the client of c declared it can answer anything:
// form or URL elicitation, sampling, roots.
func (x *Elicitor) CanAsk(c *port.Call) bool {
	e := c.Elicitation
	return e != nil && (e.CanAsk || e.URL || e.Sampling || e.Roots)
}

// Ask starts asking the client for what c lacks; ok is false when it lacks
// nothing the client can be asked for (out then holds the notes of the
// fallbacks the call takes instead).
func (x *Elicitor) Ask(ctx context.Context, e *port.Elicited, args map[string]json.RawMessage) (port.Outcome, bool) {
	c := newCall(e)
	steps, notes, env := x.plan(ctx, c, args)
	if env != nil {
		return port.Outcome{Envelope: env}, true
	}
	if steps == nil {
		return port.Outcome{Notes: notes}, false
	}
	c.notes = notes
	return x.start(ctx, c, args, steps, e.ClientKey), true
}

// Next delivers the answers of a later round.
func (x *Elicitor) Next(ctx context.Context, e *port.Elicited) port.Outcome {
	return x.next(ctx, newCall(e))
}

// Carry makes a call whose input is complete an MCP task: its workflow
// starts and runs the call in the background.
func (x *Elicitor) Carry(ctx context.Context, e *port.Elicited) port.Outcome {
	c := newCall(e)
	var args map[string]json.RawMessage
	if err := json.Unmarshal(e.Arguments, &args); err != nil || args == nil {
		args = map[string]json.RawMessage{}
	}
	return x.start(ctx, c, args, nil, e.ClientKey)
}

// call is one tools/call the elicitor serves: the tool, the caller, what
// its client can do about questions, and the digest of its arguments that
// every round's requestState is bound to.
type call struct {
	*port.Elicited
	t      *toolcatalog.Tool
	b      *toolcall.Binding
	p      *identity.Principal
	el     port.Elicitation // the zero Elicitation when the door gave none
	digest string
	// notes are the fallbacks the call took before it started, for its
	// result.
	notes []string
	// executed is set once the call ran as a successful ADMIN call.
	executed *port.Executed
}

func newCall(e *port.Elicited) *call {
	b := e.Tool.Binding()
	c := &call{Elicited: e, t: b.Tool(), b: b, p: e.Caller}
	if e.Elicitation != nil {
		c.el = *e.Elicitation
	}
	return c
}

// start begins an elicited call: it checks the arguments it has, starts the
// call's workflow and answers with the first question (or, for a session
// client, asks every question and answers with the result), or with the
// task the call is. clientKey is the client's idempotency key ("" for none).
func (x *Elicitor) start(ctx context.Context, c *call, args map[string]json.RawMessage, steps []*callsv1.Step, clientKey string) port.Outcome {
	t, p := c.t, c.p
	var err error
	c.digest, err = argumentsDigest(c.Arguments)
	if err != nil {
		vs := []boundary.Violation{{Rule: "arguments.canonical", Message: err.Error()}}
		boundary.LogRejection(ctx, x.log, boundary.MCPTool, vs)
		return port.Outcome{Envelope: toolcall.Invalid(t.Name, vs)}
	}
	argsJSON, err := json.Marshal(args)
	if err != nil {
		return port.Outcome{Envelope: toolcall.Unexpected(ctx, x.log, t.Name, fmt.Errorf("re-encode arguments: %w", err))}
	}
	in := &callsv1.ElicitedCallInput{
		Tool:            t.Name,
		Title:           t.Title,
		Admin:           t.Kind == toolv1.Kind_KIND_ADMIN,
		Caller:          c.caller(),
		Arguments:       string(argsJSON),
		ArgumentsDigest: c.digest,
		Steps:           steps,
		RoundTimeout:    durationpb.New(x.patience),
		MaxRounds:       int32(x.max),
		CallTimeout:     durationpb.New(x.timeout),
		Notes:           c.notes,
		Url:             c.el.URL,
		Visit:           c.Visit,
		IdempotencyKey:  c.Key,
	}
	if x.isTask(c, steps) {
		in.Task, in.TaskCallTimeout = true, durationpb.New(x.taskTimeout)
	}
	id := x.workflowID(c, clientKey)
	if clientKey != "" {
		// A call with the client's idempotency key may have been made
		// before: resume it where it is, or answer its result.
		if out, ok := x.resume(ctx, c, id); ok {
			return out
		}
	}
	res, runID, err := x.startWorkflow(ctx, id, in, p)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			// The client repeated a call it gave an idempotency key; the call
			// is over: answer its result again.
			return port.Outcome{Envelope: x.finished(ctx, t.Name, id)}
		}
		return port.Outcome{Envelope: x.unavailable(ctx, t.Name, id, err)}
	}
	x.log.InfoContext(ctx, "mcp.elicitation.started", "tool", t.Name, "subject", p.Subject, "agent", p.Agent,
		"workflow_id", id, "run_id", runID, "steps", len(steps), "task", in.GetTask())
	return x.respond(ctx, c, callRun{id: id, runID: runID}, res)
}

// isTask reports whether the call c with steps is an MCP task: its client
// follows tasks, and its tool supports them or it waits, once its input is
// complete, for the user's answers. Work that a task block follows is not
// carried here.
func (x *Elicitor) isTask(c *call, steps []*callsv1.Step) bool {
	if !c.Tasks || c.t.Task != nil {
		return false
	}
	if c.t.TaskSupport != toolv1.TaskSupport_TASK_SUPPORT_UNSPECIFIED || c.Visit != nil {
		return true
	}
	return slices.ContainsFunc(steps, func(st *callsv1.Step) bool { return st.GetKind() != callsv1.StepKind_STEP_KIND_FIELDS })
}

// next delivers the answers of a round ≥ 2: the request carries the
// requestState of the round it answers.
func (x *Elicitor) next(ctx context.Context, c *call) port.Outcome {
	t := c.t
	var err error
	c.digest, err = argumentsDigest(c.Arguments)
	if err != nil {
		return x.refuse(ctx, t.Name, "arguments not canonical: "+err.Error())
	}
	st, err := x.states.Open(c.el.State, c.stateBinding(), x.now())
	if err != nil {
		return x.refuse(ctx, t.Name, err.Error())
	}
	run := callRun{id: st.WorkflowID, runID: st.RunID}
	res, err := x.update(ctx, c, run, int32(st.Round), answersOf(c.el.Answers))
	if err != nil {
		if refused(err) {
			return x.refuse(ctx, t.Name, fmt.Sprintf("round %d of %s refused by the workflow: %v", st.Round, st.WorkflowID, err))
		}
		return port.Outcome{Envelope: x.unavailable(ctx, t.Name, st.WorkflowID, err)}
	}
	return x.respond(ctx, c, run, res)
}

// respond turns a round's result into the client's answer: the final
// envelope, the task the call became, the next questions with a new
// requestState (2026-07-28), or — for a session client — every further
// round asked over the session.
func (x *Elicitor) respond(ctx context.Context, c *call, run callRun, res *callsv1.RoundResult) port.Outcome {
	t := c.t
	if c.el.Ask != nil && !res.GetTask() {
		var err error
		if res, err = x.converse(ctx, c, run, res); err != nil {
			var vp *visitPending
			if errors.As(err, &vp) {
				x.log.InfoContext(ctx, "mcp.elicitation.visit_pending", "tool", t.Name, "workflow_id", run.id, "elicitation_id", vp.q.ElicitationID)
				return port.Outcome{Visit: &vp.q}
			}
			if refused(err) {
				return port.Outcome{Envelope: toolcall.Fail(t.Name, toolcall.CodeConflict, "the call ended while its questions were answered")}
			}
			return port.Outcome{Envelope: x.unavailable(ctx, t.Name, run.id, err)}
		}
	}
	if res.GetTask() {
		task := x.tasks.created(ctx, run.id, res)
		x.log.InfoContext(ctx, "mcp.task_created", "tool", t.Name, "task_id", run.id, "status", task.Status)
		return port.Outcome{Task: task}
	}
	if res.GetEnvelope() != "" {
		return port.Outcome{Envelope: x.final(ctx, c, res), Executed: c.executed}
	}
	qs := make([]port.Question, 0, len(res.GetQuestions()))
	for _, q := range res.GetQuestions() {
		qs = append(qs, question(q))
	}
	state, err := x.states.Seal(requeststate.State{
		Expires:    x.now().Add(x.ttl),
		Round:      int(res.GetRound()),
		WorkflowID: run.id,
		RunID:      run.runID,
	}, c.stateBinding())
	if err != nil {
		return port.Outcome{Envelope: toolcall.Unexpected(ctx, x.log, t.Name, fmt.Errorf("seal request state: %w", err))}
	}
	x.log.DebugContext(ctx, "mcp.elicitation.round", "tool", t.Name, "workflow_id", run.id, "round", res.GetRound())
	return port.Outcome{Round: &port.Round{Questions: qs, State: state}}
}

// converse asks a session client every question of every round over the
// session (elicitation/create) and delivers the answers, until the call is
// over (or is a task). The SDK's own fallback asks only once; calls may take
// many rounds.
//
// A URL question the user accepted is not asked again: the workflow asks it
// again while the service still wants the visit, and the call waits a
// little and answers accept again (the service is called again), until
// the visit is done — the client is then told so
// (Elicitation.Complete) — or x.visitWait has passed since the user
// accepted: the call then ends with a visitPending error.
func (x *Elicitor) converse(ctx context.Context, c *call, run callRun, res *callsv1.RoundResult) (*callsv1.RoundResult, error) {
	accepted := map[string]bool{} // the elicitation ids of the visits accepted
	var visitDeadline time.Time
	pause := visitRetry
	for res.GetEnvelope() == "" && !res.GetTask() {
		answers := map[string]*callsv1.Answer{}
		for _, q := range res.GetQuestions() {
			if q.GetKind() == callsv1.InputKind_INPUT_KIND_URL && accepted[q.GetElicitationId()] {
				left := time.Until(visitDeadline)
				if left <= 0 {
					return nil, &visitPending{q: question(q)}
				}
				if err := sleep(ctx, min(pause, left)); err != nil {
					x.cancelCall(roundUpdate{run: run, round: res.GetRound(), digest: c.digest,
						answers: map[string]*callsv1.Answer{q.GetKey(): {Action: callsv1.Action_ACTION_CANCEL}}})
					return nil, err
				}
				pause = min(2*pause, maxVisitRetry)
				answers[q.GetKey()] = &callsv1.Answer{Action: callsv1.Action_ACTION_ACCEPT}
				continue
			}
			ectx, cancel := context.WithTimeout(ctx, x.ttl)
			r, err := c.el.Ask(ectx, question(q))
			cancel()
			switch {
			case ctx.Err() != nil:
				// The client went away: end the call rather than leave it to
				// be abandoned.
				x.cancelCall(roundUpdate{run: run, round: res.GetRound(), digest: c.digest,
					answers: map[string]*callsv1.Answer{q.GetKey(): {Action: callsv1.Action_ACTION_CANCEL}}})
				return nil, ctx.Err()
			case err != nil:
				// An answer the client's SDK could not send (one that does
				// not fit the form, say) is no answer: the workflow asks
				// again, a bounded number of times.
				x.log.InfoContext(ctx, "mcp.elicitation.no_answer", "tool", c.t.Name, "workflow_id", run.id, "round", res.GetRound(), "error", err)
			default:
				answers[q.GetKey()] = answerOf(r)
				if q.GetKind() == callsv1.InputKind_INPUT_KIND_URL && r.Action == port.AnswerAccept && q.GetElicitationId() != "" {
					accepted[q.GetElicitationId()] = true
					visitDeadline = time.Now().Add(x.visitWait)
				}
			}
		}
		round, questions := res.GetRound(), res.GetQuestions()
		var err error
		if res, err = x.update(ctx, c, run, round, answers); err != nil {
			if ctx.Err() != nil {
				// The client left while its answers were on the way. If
				// they did not reach the workflow, the call ends now, as
				// when it leaves during a question; if they did, this
				// round's cancellation is refused as stale.
				cancelled := make(map[string]*callsv1.Answer, len(questions))
				for _, q := range questions {
					cancelled[q.GetKey()] = &callsv1.Answer{Action: callsv1.Action_ACTION_CANCEL}
				}
				x.cancelCall(roundUpdate{run: run, round: round, digest: c.digest, answers: cancelled})
			}
			return nil, err
		}
	}
	if res.GetEnvelope() != "" && c.el.Complete != nil {
		// The service no longer asks for the visits the user accepted:
		// they are done.
		for id := range accepted {
			c.el.Complete(ctx, id)
		}
	}
	return res, nil
}

// final is the envelope of a call that is over; a successful ADMIN call is
// executed, with the reason the user gave (the worker wrote its audit
// record), which the pipeline reports.
func (x *Elicitor) final(ctx context.Context, c *call, res *callsv1.RoundResult) *toolcall.Envelope {
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(res.GetEnvelope()), &env); err != nil || env.Status == "" {
		return toolcall.Unexpected(ctx, x.log, c.t.Name, errors.New("the call's workflow returned no result envelope"))
	}
	if c.t.Kind == toolv1.Kind_KIND_ADMIN && !env.IsError() {
		c.executed = &port.Executed{Reason: res.GetReason(), CallID: res.GetCallId()}
	}
	return &env
}

// refuse is the answer to every requestState that cannot be used —
// malformed, forged, expired, of a retired key, for another caller, tool
// or arguments, already used, or of a call that is over. The client cannot
// tell which; the log can.
func (x *Elicitor) refuse(ctx context.Context, tool, why string) port.Outcome {
	boundary.LogRejection(ctx, x.log, boundary.RequestState, []boundary.Violation{{Field: "requestState", Rule: boundary.RequestState, Message: why}})
	return port.Outcome{Envelope: StateRefused(tool)}
}

// StateRefused is the one envelope of a refused requestState.
func StateRefused(tool string) *toolcall.Envelope {
	return toolcall.Invalid(tool, []boundary.Violation{{Field: "requestState", Rule: boundary.RequestState,
		Message: "not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over"}})
}

func (x *Elicitor) unavailable(ctx context.Context, tool, id string, err error) *toolcall.Envelope {
	x.log.WarnContext(ctx, "mcp.elicitation.unavailable", "tool", tool, "workflow_id", id, "error", err)
	return toolcall.Fail(tool, toolcall.CodeUnavailable, "the workflow service that carries this call's questions did not answer in time; retry the same request")
}

// caller is the caller of c as the calls contract carries it: the
// principal's identity and grants, at the call's depth.
func (c *call) caller() *callsv1.Caller {
	mc := c.p.Caller()
	mc.Depth = c.Depth
	return toolcall.CallerProto(mc)
}

// stateBinding is what a requestState of c is bound to: its caller, tool
// and arguments.
func (c *call) stateBinding() requeststate.Binding {
	return requeststate.Binding{Subject: c.p.Subject, Agent: c.p.Agent, Tool: c.t.Name, ArgumentsDigest: c.digest}
}

// argumentsDigest is the digest of a call's arguments' canonical JSON
// (absent or null arguments are the empty object).
func argumentsDigest(args json.RawMessage) (string, error) {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || bytes.Equal(a, []byte("null")) {
		a = []byte("{}")
	}
	return audittrail.JSONDigest(a)
}
