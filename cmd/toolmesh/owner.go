package main

import (
	"context"
	"fmt"
	"net/netip"

	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
	ownerworker "github.com/toolmesh/toolmesh/workers/owner"
)

// ownerWebhookAllowEnv lists the addresses (CIDR cli.JoinPrefixes or single IPs,
// comma-separated) webhook channels may reach although they are loopback,
// private, link-local or cloud metadata addresses, e.g.
// "127.0.0.1,10.20.0.0/16". Empty: none.
const ownerWebhookAllowEnv = "TOOLMESH_OWNER_WEBHOOK_ALLOW"

// ownerOptions binds the owner domain's options; its asks run as
// workflows on the Temporal frontend serve dialled (--temporal).
func ownerOptions(s *config.Set) buildFunc {
	var allowList []string
	s.List(&allowList, config.Opt{Flag: "webhook-allow", Env: ownerWebhookAllowEnv,
		Usage: "an internal address (CIDR prefix or single IP) webhook channels may reach anyway"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		allow, err := egress.ParsePrefixes(allowList...)
		if err != nil {
			return nil, fmt.Errorf("--webhook-allow (%s): %w", ownerWebhookAllowEnv, err)
		}
		return buildOwner(ctx, db, deps, allow)
	}
}

func buildOwner(ctx context.Context, db *sqldb.DB, deps serveDeps, allow []netip.Prefix) ([]server.Service, error) {
	st, err := ownerstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	if len(allow) > 0 {
		deps.Log.Warn("owner.webhook_allow", "allowed", fmt.Sprint(allow), "message", "webhook channels may reach these internal addresses")
	}
	svc, err := owner.New(st, owner.Config{
		Engine: owner.NewTemporalEngine(deps.Temporal),
		Egress: egress.Policy{Allow: allow},
		Log:    deps.Log,
	})
	if err != nil {
		return nil, err
	}
	deps.runBeside(ctx, func(ctx context.Context) { svc.RunSweeps(ctx, workflowrun.SweepInterval) })
	return []server.Service{svc.Registration(), outboxService(db)}, nil
}

// workerSelf is the mesh identity of a worker acting for itself.
func workerSelf(queue string) mesh.Caller {
	name := "toolmesh-worker-" + queue
	return mesh.Caller{Subject: name, Agent: name, Roles: []string{mesh.RoleService}}
}

// registerOwner runs the ask workflow; its activities call OwnerService
// through the generated client, each call with a fresh mesh token, and
// record extensions in the audit trail.
func registerOwner(w worker.Worker, deps workerDeps) error {
	url := deps.Services[ownerv1connect.OwnerServiceName]
	if url == "" {
		return fmt.Errorf("worker owner needs the owner service (--service owner=http://...)")
	}
	client := meshclient.New(deps.clients(), ownerv1connect.NewOwnerServiceClient, url)
	ownerworker.Register(w, &ownerworker.Activities{Owner: client, Self: workerSelf("owner"), Audit: deps.auditRecorder(), Log: deps.Log})
	return nil
}
