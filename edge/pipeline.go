package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Guardrail violations of ADMIN calls.
const (
	ViolationMissingActor   = "missing_actor"
	ViolationMissingConfirm = "missing_confirm"
	ViolationMissingReason  = "missing_reason"
)

// MetaIdempotencyKey is the request _meta key a client may set to make a
// retried tools/call apply once; without it every call gets a fresh key.
const MetaIdempotencyKey = "dev.toolmesh/idempotencyKey"

var idempotencyKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// toolHandler answers every call to b's tool with exactly one envelope,
// whatever happens underneath.
func (e *Edge) toolHandler(b *binding) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		env, interim := e.runCall(ctx, b, e.principal(req), req)
		if interim != nil {
			return interim, nil
		}
		return result(env), nil
	}
}

// runCall runs one call of b's tool as p and returns its envelope, or the
// interim result of a call that goes on (an elicitation round, a task). It
// is the one path of every tool call, and of every resource read, prompt
// and completion that reads through a tool: the call is traced, counted and
// logged, and a panic becomes an internal error.
func (e *Edge) runCall(ctx context.Context, b *binding, p *identity.Principal, req *mcp.CallToolRequest) (env *toolcall.Envelope, interim *mcp.CallToolResult) {
	start := time.Now()
	ctx, end, accepted := e.inflight.begin(ctx)
	defer end()
	ctx, span := e.obs.startCall(ctx, b, req)
	defer span.End()
	defer func() {
		if r := recover(); r != nil {
			id := rpcerror.NewID()
			e.log.ErrorContext(ctx, "tool.error", "error_id", id, "tool", b.tool.Name, "domain_code", toolcall.CodeInternal,
				"error", fmt.Sprintf("panic: %v", r), "stack", string(debug.Stack()))
			env, interim = toolcall.Internal(b.tool.Name, id), nil
			e.obs.endCall(ctx, b, env, time.Since(start))
		}
	}()
	if accepted {
		env, interim = e.call(ctx, b, p, req)
		if interim != nil {
			e.obs.interimCall(ctx, b, time.Since(start))
			return nil, interim
		}
	}
	env = retryAdvice(ctx, env, b.tool.Name, b.tool.Kind, !accepted, req.Params.Meta)
	e.observe(ctx, b, p, req, env, time.Since(start))
	return env, nil
}

// call runs the pipeline of one tool call. Each refusal happens before
// anything is sent to the service.
func (e *Edge) call(ctx context.Context, b *binding, p *identity.Principal, req *mcp.CallToolRequest) (*toolcall.Envelope, *mcp.CallToolResult) {
	t := b.tool
	if p == nil {
		return toolcall.Fail(t.Name, toolcall.CodeUnauthenticated, "the caller is not authenticated"), nil
	}
	if ok, why := p.MayCall(t); !ok {
		return toolcall.Fail(t.Name, toolcall.CodePermissionDenied, fmt.Sprintf("you may not call %s: %s", t.Name, why)), nil
	}
	if !b.HasBackend() {
		return toolcall.Fail(t.Name, toolcall.CodeNotSupported, fmt.Sprintf("tool %s has no backend: service %s is not configured on this edge", t.Name, t.Service)), nil
	}
	if e.cfg.ReadOnly && t.Kind != toolv1.Kind_KIND_READ {
		return toolcall.Fail(t.Name, toolcall.CodeReadOnly, fmt.Sprintf("Cannot %s in read-only mode.", lowerFirst(t.Title))), nil
	}
	if env := e.rateLimit(ctx, t, p); env != nil {
		return env, nil
	}
	key, env := idempotencyKey(t.Name, req.Params.Meta)
	if env != nil {
		return env, nil
	}
	depth, env := e.depthOf(ctx, t.Name, p, req.Params.Meta)
	if env != nil {
		return env, nil
	}
	ctx = withCallDepth(ctx, depth)

	args := req.Params.Arguments
	if vs := toolcall.CheckObject(args); vs != nil {
		boundary.LogRejection(ctx, e.log, boundary.MCPTool, vs)
		return toolcall.Invalid(t.Name, vs), nil
	}
	if req.Params.RequestState != "" {
		// A later round of an elicited call.
		if e.elicit == nil {
			boundary.LogRejection(ctx, e.log, boundary.RequestState, []boundary.Violation{{Field: "requestState", Rule: "request_state", Message: "elicitation is not configured on this edge"}})
			return stateRefused(t.Name), nil
		}
		return e.elicit.next(ctx, elicitedCall{b: b, p: p, req: req})
	}
	admin := t.Kind == toolv1.Kind_KIND_ADMIN
	elicit := e.elicit != nil && (admin || len(t.Elicitable) > 0) && canElicit(req)
	var reason string
	if admin || elicit {
		obj, env := argumentsObject(ctx, e, b, args)
		if env != nil {
			return env, nil
		}
		if admin && p.Subject == "" {
			return guardrail(t.Name, ViolationMissingActor,
				fmt.Sprintf("%s is an administrative tool and needs an identified actor: the caller's token names no subject", t.Name)), nil
		}
		if elicit {
			steps, env := e.elicit.plan(ctx, b, obj)
			if env != nil {
				return env, nil
			}
			if steps != nil {
				clientKey, _ := req.Params.Meta[MetaIdempotencyKey].(string)
				return e.elicit.start(ctx, elicitedCall{b: b, p: p, req: req}, obj, steps, clientKey)
			}
		}
		if admin {
			if args, reason, env = e.guard(ctx, b, obj); env != nil {
				return env, nil
			}
		}
	}
	msg, vs := b.Decode(ctx, args)
	if vs != nil {
		return toolcall.Invalid(t.Name, vs), nil
	}
	if b.wait != nil {
		e.setWait(b, msg, e.tasks != nil && e.tasks.byStart[t.Name] != nil && taskSlotFrom(ctx) != nil)
	}
	stop := e.progress(ctx, b, req)
	caller := p.Caller()
	caller.Depth = depth
	env = b.Invoke(ctx, msg, e.cfg.Mesh, mesh.Call{Caller: caller, IdempotencyKey: key})
	stop()
	if e.tasks != nil {
		e.callTask(ctx, b, env)
	}
	if t.Kind == toolv1.Kind_KIND_ADMIN && !env.IsError() {
		e.adminExecuted(ctx, t, p, msg, key, reason, env)
	}
	return env, nil
}

