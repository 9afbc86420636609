// Package agentcheck makes a service refuse calls from agents that are not
// registered and active in the agents directory (toolmesh.agents.v1). It asks
// AgentsService.Get, through the generated client and as the calling agent,
// and remembers positive answers so that the directory is not asked on
// every call.
//
// What the caller sees:
//   - an agent that is not registered (or whose id is not a valid agent id):
//     PermissionDenied, "agent x is not registered; ...";
//   - a paused or retired agent: PermissionDenied naming the status;
//   - the directory cannot be reached: the remembered answer while it is at
//     most MaxStale past its TTL, else Unavailable (an agent the checker
//     never saw active is never let through).
//
// The cache:
//   - an "active" answer is trusted for TTL (10s) without asking; a call in
//     the second half of the TTL refreshes it in the background (as the
//     calling agent), so an agent that keeps calling is never held up by a
//     lookup, and a status change reaches it within about TTL/2 of its calls;
//   - concurrent calls of one agent share one lookup;
//   - refusals are never remembered: registering an agent takes effect at
//     once; pausing or retiring one takes effect within the TTL;
//   - when the directory cannot be reached (down, restarting, overloaded),
//     the last "active" answer is used for up to MaxStale (5m) more. A
//     status only changes through the directory itself, so while it is
//     down nothing can have changed but what changed in the last TTL before
//     it went down; refusing every call of every agent instead would turn
//     one service's outage into the whole mesh's. Past MaxStale, or for an
//     agent not seen active before, the call is refused as Unavailable.
//
// Cross-process invalidation (the directory telling services at once that
// an agent was paused) would need services to hold a directory subscription
// of their own, which needs an identity services do not have: they verify
// mesh tokens but cannot sign them. The TTL bounds the delay instead.
//
// Calls without an agent pass through untouched, so the handler answers
// Unauthenticated as it always does.
package agentcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
)

// Defaults of Options.
const (
	// DefaultTTL is how long an "active" answer is trusted without asking.
	DefaultTTL = 10 * time.Second
	// DefaultMaxStale is how long past its TTL an "active" answer is used
	// while the directory cannot be reached.
	DefaultMaxStale = 5 * time.Minute
)

// lookupTimeout bounds one question to the directory.
const lookupTimeout = 5 * time.Second

// maxCached bounds the cache; past it, answers too old to use are dropped,
// and if that is not enough the cache starts over.
const maxCached = 10000

// MetricChecks counts checks by result: cached (a remembered answer),
// looked_up (the directory said active), stale (the directory could not be
// reached; a remembered answer was used), refused, unavailable.
const MetricChecks = "toolmesh.agentcheck.checks"

// Options tune a Checker. Zero values get the defaults.
type Options struct {
	// TTL is how long an agent found active is trusted without asking again.
	TTL time.Duration
	// MaxStale is how long past TTL an active answer is still used while
	// the directory cannot be reached; negative: never.
	MaxStale time.Duration
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// HTTPClient reaches the agents service (default meshclient.HTTP()).
	HTTPClient connect.HTTPClient
	// Log receives agentcheck.lookup_failed when the directory stops
	// answering, and agentcheck.lookup_recovered when it answers again.
	Log *slog.Logger
	// Telemetry instruments the lookups (spans inside the checked call's
	// trace, the client RPC histogram) and counts checks (MetricChecks).
	Telemetry telemetry.Providers
}

// Checker answers whether an agent may call.
type Checker struct {
	client   agentsv1connect.AgentsServiceClient
	ttl      time.Duration
	maxStale time.Duration
	now      clock.Clock
	log      *slog.Logger
	checks   metric.Int64Counter

	mu          sync.Mutex
	active      map[string]*entry  // agents the directory said are active
	flights     map[string]*flight // lookups under way, by agent
	unreachable bool               // the last lookup could not reach the directory
}

type entry struct {
	at         time.Time // when the directory said active
	refreshing bool
}

