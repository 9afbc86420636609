package main

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulesstore"
	schedulesworker "github.com/toolmesh/toolmesh/workers/schedules"
)

// schedulesOptions binds the schedules domain's options; it serves on the
// Temporal frontend serve dialled (--temporal).
func schedulesOptions(s *config.Set) buildFunc {
	var minInterval, approvalTimeout time.Duration
	s.Duration(&minInterval, schedules.DefaultMinInterval, config.Opt{Flag: "min-interval", Env: "TOOLMESH_SCHEDULES_MIN_INTERVAL",
		Usage: "shortest time allowed between two runs of a schedule (at least 1s)"})
	s.Duration(&approvalTimeout, schedules.DefaultApprovalTimeout, config.Opt{Flag: "approval-timeout", Env: "TOOLMESH_SCHEDULES_APPROVAL_TIMEOUT",
		Usage: "how long the owner has to approve a schedule before it expires (at least 1s)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		cfg := schedules.Config{Log: deps.Log, MinInterval: minInterval, ApprovalTimeout: approvalTimeout}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		return buildSchedules(ctx, db, deps, cfg)
	}
}

func buildSchedules(ctx context.Context, db *sqldb.DB, deps serveDeps, cfg schedules.Config) ([]server.Service, error) {
	st, err := schedulesstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	engine := schedules.NewTemporalEngine(deps.Temporal, schedules.TemporalConfig{Log: deps.Log})
	svc, err := schedules.New(st, engine, cfg)
	if err != nil {
		return nil, err
	}
	return []server.Service{svc.Registration()}, nil
}

// registerSchedules runs the approval and run workflows of schedules: each
// run calls its tool through the services in deps.Services
// (deps.CallTimeout, the worker's --call-timeout, bounds one call). Approval
// requests reach the owner through OwnerService.Notify, or the worker's log
// when no owner service is configured.
func registerSchedules(w worker.Worker, deps workerDeps) error {
	url := deps.Services[schedulesv1connect.SchedulesServiceName]
	if url == "" {
		return errors.New("worker schedules needs the schedules service (--service schedules=http://...)")
	}
	tools, err := toolcall.BindAll(toolcall.BindConfig{
		Contracts: topology.Contracts(), Services: deps.Services, HTTPClient: deps.HTTPClient, Log: deps.Log,
		ClientOptions: []connect.ClientOption{deps.Telemetry.ClientOption()},
	})
	if err != nil {
		return err
	}
	var notifier schedulesworker.Notifier = schedulesworker.LogNotifier{Log: deps.Log}
	if ownerURL := deps.Services[ownerv1connect.OwnerServiceName]; ownerURL != "" {
		notifier = schedulesworker.OwnerNotifier{Owner: meshclient.New(deps.clients(), ownerv1connect.NewOwnerServiceClient, ownerURL)}
	} else {
		deps.Log.Warn("schedules.owner_notices", "message", "no owner service configured: approval requests go to this log only")
	}
	schedulesworker.Register(w, &schedulesworker.Activities{
		Schedules:   meshclient.New(deps.clients(), schedulesv1connect.NewSchedulesServiceClient, url),
		Identity:    workerSelf("schedules"),
		Notifier:    notifier,
		Tools:       tools,
		Mesh:        deps.Mesh,
		CallTimeout: deps.CallTimeout,
		Log:         deps.Log,
	})
	return nil
}
