// Package agentcheck makes a service refuse calls from agents that are not
// registered and active in the agents directory (toolmesh.agents.v1). It asks
// AgentsService.Get, through the generated client and as the calling agent,
// and remembers positive answers for a short while so that the directory is
// not asked on every call.
//
// What the caller sees:
//   - an agent that is not registered (or whose id is not a valid agent id):
//     PermissionDenied, "agent x is not registered; ...";
//   - a paused or retired agent: PermissionDenied naming the status;
//   - the directory cannot be reached: Unavailable (the call is refused, not
//     let through).
//
// Registering an agent takes effect at once (negative answers are not
// remembered); pausing or retiring one takes effect within the cache TTL.
// Calls without an agent pass through untouched, so the handler answers
// Unauthenticated as it always does.
package agentcheck

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
)

// DefaultTTL is how long an "active" answer is remembered.
const DefaultTTL = 10 * time.Second

// lookupTimeout bounds one question to the directory.
const lookupTimeout = 5 * time.Second

// maxCached bounds the cache; past it, expired answers are dropped, and if
// that is not enough the cache starts over.
const maxCached = 10000

// Options tune a Checker. Zero values get the defaults.
type Options struct {
	// TTL is how long an agent found active is trusted without asking again.
	TTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// HTTPClient reaches the agents service; an h2c client when nil.
	HTTPClient connect.HTTPClient
	// Telemetry instruments the lookups (spans inside the checked call's
	// trace, the client RPC histogram).
	Telemetry telemetry.Providers
}

// Checker answers whether an agent may call.
type Checker struct {
	client agentsv1connect.AgentsServiceClient
	ttl    time.Duration
	now    func() time.Time

	mu     sync.Mutex
	active map[string]time.Time // agent -> when the answer expires
}

// New returns a checker that asks the agents service at baseURL
// ("http://127.0.0.1:7102").
func New(baseURL string, opts Options) *Checker {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		protocols := new(http.Protocols)
		protocols.SetUnencryptedHTTP2(true)
		opts.HTTPClient = &http.Client{Transport: &http.Transport{Protocols: protocols}}
	}
	return &Checker{
		// The lookup carries the caller's own identity (its verified mesh
		// token, forwarded): it asks about itself.
		client: agentsv1connect.NewAgentsServiceClient(opts.HTTPClient, strings.TrimRight(baseURL, "/"),
			connect.WithInterceptors(opts.Telemetry.ConnectInterceptor(), mesh.NewForwardingInterceptor())),
		ttl:    opts.TTL,
		now:    opts.Now,
		active: map[string]time.Time{},
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
	if c.cached(agent) {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	res, err := c.client.Get(lctx, &agentsv1.GetRequest{AgentId: agent})
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeNotFound, connect.CodeInvalidArgument:
			// InvalidArgument: the id is not even a valid agent id, so no
			// agent by that name can be registered.
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"agent %s is not registered; an operator must register it (agents_register) before it can call this service", agent))
		}
		// The cause (with the agents service's own error id, if any) is
		// logged under the answer's error id.
		return rpcerror.WithCause(connect.CodeUnavailable, fmt.Sprintf(
			"cannot check that agent %s is registered: the agents service did not answer (%s); try again", agent, connect.CodeOf(err)),
			fmt.Errorf("look up agent %s: %w", agent, err))
	}
	switch s := res.GetAgent().GetStatus(); s {
	case agentsv1.AgentStatus_AGENT_STATUS_ACTIVE:
		c.remember(agent)
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

func (c *Checker) cached(agent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.active[agent]
	return ok && c.now().Before(exp)
}

func (c *Checker) remember(agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.active) >= maxCached {
		for a, exp := range c.active {
			if !now.Before(exp) {
				delete(c.active, a)
			}
		}
		if len(c.active) >= maxCached {
			clear(c.active)
		}
	}
	c.active[agent] = now.Add(c.ttl)
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
