package main

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
	"github.com/toolmesh/toolmesh/services/workflows"
	"github.com/toolmesh/toolmesh/services/workflows/workflowsstore"
	workflowsworker "github.com/toolmesh/toolmesh/workers/workflows"
)

// workflowsOptions binds the limits of agents' workflows; runs are
// workflows on the Temporal frontend serve dialled (--temporal).
func workflowsOptions(s *config.Set) buildFunc {
	var cfg workflows.Config
	s.Int(&cfg.MaxNodes, workflows.DefaultMaxNodes, config.Opt{Flag: "max-nodes", Env: "TOOLMESH_WORKFLOWS_MAX_NODES",
		Usage: fmt.Sprintf("most nodes a workflow definition may have (at most %d)", workflows.MaxNodesLimit)})
	s.Int(&cfg.MaxParallel, workflows.DefaultMaxParallel, config.Opt{Flag: "max-parallel", Env: "TOOLMESH_WORKFLOWS_MAX_PARALLEL",
		Usage: "most branches one parallel node may run at once"})
	s.Duration(&cfg.RunTimeout, workflows.DefaultRunTimeout, config.Opt{Flag: "run-timeout", Env: "TOOLMESH_WORKFLOWS_RUN_TIMEOUT",
		Usage: "how long a run may take when its request names no timeout"})
	s.Duration(&cfg.MaxRunDuration, workflows.DefaultMaxRunDuration, config.Opt{Flag: "max-run-duration", Env: "TOOLMESH_WORKFLOWS_MAX_RUN_DURATION",
		Usage: "the longest a run may take, extensions included"})
	cli.BindCallTimeout(s, &cfg.CallTimeout, "deadline of each tool call of a run's action nodes")
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		st, err := workflowsstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		cfg.Contracts, cfg.Log = topology.Contracts(), deps.Log
		svc, err := workflows.New(st, workflows.NewTemporalEngine(deps.Temporal), cfg)
		if err != nil {
			return nil, err
		}
		deps.runBeside(ctx, func(ctx context.Context) { svc.RunSweeps(ctx, workflowrun.SweepInterval) })
		return []server.Service{svc.Registration()}, nil
	}
}

// registerWorkflows runs agents' workflow runs: the run records itself
// with the workflows service and asks the owner through the owner service
// (each call with a fresh mesh token); its tool calls are the calls queue's
// activities, so `toolmesh worker calls` must run too.
func registerWorkflows(w worker.Worker, deps workerDeps) error {
	url := deps.Services[workflowsv1connect.WorkflowsServiceName]
	if url == "" {
		return errors.New("worker workflows needs the workflows service (--service workflows=http://...)")
	}
	// No deadline of the worker's: each activity bounds its own calls (an
	// approval waits for the owner's answer longer than a call timeout).
	clients := meshclient.Config{HTTP: deps.HTTPClient, Signer: deps.Mesh, Telemetry: deps.Telemetry}
	acts := &workflowsworker.Activities{
		Workflows: meshclient.New(clients, workflowsv1connect.NewWorkflowsServiceClient, url),
		Self:      workerSelf("workflows"),
		Audit:     deps.auditRecorder(),
		Log:       deps.Log,
	}
	if ownerURL := deps.Services[ownerv1connect.OwnerServiceName]; ownerURL != "" {
		acts.Owner = meshclient.New(clients, ownerv1connect.NewOwnerServiceClient, ownerURL)
	} else {
		deps.Log.Warn("workflows.no_owner", "message", "no owner service configured: approval nodes fail")
	}
	workflowsworker.Register(w, acts)
	return nil
}
