package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1/outboxv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/eventlog"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
	eventlogworker "github.com/toolmesh/toolmesh/workers/eventlog"
)

// outboxDomains are the domains that declare events, by the service at
// whose address each serves its outbox: the event log pulls them.
var outboxDomains = map[string]string{
	"owner": ownerv1connect.OwnerServiceName,
	"tasks": tasksv1connect.TasksServiceName,
}

// eventlogPruneInterval is how often events past the retention are removed.
const eventlogPruneInterval = time.Hour

// eventlogOptions binds the event log's options: the mesh key its relay
// signs its pulls of the domains' outboxes with, and the log's retention.
func eventlogOptions(s *config.Set) buildFunc {
	var keyPath string
	var retention, pollInterval time.Duration
	var allowLoopback bool
	var maxSubs int
	var allowList []string
	cli.BindMeshKey(s, &keyPath, "mesh private key file that signs the relay's pulls of the domains' outboxes (and from which the key sealing webhook secrets is derived)")
	s.Bool(&allowLoopback, false, config.Opt{Flag: "webhook-allow-loopback", Env: "TOOLMESH_EVENTLOG_WEBHOOK_ALLOW_LOOPBACK",
		Usage: "development only: webhook subscriptions may name http:// callback URLs on the loopback interface (deploy/ leaves it off)"})
	s.Int(&maxSubs, eventlog.DefaultMaxSubscriptions, config.Opt{Flag: "max-subscriptions", Env: "TOOLMESH_EVENTLOG_MAX_SUBSCRIPTIONS",
		Usage: "how many live webhook subscriptions one principal may hold; events/subscribe past it fails with -32025"})
	s.List(&allowList, config.Opt{Flag: "webhook-allow", Env: "TOOLMESH_EVENTLOG_WEBHOOK_ALLOW",
		Usage: "an internal address (CIDR prefix or single IP) webhook callback URLs may reach anyway"})
	s.Duration(&retention, eventlog.DefaultRetention, config.Opt{Flag: "retention", Env: "TOOLMESH_EVENTLOG_RETENTION",
		Usage: "how long the event log keeps an event; a poll from a cursor older than that answers truncated"})
	s.Duration(&pollInterval, eventlog.DefaultPollInterval, config.Opt{Flag: "poll-interval", Env: "TOOLMESH_EVENTLOG_POLL_INTERVAL",
		Usage: "the nextPollMs a poll that read everything suggests (clients wait at least 1s)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		if maxSubs < 1 {
			return nil, fmt.Errorf("--max-subscriptions (TOOLMESH_EVENTLOG_MAX_SUBSCRIPTIONS) must be at least 1, got %d", maxSubs)
		}
		allow, err := egress.ParsePrefixes(allowList...)
		if err != nil {
			return nil, fmt.Errorf("--webhook-allow (TOOLMESH_EVENTLOG_WEBHOOK_ALLOW): %w", err)
		}
		if retention < time.Minute {
			return nil, fmt.Errorf("--retention (TOOLMESH_EVENTLOG_RETENTION) must be at least 1m, got %s", retention)
		}
		key, err := cli.ReadMeshKey(cli.OrDataFile(keyPath, deps.DataDir, cli.MeshKeyFile))
		if err != nil {
			return nil, err
		}
		signer, err := mesh.NewSigner(key, "toolmesh-eventlog")
		if err != nil {
			return nil, err
		}
		st, err := eventlogstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		types, err := toolcatalog.EventTypes(topology.Contracts())
		if err != nil {
			return nil, err
		}
		// Webhook secrets are sealed under a key derived from the mesh
		// key (internal/seal's HKDF, a purpose of its own): whoever holds
		// the mesh key can act as any caller already, and no second key
		// needs distributing.
		sealer, err := seal.New(key.Seed(), eventlog.SealPurpose)
		if err != nil {
			return nil, err
		}
		if allowLoopback {
			deps.Log.Warn("eventlog.webhook_allow_loopback", "message", "webhook subscriptions may name http:// loopback receivers (development only)")
		}
		svc, err := eventlog.New(st, eventlog.Config{Types: types, Retention: retention, PollInterval: pollInterval, Log: deps.Log,
			Webhooks: eventlog.Webhooks{Sealer: sealer, Egress: egress.Policy{Allow: allow}, AllowLoopback: allowLoopback,
				MaxPerPrincipal: maxSubs, Deliveries: eventlog.NewTemporalDeliveries(deps.Temporal)}})
		if err != nil {
			return nil, err
		}
		clients := meshclient.Config{Signer: signer, Timeout: 10 * time.Second}
		sources := eventlog.Sources{}
		for domain, name := range outboxDomains {
			if url := deps.Services[name]; url != "" {
				sources[domain] = meshclient.New(clients, outboxv1connect.NewOutboxServiceClient, url)
			}
		}
		self := mesh.Caller{Subject: "toolmesh-eventlog", Agent: "toolmesh-eventlog", Roles: []string{mesh.RoleService}}
		deps.runBeside(ctx, func(ctx context.Context) { svc.RunRelay(ctx, sources, self, eventlog.DefaultRelayInterval) })
		deps.runBeside(ctx, func(ctx context.Context) { svc.RunPrune(ctx, eventlogPruneInterval) })
		return []server.Service{svc.Registration()}, nil
	}
}

// outboxService serves a domain's outbox on db beside its own service.
func outboxService(db *sqldb.DB) server.Service { return outbox.NewService(db).Registration() }

// registerEventlog runs the delivery workflow of each webhook
// subscription; its activities call the event log, which signs and posts
// each delivery.
func registerEventlog(w worker.Worker, deps workerDeps) error {
	url := deps.Services[eventsv1connect.EventsServiceName]
	if url == "" {
		return fmt.Errorf("worker eventlog needs the event log (--service eventlog=http://...)")
	}
	client := meshclient.New(deps.clients(), eventsv1connect.NewEventsServiceClient, url)
	eventlogworker.Register(w, &eventlogworker.Activities{Events: client, Self: workerSelf("eventlog")})
	return nil
}