// flight is one lookup that concurrent checks of an agent share.
type flight struct {
	done   chan struct{}
	status agentsv1.AgentStatus // set before done closes
	err    error
}

// Results of a check (the result attribute of MetricChecks).
var (
	resultCached      = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "cached")))
	resultLookedUp    = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "looked_up")))
	resultStale       = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "stale")))
	resultRefused     = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "refused")))
	resultUnavailable = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "unavailable")))
)

// New returns a checker that asks the agents service at baseURL
// ("http://127.0.0.1:7102").
func New(baseURL string, opts Options) *Checker {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	switch {
	case opts.MaxStale == 0:
		opts.MaxStale = DefaultMaxStale
	case opts.MaxStale < 0:
		opts.MaxStale = 0
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	checks, err := opts.Telemetry.Meter().Int64Counter(MetricChecks, metric.WithUnit("{check}"),
		metric.WithDescription("Checks that a calling agent is registered and active, by result."))
	if err != nil {
		opts.Log.Warn("agentcheck.metrics_off", "error", err)
		checks, _ = metricnoop.Meter{}.Int64Counter(MetricChecks)
	}
	return &Checker{
		// The lookup carries the caller's own identity (its verified mesh
		// token, forwarded): it asks about itself.
		client:   meshclient.New(meshclient.Config{HTTP: opts.HTTPClient, Telemetry: opts.Telemetry}, agentsv1connect.NewAgentsServiceClient, baseURL),
		ttl:      opts.TTL,
		maxStale: opts.MaxStale,
		now:      opts.Now,
		log:      opts.Log,
		checks:   checks,
		active:   map[string]*entry{},
		flights:  map[string]*flight{},
	}
}

// Check returns nil when the calling agent in ctx (mesh.FromContext) is
// registered and active, and the connect error to answer with otherwise.
func (c *Checker) Check(ctx context.Context) error {
	caller := mesh.FromContext(ctx).Caller
	agent := caller.Agent
	if agent == "" || caller.HasRole(mesh.RoleService) {
		return nil
	}
	if c.fresh(ctx, agent) {
		c.checks.Add(ctx, 1, resultCached)
		return nil
	}
	f := c.lookup(ctx, agent)
	select {
	case <-f.done:
	case <-ctx.Done():
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return connect.NewError(code, ctx.Err())
	}
	err := c.settle(ctx, agent, f)
	if err == nil {
		c.checks.Add(ctx, 1, resultLookedUp)
		return nil
	}
	if isAnswer(f) {
		c.checks.Add(ctx, 1, resultRefused)
		return err
	}
	if c.usable(agent) {
		c.checks.Add(ctx, 1, resultStale)
		return nil
	}
	c.checks.Add(ctx, 1, resultUnavailable)
	return err
}

// fresh reports whether agent was found active within the TTL; in the
// second half of the TTL it starts a background refresh, as the caller.
func (c *Checker) fresh(ctx context.Context, agent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.active[agent]
	if !ok {
		return false
	}
	age := c.now().Sub(e.at)
	if age >= c.ttl {
		return false
	}
	if age >= c.ttl/2 && !e.refreshing {
		e.refreshing = true
		f := c.lookupLocked(ctx, agent)
		go func() {
			<-f.done
			_ = c.settle(ctx, agent, f)
			c.mu.Lock()
			e.refreshing = false
			c.mu.Unlock()
		}()
	}
	return true
}

// usable reports whether agent's last active answer may still be used while
// the directory cannot be reached.
func (c *Checker) usable(agent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.active[agent]
	return ok && c.now().Sub(e.at) < c.ttl+c.maxStale
}

// lookup returns the lookup of agent under way, or starts one.
func (c *Checker) lookup(ctx context.Context, agent string) *flight {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookupLocked(ctx, agent)
}

func (c *Checker) lookupLocked(ctx context.Context, agent string) *flight {
	if f, ok := c.flights[agent]; ok {
		return f
	}
	f := &flight{done: make(chan struct{})}
	c.flights[agent] = f
	// Shared: one caller leaving must not cut the others' lookup short.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	go func() {
		defer cancel()
		res, err := c.client.Get(lctx, &agentsv1.GetRequest{AgentId: agent})
		c.mu.Lock()
		defer c.mu.Unlock()
		f.status, f.err = res.GetAgent().GetStatus(), err
		if err == nil && f.status == agentsv1.AgentStatus_AGENT_STATUS_ACTIVE {
			c.rememberLocked(agent)
		} else if err == nil || isAnswer(f) {
			delete(c.active, agent)
		}
		delete(c.flights, agent)
		close(f.done)
	}()
	return f
}

