package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/edge/elicit"
	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The pipeline: the one path of every tool call, whichever door it came
// through (port.Pipeline). Call runs, in order, each refusal happening
// before anything is sent to the service:
//
//  1. identity: an authenticated caller (the door authenticated it);
//  2. grants: the caller may call the tool; a service is behind it; a
//     read-only edge runs READ tools only;
//  3. limits: the caller's rate limit; the call's idempotency key and the
//     depth it runs at (depth.go);
//  4. guardrails: arguments are an object; an ADMIN call has an actor, a
//     confirmation and a reason — or, from a client that can be asked, a
//     call that lacks them (or elicitable fields) goes to the Elicitor;
//  5. decode and validate: protojson into the request message, then
//     protovalidate (the mcp.tool boundary);
//  6. invoke: the service call with a deadline and the caller's mesh token;
//  7. envelope: every outcome, a panic and a shutdown included, is one
//     envelope, traced, counted and logged;
//  8. audit: a successful ADMIN call is recorded exactly once.

// binding is a tool as the pipeline calls it: the bound service call and
// what each call of it reuses.
type binding struct {
	call *toolcall.Binding
	tool *toolcatalog.Tool
	// timeout bounds the service call: the call timeout, plus the wait
	// budget for a tool that waits for its outcome (wait.go).
	timeout time.Duration
	// telemetry is the call's span name and metric labels, built once.
	telemetry callTelemetry
	// gate bounds the calls in flight to the tool's service; nil: none.
	gate *gate
}

// Binding implements port.Tool.
func (b *binding) Binding() *toolcall.Binding { return b.call }

// pipeline runs tool calls; it implements port.Pipeline.
type pipeline struct {
	cfg      Config
	log      *slog.Logger
	reg      *toolcatalog.Registry
	tools    []port.Tool
	bindings map[string]*binding
	limits   *limiters
	obs      *instruments
	// elicit asks the user for what calls lack; nil without
	// Config.Elicitation.
	elicit port.Elicitor
	// audit records successful admin calls; nil without an audit service.
	audit *audittrail.Recorder
	// outcomes sends how every call ended to the audit service, for
	// reputation; nil without an audit service.
	outcomes *audittrail.OutcomeLog
	// depth finds the depth of the item a call is made on behalf of; nil
	// without the service that reads such items.
	depth *depthLookup
	// inflight tracks tool calls so that each gets its answer on shutdown.
	inflight *inflight
	// panicAfter, set only by tests (export_test.go), makes the pipeline
	// panic after running a call it reports true for.
	panicAfter func(*port.Call) bool
}

func newPipeline(cfg Config, log *slog.Logger) (*pipeline, error) {
	p := &pipeline{cfg: cfg, log: log, bindings: map[string]*binding{}, limits: newLimiters(cfg.RateLimit), inflight: newInflight()}
	docs, err := toolcatalog.LoadDocs(descriptorset.Bytes)
	if err != nil {
		return nil, err
	}
	p.reg, err = toolcatalog.Build(cfg.Contracts, docs, toolcatalog.Options{ExtraInput: adminInputs, ErrorOutput: toolcall.ErrorSchema()})
	if err != nil {
		return nil, fmt.Errorf("build tool registry: %w", err)
	}
	validator, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	if p.obs, err = newInstruments(cfg.Telemetry); err != nil {
		return nil, err
	}
	clientTelemetry := cfg.Telemetry.ClientOption()
	gates := newGates(cfg.ServiceConcurrency, p.reg.Tools())
	if err := gates.observe(cfg.Telemetry.Meter()); err != nil {
		return nil, fmt.Errorf("edge metrics: %w", err)
	}
	for _, t := range p.reg.Tools() {
		timeout := cfg.CallTimeout
		if t.Wait != nil {
			timeout += cfg.WaitBudget
		}
		b := &binding{
			call:      toolcall.NewBinding(t, cfg.HTTPClient, cfg.Services[t.Service], validator, log, clientTelemetry),
			tool:      t,
			timeout:   timeout,
			telemetry: newCallTelemetry(t.Name),
			gate:      gates.of(t),
		}
		p.bindings[t.Name] = b
		p.tools = append(p.tools, b)
	}
	auditClient := meshclient.Config{HTTP: cfg.HTTPClient, Signer: cfg.Mesh, Telemetry: cfg.Telemetry}
	p.audit = audittrail.Dial(auditClient, cfg.Services)
	p.outcomes = audittrail.DialOutcomes(auditClient, cfg.Services, log)
	p.depth = newDepthLookup(p.reg, p.bindings)
	return p, nil
}

