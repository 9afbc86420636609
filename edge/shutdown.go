package edge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Every accepted tool call gets exactly one answer, also when the edge
// stops. Shutdown refuses new calls, gives the calls in flight
// Config.ShutdownGrace to finish, then cuts the rest short: each answers
// "unavailable" with how to retry it safely, before its connection closes.
// A call whose service fails under it (a crashed process, a dropped
// connection) answers "unavailable" with the same advice.

// errShuttingDown is why the calls the edge cuts short are cancelled.
var errShuttingDown = errors.New("the edge is shutting down")

// inflight tracks the work in flight that Shutdown must see answered.
type inflight struct {
	stopping atomic.Bool
	// calls are tool calls running in a handler.
	calls *counter
	// answers are requests whose answer is not written yet: HTTP POSTs
	// being served, calls read over stdio and not yet answered.
	answers *counter
	// stop is cancelled, with errShuttingDown, to cut the calls short.
	stop  context.Context
	abort context.CancelCauseFunc
}

func newInflight() *inflight {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &inflight{stop: ctx, abort: cancel, calls: newCounter(), answers: newCounter()}
}

// begin registers a call. Its context ends with errShuttingDown when the
// edge cuts the calls in flight short; end must be called when it has its
// answer. ok is false once the edge is stopping: the call must not run.
func (f *inflight) begin(ctx context.Context) (_ context.Context, end func(), ok bool) {
	f.calls.Add(1)
	// Shutdown sets stopping before it reads the count, and this reads
	// stopping after it counted: one of them sees the other.
	if f.stopping.Load() {
		f.calls.Add(-1)
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(f.stop, func() { cancel(errShuttingDown) })
	return ctx, func() {
		unhook()
		cancel(nil)
		f.calls.Add(-1)
	}, true
}

// counter counts work in progress; wait returns when there is none. It
// costs an atomic add per change, and a channel send only while someone
// waits.
type counter struct {
	n        atomic.Int64
	watching atomic.Bool
	drained  chan struct{}
}

func newCounter() *counter { return &counter{drained: make(chan struct{}, 1)} }

// Add counts d more (or, negative, fewer) in progress.
func (c *counter) Add(d int64) {
	if c.n.Add(d) <= 0 && c.watching.Load() {
		select {
		case c.drained <- struct{}{}:
		default:
		}
	}
}

func (c *counter) load() int64 { return max(c.n.Load(), 0) }

// wait returns when the count is zero, or ctx's error when ctx ends first.
func (c *counter) wait(ctx context.Context) error {
	c.watching.Store(true)
	for c.n.Load() > 0 {
		select {
		case <-c.drained:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Shutdown answers every tool call in flight before the edge stops: new
// calls are refused at once (unavailable), the calls in flight get
// Config.ShutdownGrace to finish, and those still running then are cut
// short and answer unavailable, with how to retry. Once every answer is
// written, the MCP sessions are closed, which also ends 2025-era
// standalone streams. It returns when all is done, or with ctx's error
// when ctx ends first. Call it once the listener stops accepting
// connections (it is server.HTTPOptions.AnswerInFlight of the edge's
// listener).
func (e *Edge) Shutdown(ctx context.Context) error {
	f := e.pipeline.inflight
	f.stopping.Store(true)
	e.log.Info("edge.stopping", "calls_in_flight", f.calls.load(), "grace", e.cfg.ShutdownGrace.String())
	gctx, cancel := context.WithTimeout(ctx, e.cfg.ShutdownGrace)
	err := f.calls.wait(gctx)
	cancel()
	if err != nil {
		e.log.Warn("edge.calls_cut_short", "calls", f.calls.load(), "message", "calls still running at shutdown answer unavailable")
	}
	f.abort(errShuttingDown)
	if err := f.calls.wait(ctx); err != nil {
		return fmt.Errorf("edge shutdown: %d calls still running: %w", f.calls.load(), err)
	}
	if err := f.answers.wait(ctx); err != nil {
		return fmt.Errorf("edge shutdown: %d answers not written: %w", f.answers.load(), err)
	}
	if o := e.pipeline.outcomes; o != nil {
		o.Close(ctx)
	}
	return e.mcp.CloseSessions(ctx)
}

// retryAdvice makes an unavailable answer say how to retry: a call the
// edge's shutdown refused, or cut short (which its service call reports
// as unavailable, a deadline or an internal error), answers unavailable;
// an unavailable service's answer to a call with side effects gains the
// advice (reading again is always safe).
func retryAdvice(ctx context.Context, env *toolcall.Envelope, name string, kind toolv1.Kind, refused bool, meta map[string]any) *toolcall.Envelope {
	switch {
	case refused:
		return toolcall.Fail(name, toolcall.CodeUnavailable, "toolmesh is shutting down and did not run this call: retry it")
	case errors.Is(context.Cause(ctx), errShuttingDown) && cutShort[env.DomainCode]:
		return toolcall.Fail(name, toolcall.CodeUnavailable, "toolmesh is shutting down and cut this call short. "+retryHint(kind, meta))
	case env.DomainCode == toolcall.CodeUnavailable && kind != toolv1.Kind_KIND_READ:
		env.Message = strings.TrimSuffix(env.Message, ".") + ". " + retryHint(kind, meta)
	}
	return env
}

// cutShort are the domain codes of a service call whose context ended.
var cutShort = map[string]bool{toolcall.CodeUnavailable: true, toolcall.CodeDeadlineExceeded: true, toolcall.CodeInternal: true}

// retryHint says how to retry a call that may or may not have taken effect.
func retryHint(kind toolv1.Kind, meta map[string]any) string {
	if kind == toolv1.Kind_KIND_READ {
		return "Retry the call."
	}
	if key, ok := meta[MetaIdempotencyKey].(string); ok && idempotencyKeyRE.MatchString(key) {
		return fmt.Sprintf("It may or may not have taken effect; retry it with the same idempotency key (_meta %q = %q), which applies it once.", MetaIdempotencyKey, key)
	}
	return fmt.Sprintf("It may or may not have taken effect; check before retrying, and give calls an idempotency key (_meta %q) to make retries safe.", MetaIdempotencyKey)
}
