package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulestore"
	schedulesworker "github.com/toolmesh/toolmesh/workers/schedules"
)

// buildSchedules serves the schedules domain on the Temporal frontend serve
// dialled (--temporal). It reads TOOLMESH_SCHEDULES_MIN_INTERVAL (shortest
// time between two runs, default 5m) and TOOLMESH_SCHEDULES_APPROVAL_TIMEOUT
// (how long the owner has to decide, default 168h), both Go durations.
func buildSchedules(ctx context.Context, db *sqldb.DB, deps serveDeps) (server.Service, error) {
	st, err := schedulestore.Open(ctx, db)
	if err != nil {
		return server.Service{}, err
	}
	cfg := schedules.Config{Log: deps.Log}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{
		{"TOOLMESH_SCHEDULES_MIN_INTERVAL", &cfg.MinInterval},
		{"TOOLMESH_SCHEDULES_APPROVAL_TIMEOUT", &cfg.ApprovalTimeout},
	} {
		if v := deps.Getenv(d.env); v != "" {
			n, err := time.ParseDuration(v)
			if err != nil || n < time.Second {
				return server.Service{}, fmt.Errorf("%s must be a duration of at least 1s (e.g. 5m), got %q", d.env, v)
			}
			*d.dst = n
		}
	}
	engine := schedules.NewTemporalEngine(deps.Temporal, schedules.TemporalConfig{Log: deps.Log})
	svc, err := schedules.New(st, engine, cfg)
	if err != nil {
		return server.Service{}, err
	}
	return svc.Registration(), nil
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
		Contracts: contracts(), Services: deps.Services, HTTPClient: deps.HTTPClient, Timeout: deps.CallTimeout, Log: deps.Log,
		ClientOptions: []connect.ClientOption{deps.Telemetry.ClientOption()},
	})
	if err != nil {
		return err
	}
	var notifier schedulesworker.Notifier = schedulesworker.LogNotifier{Log: deps.Log}
	if ownerURL := deps.Services[ownerv1connect.OwnerServiceName]; ownerURL != "" {
		notifier = schedulesworker.OwnerNotifier{Owner: ownerv1connect.NewOwnerServiceClient(deps.HTTPClient, ownerURL,
			deps.Telemetry.ClientOption(), connect.WithInterceptors(mesh.NewClientInterceptor(deps.Mesh, time.Minute)))}
	} else {
		deps.Log.Warn("schedules.owner_notices", "message", "no owner service configured: approval requests go to this log only")
	}
	schedulesworker.Register(w, &schedulesworker.Activities{
		Schedules: schedulesv1connect.NewSchedulesServiceClient(deps.HTTPClient, url,
			deps.Telemetry.ClientOption(), connect.WithInterceptors(mesh.NewClientInterceptor(deps.Mesh, time.Minute))),
		Identity: workerSelf("schedules"),
		Notifier: notifier,
		Tools:    tools,
		Mesh:     deps.Mesh,
		Log:      deps.Log,
	})
	return nil
}