func (p *pipeline) Tools() []port.Tool { return p.tools }

func (p *pipeline) Lookup(name string) (port.Tool, bool) {
	b, ok := p.bindings[name]
	if !ok {
		return nil, false
	}
	return b, true
}

func (p *pipeline) ReadOnly() bool { return p.cfg.ReadOnly }

func (p *pipeline) Toolsets() []*toolcatalog.Toolset { return p.reg.Toolsets() }

// Call runs one call and returns its envelope, or — for a call that goes
// on — the interim result (an elicitation round) or the task it became.
// The call is traced, counted and logged, and a panic becomes an internal
// error.
func (p *pipeline) Call(ctx context.Context, c *port.Call) (out port.Outcome) {
	b := c.Tool.(*binding)
	start := time.Now()
	ctx, end, accepted := p.inflight.begin(ctx)
	defer end()
	ctx, span := p.obs.startCall(ctx, b, c.Meta, c.Header)
	defer span.End()
	defer func() {
		if r := recover(); r != nil {
			id := rpcerror.NewID()
			p.log.ErrorContext(ctx, "tool.error", "error_id", id, "tool", b.tool.Name, "domain_code", toolcall.CodeInternal,
				"error", fmt.Sprintf("panic: %v", r), "stack", string(debug.Stack()))
			out = port.Outcome{Envelope: toolcall.Internal(b.tool.Name, id)}
			p.obs.endCall(ctx, b, out.Envelope, time.Since(start))
		}
	}()
	var env *toolcall.Envelope
	if accepted {
		out = p.run(ctx, b, c)
		if p.panicAfter != nil && p.panicAfter(c) {
			panic("test: the pipeline panics after " + b.tool.Name)
		}
		if out.Round != nil || out.Task != nil || out.Visit != nil {
			// The call goes on: a round of questions, the task it became, or
			// a visit its client is to wait for.
			p.obs.interimCall(ctx, b, out.Task != nil, time.Since(start))
			return out
		}
		env = out.Envelope
	}
	env = retryAdvice(ctx, env, b.tool.Name, b.tool.Kind, !accepted, c.Meta)
	p.observe(ctx, b, c, env, time.Since(start))
	return port.Outcome{Envelope: env}
}