// isAnswer reports whether the directory answered about the agent (as
// opposed to not answering at all).
func isAnswer(f *flight) bool {
	switch connect.CodeOf(f.err) {
	case connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return true
	}
	return f.err == nil
}

// settle turns a finished lookup into the check's answer, and logs when
// the directory stops or starts answering.
func (c *Checker) settle(ctx context.Context, agent string, f *flight) error {
	unreachable := !isAnswer(f)
	c.mu.Lock()
	was := c.unreachable
	c.unreachable = unreachable
	c.mu.Unlock()
	if unreachable != was {
		if unreachable {
			c.log.WarnContext(ctx, "agentcheck.lookup_failed", "agent", agent, "code", connect.CodeOf(f.err).String(), "error", f.err.Error(),
				"message", "the agents directory cannot be reached: agents seen active in the last "+(c.ttl+c.maxStale).String()+" may still call, others are refused as unavailable")
		} else {
			c.log.InfoContext(ctx, "agentcheck.lookup_recovered", "agent", agent)
		}
	}
	if f.err != nil {
		switch connect.CodeOf(f.err) {
		case connect.CodeNotFound, connect.CodeInvalidArgument:
			// InvalidArgument: the id is not even a valid agent id, so no
			// agent by that name can be registered.
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"agent %s is not registered; an operator must register it (agents_register) before it can call this service", agent))
		}
		// The cause (with the agents service's own error id, if any) is
		// logged under the answer's error id.
		return rpcerror.WithCause(connect.CodeUnavailable, fmt.Sprintf(
			"cannot check that agent %s is registered: the agents service did not answer (%s); try again", agent, connect.CodeOf(f.err)),
			fmt.Errorf("look up agent %s: %w", agent, f.err))
	}
	switch s := f.status; s {
	case agentsv1.AgentStatus_AGENT_STATUS_ACTIVE:
		return nil
	case agentsv1.AgentStatus_AGENT_STATUS_PAUSED:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"agent %s is paused; it may call again once an operator sets it active", agent))
	case agentsv1.AgentStatus_AGENT_STATUS_RETIRED:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"agent %s is retired and may no longer call", agent))
	default:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("agent %s has status %s and may not call", agent, s))
	}
}

func (c *Checker) rememberLocked(agent string) {
	now := c.now()
	if _, ok := c.active[agent]; !ok && len(c.active) >= maxCached {
		for a, e := range c.active {
			if now.Sub(e.at) >= c.ttl+c.maxStale {
				delete(c.active, a)
			}
		}
		if len(c.active) >= maxCached {
			clear(c.active)
		}
	}
	if e, ok := c.active[agent]; ok {
		e.at = now
		return
	}
	c.active[agent] = &entry{at: now}
}

// Interceptor returns the server interceptor that runs Check before every
// handler. Install it after the mesh interceptor, which puts the caller in
// the context (server.Options.Interceptors do run after it).
func (c *Checker) Interceptor() connect.Interceptor {
	return interceptor{c}
}

type interceptor struct{ c *Checker }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			if err := i.c.Check(ctx); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.c.Check(ctx); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
