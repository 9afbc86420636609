// Package remoteagents connects the mesh's agents with A2A agents elsewhere
// (the Agent2Agent protocol, 1.0 and 0.3).
//
// Outbound: Discover reads a remote agent's card; Invoke sends it a message
// as a Temporal workflow (the remoteagents.invoke contract in
// toolmesh.remoteagents.v1; the worker is workers/remoteagents) with the
// deterministic id "invoke/<agent>/<invocation id>". The workflow sends the
// message with the invocation depth the mesh signs, follows the remote task
// until it ends and records the outcome here (RecordInvocationOutcome);
// cancelling the workflow cancels the remote task. Invoke waits a short
// while for the outcome, then returns the invocation to poll, like owner
// asks; the edge makes it an MCP task for clients that take tasks.
// InvokeStream (the remoteagents_invoke tool) is Invoke that reports, while
// it waits, what a streaming remote agent said (invokestream.go).
//
// Inbound: the mesh's A2A door (edge/a2adoor) calls the
// toolmesh.inbound.v1 contract (InboundService, inboundsvc.go) as the
// remote sender. A delivered message lands in the agent's inbox through the
// messages service, at the depth the sender's mesh signed, and opens an A2A
// task that completes when the agent answers in the message's thread. The
// tasks are durable (a2atasks.go): each keeps a log of its events, which
// streams replay from any replica, and push configs, whose events the
// remoteagents.inbound workflow sends.
package remoteagents

import (
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
)

// Defaults of Config.
const (
	// DefaultWait is how long Invoke waits for the answer when the request
	// names no wait.
	DefaultWait = 25 * time.Second
	// DefaultTimeout is how long an invocation is followed when the
	// request names no timeout.
	DefaultTimeout = time.Hour
)

// MaxDepth is the invocation depth from which Invoke is refused, as
// messages_send is (services/messages).
const MaxDepth = 3

// Config configures the service.
type Config struct {
	// Engine runs the invocations (required for Invoke, GetInvocation
	// and CancelInvocation; without it they answer unavailable).
	Engine Engine
	// Messages reaches the messages service, which inbound messages are
	// delivered through (required for the inbound RPCs). Its client must
	// forward the caller's mesh token (mesh.NewForwardingInterceptor).
	Messages messagesv1connect.MessagesServiceClient
	// Agents is the agents directory, which InboundService.GetAgent asks
	// which agents the A2A door may serve. Its client must forward the
	// caller's mesh token.
	Agents agentsv1connect.AgentsServiceClient
	// Egress decides which addresses remote agents may have: loopback,
	// private and link-local ones only when it allows them.
	Egress egress.Policy
	// DefaultWait and DefaultTimeout apply when a request names none.
	DefaultWait, DefaultTimeout time.Duration
	// Log receives the service's events.
	Log *slog.Logger
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Service implements toolmesh.remoteagents.v1.RemoteAgentsService.
type Service struct {
	store    Store
	wf       Engine
	messages messagesv1connect.MessagesServiceClient
	cfg      Config
	cards    *http.Client
	keys     *a2alink.KeySets
	log      *slog.Logger
	now      clock.Clock
}

var _ remoteagentsv1connect.RemoteAgentsServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = DefaultWait
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{
		store:    store,
		wf:       cfg.Engine,
		messages: cfg.Messages,
		cfg:      cfg,
		cards:    a2alink.HTTPClient(cfg.Egress, a2alink.CardTimeout, a2alink.MaxCardBytes),
		keys:     a2alink.NewKeySets(cfg.Egress),
		log:      cfg.Log,
		now:      cfg.Now,
	}
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	return server.Register(remoteagentsv1connect.RemoteAgentsServiceName, remoteagentsv1connect.RemoteAgentsServiceHandler(s),
		remoteagentsv1connect.NewRemoteAgentsServiceHandler, remoteagentsv1.RegisterRemoteAgentsServiceHandler)
}

// nowMillis is the current time at the precision the store keeps.
func (s *Service) nowMillis() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