// run runs the steps of one call.
func (p *pipeline) run(ctx context.Context, b *binding, c *port.Call) port.Outcome {
	t, caller := b.tool, c.Caller
	fail := func(env *toolcall.Envelope) port.Outcome { return port.Outcome{Envelope: env} }

	// Identity and grants.
	if caller == nil {
		return fail(toolcall.Fail(t.Name, toolcall.CodeUnauthenticated, "the caller is not authenticated"))
	}
	if ok, why := caller.MayCall(t); !ok {
		return fail(toolcall.Fail(t.Name, toolcall.CodePermissionDenied, fmt.Sprintf("you may not call %s: %s", t.Name, why)))
	}
	if !b.call.HasBackend() {
		return fail(toolcall.Fail(t.Name, toolcall.CodeNotSupported, fmt.Sprintf("tool %s has no backend: service %s is not configured on this edge", t.Name, t.Service)))
	}
	if p.cfg.ReadOnly && t.Kind != toolv1.Kind_KIND_READ {
		return fail(toolcall.Fail(t.Name, toolcall.CodeReadOnly, fmt.Sprintf("Cannot %s in read-only mode.", t.Action())))
	}

	// Limits.
	if !c.Unmetered {
		if env := p.rateLimit(t, caller); env != nil {
			return fail(env)
		}
	}
	key, env := idempotencyKey(t.Name, c.Meta)
	if env != nil {
		return fail(env)
	}
	depth, env := p.depthOf(ctx, t.Name, caller, c.Meta)
	if env != nil {
		return fail(env)
	}

	// Guardrails, or the questions that fill them.
	args := c.Arguments
	if vs := toolcall.CheckObject(args); vs != nil {
		boundary.LogRejection(ctx, p.log, boundary.MCPTool, vs)
		return fail(toolcall.Invalid(t.Name, vs))
	}
	if c.Elicitation != nil && c.Elicitation.State != "" {
		// A later round of an elicited call.
		if p.elicit == nil {
			boundary.LogRejection(ctx, p.log, boundary.RequestState, []boundary.Violation{{Field: "requestState", Rule: "request_state", Message: "elicitation is not configured on this edge"}})
			return fail(elicit.StateRefused(t.Name))
		}
		return p.elicited(ctx, t, caller, p.elicit.Next(ctx, &port.Elicited{Call: c, Depth: depth}))
	}
	admin := t.Kind == toolv1.Kind_KIND_ADMIN
	if env := p.taskOnly(t, c); env != nil {
		return fail(env)
	}
	// A call the calls worker carries as an MCP task (docs/mcp-tasks.md).
	carried := c.Tasks && p.elicit != nil && t.Task == nil && t.TaskSupport != toolv1.TaskSupport_TASK_SUPPORT_UNSPECIFIED
	// A tool's questions go to the Elicitor whatever its client offers: one
	// the client cannot answer is its fallback or the call's refusal.
	ask := p.elicit != nil && (((admin || len(t.Elicitable) > 0) && p.elicit.CanAsk(c)) || len(t.Questions) > 0)
	var reason string
	var notes []string
	if admin || ask {
		obj, env := argumentsObject(ctx, p.log, b, args)
		if env != nil {
			return fail(env)
		}
		if admin && caller.Subject == "" {
			return fail(guardrail(t.Name, ViolationMissingActor,
				fmt.Sprintf("%s is an administrative tool and needs an identified actor: the caller's token names no subject", t.Name)))
		}
		if ask {
			clientKey, _ := c.Meta[MetaIdempotencyKey].(string)
			out, ok := p.elicit.Ask(ctx, &port.Elicited{Call: c, Depth: depth, ClientKey: clientKey}, obj)
			if ok {
				return p.elicited(ctx, t, caller, out)
			}
			notes = out.Notes
		}
		if admin {
			if args, reason, env = p.guard(ctx, b, obj); env != nil {
				return fail(env)
			}
		}
	}

	// Decode and validate.
	msg, vs := b.call.Decode(ctx, args)
	if vs != nil {
		// The fallbacks taken may say why: a field a question would have
		// filled is missing.
		env := toolcall.Invalid(t.Name, vs)
		env.Notes = notes
		return fail(env)
	}
	if carried {
		clientKey, _ := c.Meta[MetaIdempotencyKey].(string)
		return p.elicited(ctx, t, caller, p.elicit.Carry(ctx, &port.Elicited{Call: c, Depth: depth, ClientKey: clientKey}))
	}
	if t.Wait != nil {
		p.setWait(t, msg, c.NoWait)
	}

	// Invoke: the envelope is what the service answered.
	stop := func() {}
	if c.Progress != nil && t.EventField == nil {
		stop = c.Progress.Start(ctx, t)
	}
	mc := caller.Caller()
	mc.Depth = depth
	env = p.invoke(ctx, b, msg, mesh.Call{Caller: mc, IdempotencyKey: key}, c.Events)
	stop()
	if env.Visit != nil && p.elicit != nil && c.Elicitation.Offers(port.QuestionURL) {
		// The service asks the person to visit a page first, and did
		// nothing: the calls worker asks the client to send them there and
		// makes the call again, under the same key, once they went. Any
		// other client gets the envelope, the link in its message.
		clientKey, _ := c.Meta[MetaIdempotencyKey].(string)
		return p.elicited(ctx, t, caller, p.elicit.Visit(ctx, &port.Elicited{Call: c, Depth: depth, ClientKey: clientKey, Visit: env.Visit, Key: key}))
	}
	// The fallbacks taken, also on an error: they may say why it came.
	env.Notes = append(env.Notes, notes...)

	// Audit.
	if admin && !env.IsError() {
		p.adminExecuted(ctx, t, caller, msg, key, reason, env)
	}
	return port.Outcome{Envelope: env}
}