// rateLimit refuses a call past p's rate limit. The edge's own background
// reads (subscription polls) are not the caller's calls and do not count.
func (e *Edge) rateLimit(ctx context.Context, t *toolcatalog.Tool, p *identity.Principal) *toolcall.Envelope {
	if ctx.Value(unmeteredKey{}) != nil {
		return nil
	}
	if ok, wait := e.limits.allow(p.LimitKey(), time.Now()); !ok {
		env := toolcall.Fail(t.Name, toolcall.CodeRateLimited, "too many tool calls; slow down and retry after the given number of seconds")
		env.RetryAfterSeconds = int(math.Ceil(wait.Seconds()))
		return env
	}
	return nil
}

// unmeteredKey marks the context of the edge's own background reads.
type unmeteredKey struct{}

// adminExecuted records a successful admin call: exactly one
// mcp.admin_op.executed event and its audit record (when an audit service is
// configured): a change, or a replay of the call that made it when the
// service answered env as a replay (see audittrail). The action has already
// happened, so a failed append is logged, not returned to the caller.
func (e *Edge) adminExecuted(ctx context.Context, t *toolcatalog.Tool, p *identity.Principal, msg proto.Message, key, reason string, env *toolcall.Envelope) {
	attrs := []any{"tool", t.Name, "subject", p.Subject, "agent", p.Agent, "reason", truncate(reason, 500), "call_id", key}
	if env.Replayed {
		attrs = append(attrs, "replay_of", env.ReplayOf)
	}
	e.log.InfoContext(ctx, "mcp.admin_op.executed", attrs...)
	if e.audit == nil {
		return
	}
	// Record even when the client has gone away: the action happened.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	entry := audittrail.Entry{CallID: key, Actor: p.Subject, Tool: t.Name, Reason: reason, Arguments: msg, Replayed: env.Replayed, ReplayOf: env.ReplayOf}
	if _, err := e.audit.Record(actx, entry); err != nil {
		e.log.ErrorContext(ctx, "audit.append_failed", "tool", t.Name, "subject", p.Subject, "call_id", key, "error", err)
	}
}

// auditTimeout bounds recording one admin call, retries included.
const auditTimeout = 5 * time.Second

// argumentsObject parses a call's arguments (already known to be an
// object, or absent) into their fields.
func argumentsObject(ctx context.Context, e *Edge, b *binding, args json.RawMessage) (map[string]json.RawMessage, *toolcall.Envelope) {
	obj := map[string]json.RawMessage{}
	if a := bytes.TrimSpace(args); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		if err := json.Unmarshal(a, &obj); err != nil {
			vs := []boundary.Violation{b.DecodeError(err)}
			boundary.LogRejection(ctx, e.log, boundary.MCPTool, vs)
			return nil, toolcall.Invalid(b.tool.Name, vs)
		}
	}
	return obj, nil
}

