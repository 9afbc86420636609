// Package owner is the owner domain: agents ask the human owner questions
// and wait for the answers, and send the owner notifications, which fan out
// to the channels the owner configured.
//
// Each ask is a Temporal workflow (the owner.ask contract in
// toolmesh.owner.v1; the worker is workers/owner) with the deterministic id
// "ask/<agent>/<ask id>". The ask id comes from the call's idempotency key,
// so a retried call finds the ask its first attempt made instead of asking
// again. The workflow notifies the owner, waits for the answer update (or
// signal) or the expire time, and records the outcome here
// (RecordAskOutcome) before it ends; this service's database is the record
// every read (GetAsk, ListAsks, MCP tasks/get) uses.
//
// Who sees what: an agent sees and cancels only its own asks; the owner
// (mesh.RoleOwner) sees every agent's, answers them and configures the
// notification channels.
package owner

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/server"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
)

// Defaults of Config.
const (
	// DefaultWait is how long Ask waits for the answer when the request
	// names no wait.
	DefaultWait = 25 * time.Second
	// DefaultTimeout is how long the owner has to answer when the request
	// names no timeout.
	DefaultTimeout = time.Hour
	// DefaultDeliveryTimeout bounds one webhook delivery.
	DefaultDeliveryTimeout = 10 * time.Second
)

// Config configures the service.
type Config struct {
	// Engine runs the asks (required for the ask RPCs; without it they
	// answer unavailable).
	Engine Engine
	// DefaultWait is Ask's wait when the request names none (DefaultWait).
	DefaultWait time.Duration
	// DefaultTimeout is an ask's timeout when the request names none
	// (DefaultTimeout).
	DefaultTimeout time.Duration
	// Egress decides which addresses webhook channels may reach: loopback,
	// private, link-local and metadata addresses only when it allows them.
	Egress egress.Policy
	// DeliveryTimeout bounds one webhook delivery (DefaultDeliveryTimeout).
	DeliveryTimeout time.Duration
	// Log receives the log channel's notifications and the service's events.
	Log *slog.Logger
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Service implements toolmesh.owner.v1.OwnerService.
type Service struct {
	store     Store
	wf        Engine
	cfg       Config
	webhooks  *http.Client
	validator *boundary.Validator
	log       *slog.Logger
	now       clock.Clock
}

var _ ownerv1connect.OwnerServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) (*Service, error) {
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = DefaultWait
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	return &Service{
		store:     store,
		wf:        cfg.Engine,
		cfg:       cfg,
		webhooks:  cfg.Egress.Client(egress.ClientOptions{Timeout: cfg.DeliveryTimeout}),
		validator: v,
		log:       cfg.Log,
		now:       cfg.Now,
	}, nil
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(ownerv1connect.OwnerServiceName, ownerv1connect.OwnerServiceHandler(s), ownerv1connect.NewOwnerServiceHandler, ownerv1.RegisterOwnerServiceHandler)
}

// nowMillis is the current time at the precision the store keeps.
func (s *Service) nowMillis() time.Time { return s.now().UTC().Truncate(time.Millisecond) }