// taskOnly refuses the call of a tool that runs only as an MCP task when it
// cannot be one: its client does not follow tasks, or nothing on this edge
// can carry it.
func (p *pipeline) taskOnly(t *toolcatalog.Tool, c *port.Call) *toolcall.Envelope {
	if t.TaskSupport != toolv1.TaskSupport_TASK_SUPPORT_REQUIRED {
		return nil
	}
	if !c.Tasks {
		return toolcall.Fail(t.Name, toolcall.CodeNotSupported,
			fmt.Sprintf("%s runs only as an MCP task: call it from a client that follows tasks (the io.modelcontextprotocol/tasks extension, or a 2025-11-25 task-augmented call)", t.Name))
	}
	if t.Task == nil && p.elicit == nil {
		return toolcall.Fail(t.Name, toolcall.CodeNotSupported,
			fmt.Sprintf("%s runs only as an MCP task, which the calls worker carries: this edge has no Temporal configured", t.Name))
	}
	return nil
}

// invoke calls b's service with msg, within the call's timeout, once its
// gate lets it; a streaming tool's events go to events.
func (p *pipeline) invoke(ctx context.Context, b *binding, msg proto.Message, call mesh.Call, events toolcall.Events) *toolcall.Envelope {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if b.gate != nil {
		if err := b.gate.enter(ctx); err != nil {
			return toolcall.FromError(ctx, p.log, b.tool.Name, err)
		}
		defer b.gate.leave()
	}
	return b.call.InvokeWithEvents(ctx, msg, p.cfg.Mesh, call, events)
}

// rateLimit refuses a call past p's rate limit.
func (p *pipeline) rateLimit(t *toolcatalog.Tool, caller *identity.Principal) *toolcall.Envelope {
	if ok, wait := p.limits.allow(caller.LimitKey(), time.Now()); !ok {
		env := toolcall.Fail(t.Name, toolcall.CodeRateLimited, "too many tool calls; slow down and retry after the given number of seconds")
		env.RetryAfterSeconds = int(math.Ceil(wait.Seconds()))
		return env
	}
	return nil
}

// adminExecuted records a successful admin call: exactly one
// mcp.admin_op.executed event and its audit record (when an audit service is
// configured): a change, or a replay of the call that made it when the
// service answered env as a replay (see audittrail). The action has already
// happened, so a failed append is logged, not returned to the caller.
func (p *pipeline) adminExecuted(ctx context.Context, t *toolcatalog.Tool, caller *identity.Principal, msg proto.Message, key, reason string, env *toolcall.Envelope) {
	var attrs []any
	if env.Replayed {
		attrs = append(attrs, "replay_of", env.ReplayOf)
	}
	p.adminEvent(ctx, t, caller, reason, key, attrs...)
	if p.audit == nil {
		return
	}
	// Record even when the client has gone away: the action happened.
	entry := audittrail.Entry{CallID: key, Actor: caller.Subject, Tool: t.Name, Reason: reason, Arguments: msg, Replayed: env.Replayed, ReplayOf: env.ReplayOf}
	if _, err := p.audit.Record(context.WithoutCancel(ctx), entry); err != nil {
		p.log.ErrorContext(ctx, "audit.append_failed", "tool", t.Name, "subject", caller.Subject, "call_id", key, "error", err)
	}
}