// guard checks the admin inputs — confirm that is the JSON literal true, a
// non-blank reason — and returns the arguments the request message decodes
// from (confirm and reason removed unless the message has such fields).
// The actor was checked before.
func (e *Edge) guard(ctx context.Context, b *binding, obj map[string]json.RawMessage) (args json.RawMessage, reason string, env *toolcall.Envelope) {
	t := b.tool
	if missing := toolcall.MissingAdmin(obj); len(missing) > 0 {
		return nil, "", missingAdminEnvelope(t.Name, missing)
	}
	out, reason, err := toolcall.StripAdmin(obj, b.Input())
	if err != nil {
		return nil, "", toolcall.Unexpected(ctx, e.log, t.Name, err)
	}
	return out, reason, nil
}

// missingAdminEnvelope is the guardrail_violated envelope naming exactly
// the admin inputs a call lacks.
func missingAdminEnvelope(tool string, missing []string) *toolcall.Envelope {
	v := ViolationMissingConfirm
	msg := fmt.Sprintf("%s is an administrative tool: set confirm to true (the JSON boolean) to confirm it", tool)
	if missing[0] == argReason {
		v = ViolationMissingReason
		msg = fmt.Sprintf("%s is an administrative tool: give a non-blank reason for it", tool)
	}
	if len(missing) == 2 {
		msg = fmt.Sprintf("%s is an administrative tool: set confirm to true (the JSON boolean) and give a non-blank reason", tool)
	}
	return guardrail(tool, v, msg)
}

func guardrail(tool, violation, msg string) *toolcall.Envelope {
	env := toolcall.Fail(tool, toolcall.CodeGuardrailViolated, msg)
	env.Violation = violation
	return env
}

// idempotencyKey returns the key the call carries: the client's, from
// _meta, or a fresh one.
func idempotencyKey(tool string, meta mcp.Meta) (string, *toolcall.Envelope) {
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return newIdempotencyKey(), nil
	}
	s, isString := v.(string)
	if !isString || !idempotencyKeyRE.MatchString(s) {
		return "", toolcall.Invalid(tool, []boundary.Violation{{Field: "_meta." + MetaIdempotencyKey, Rule: "idempotency_key",
			Message: "must be 1 to 128 characters of letters, digits, '.', '_', ':' or '-'"}})
	}
	return "mcp-client-" + s, nil
}

func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// progress tells a client that asked for progress that a call is still
// running, every ProgressInterval, so it can keep waiting; the returned
// function stops it. A long-running tool also reports its start.
func (e *Edge) progress(ctx context.Context, b *binding, req *mcp.CallToolRequest) func() {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n := 0
		notify := func(msg string) {
			n++
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
		}
		if b.tool.LongRunning {
			notify(b.tool.Title + ": started")
		}
		tick := time.NewTicker(e.cfg.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				notify(b.tool.Title + ": still running")
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// observe logs the outcome of a call and emits the events some outcomes
// promise: exactly one mcp.admin_op.executed per successful admin call, one
// mcp.capability_gap or mcp.not_supported per such envelope. A failed call
// is also reported to a client that set a log level. The outcome goes into
// the call's span and the tool call metrics.
func (e *Edge) observe(ctx context.Context, b *binding, p *identity.Principal, req *mcp.CallToolRequest, env *toolcall.Envelope, took time.Duration) {
	e.obs.endCall(ctx, b, env, took)
	t := b.tool
	subject, agent := "", ""
	if p != nil {
		subject, agent = p.Subject, p.Agent
	}
	switch {
	case env.DomainCode == toolcall.CodeCapabilityGap:
		e.log.WarnContext(ctx, "mcp.capability_gap", "tool", t.Name, "service", t.Service, "gap", env.Gap)
	case env.DomainCode == toolcall.CodeNotSupported:
		e.log.WarnContext(ctx, "mcp.not_supported", "tool", t.Name, "service", t.Service, "message", env.Message)
	}
	if env.Status == "ok" {
		e.log.DebugContext(ctx, "mcp.tool_call", "tool", t.Name, "subject", subject, "agent", agent, "status", "ok", "duration_ms", took.Milliseconds())
		return
	}
	e.log.InfoContext(ctx, "mcp.tool_call", "tool", t.Name, "subject", subject, "agent", agent, "status", "error", "domain_code", env.DomainCode, "duration_ms", took.Milliseconds())
	if req.Session != nil {
		//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on, but 2025-era clients that set a level still get a message per failed call
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "toolmesh.edge",
			Data: map[string]string{"tool": t.Name, "domain_code": env.DomainCode, "message": env.Message}})
	}
}

// lowerFirst lowercases the first letter of a title for use mid-sentence,
// unless it starts an acronym ("Create work task" → "create work task").
func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	if next, _ := utf8.DecodeRuneInString(s[n:]); unicode.IsUpper(next) {
		return s
	}
	return string(unicode.ToLower(r)) + s[n:]
}