// elicited is the outcome of an elicited call: one whose side effect ran,
// and was recorded, in the calls worker is reported executed here, as any
// admin call is.
func (p *pipeline) elicited(ctx context.Context, t *toolcatalog.Tool, caller *identity.Principal, out port.Outcome) port.Outcome {
	if x := out.Executed; x != nil {
		p.adminEvent(ctx, t, caller, x.Reason, x.CallID, "via", "elicitation")
	}
	return out
}

// adminEvent is the one mcp.admin_op.executed event of an admin call that
// ran: who, why, and the idempotency key it ran and was recorded under.
func (p *pipeline) adminEvent(ctx context.Context, t *toolcatalog.Tool, caller *identity.Principal, reason, callID string, attrs ...any) {
	p.log.InfoContext(ctx, "mcp.admin_op.executed", append([]any{"tool", t.Name, "subject", caller.Subject, "agent", caller.Agent,
		"reason", httpguard.Truncate(reason, 500), "call_id", callID}, attrs...)...)
}

// observe logs the outcome of a call and emits the events some outcomes
// promise: one mcp.capability_gap or mcp.not_supported per such envelope.
// The outcome goes into the call's span and the tool call metrics.
func (p *pipeline) observe(ctx context.Context, b *binding, c *port.Call, env *toolcall.Envelope, took time.Duration) {
	p.obs.endCall(ctx, b, env, took)
	t := b.tool
	subject, agent := "", ""
	if caller := c.Caller; caller != nil {
		subject, agent = caller.Subject, caller.Agent
	}
	switch {
	case env.DomainCode == toolcall.CodeCapabilityGap:
		p.log.WarnContext(ctx, "mcp.capability_gap", "tool", t.Name, "service", t.Service, "gap", env.Gap)
	case env.DomainCode == toolcall.CodeNotSupported:
		p.log.WarnContext(ctx, "mcp.not_supported", "tool", t.Name, "service", t.Service, "message", env.Message)
	case env.DomainCode == toolcall.CodeGuardrailViolated:
		p.log.WarnContext(ctx, "mcp.guardrail", "tool", t.Name, "subject", subject, "agent", agent, "violation", env.Violation)
	}
	p.recordOutcome(t, subject, agent, c.Arguments, env, took)
	if env.Status == "ok" {
		p.log.DebugContext(ctx, "mcp.tool_call", "tool", t.Name, "subject", subject, "agent", agent, "status", "ok", "duration_ms", took.Milliseconds())
		return
	}
	p.log.InfoContext(ctx, "mcp.tool_call", "tool", t.Name, "subject", subject, "agent", agent, "status", "error", "domain_code", env.DomainCode, "duration_ms", took.Milliseconds())
}

// recordOutcome queues how an agent's call ended, and what a successful
// one achieved, for the audit service's outcome log (reputation counts
// them); a caller that is no agent has none.
func (p *pipeline) recordOutcome(t *toolcatalog.Tool, subject, agent string, args json.RawMessage, env *toolcall.Envelope, took time.Duration) {
	if p.outcomes == nil || agent == "" {
		return
	}
	code, accomplished := env.DomainCode, ""
	if env.Status == "ok" {
		code, accomplished = "ok", t.Accomplished(args)
	} else if code == "" {
		code = toolcall.CodeInternal
	}
	p.outcomes.Add(audittrail.Outcome{Agent: agent, Subject: subject, Tool: t.Name, Kind: t.Kind, Code: code, Took: took, Accomplishment: accomplished})
}
