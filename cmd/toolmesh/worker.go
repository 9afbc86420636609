package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// workerQueue is one Temporal task queue the binary can serve
// (`toolmesh worker <queue>`): its workflows and activities live in
// workers/<queue>.
type workerQueue struct {
	// port is the default health port under `toolmesh up`.
	port int
	// register adds the queue's workflows and activities to w.
	register func(w worker.Worker, deps workerDeps) error
}

// workerDeps is what a queue's register gets.
type workerDeps struct {
	// Temporal is the connected client (activities may start or signal
	// workflows with it).
	Temporal client.Client
	// Mesh signs the mesh tokens of the service calls activities make.
	Mesh *mesh.Signer
	// MeshKey is the mesh's private key itself, for what else the mesh
	// signs with it (the depth of A2A messages: internal/a2alink).
	MeshKey ed25519.PrivateKey
	// Services maps fully-qualified service names to base URLs.
	Services map[string]string
	// HTTPClient reaches the services (meshclient.HTTP).
	HTTPClient *http.Client
	// Getenv reads the environment (only cmd/ does).
	Getenv func(string) string
	// Log is the worker's logger.
	Log *slog.Logger
	// CallTimeout bounds each service call an activity makes of its own
	// (a schedule's run); an elicited call's carries the edge's.
	CallTimeout time.Duration
	// Telemetry instruments the service clients activities build
	// (Telemetry.ClientOption): their calls continue the activity's trace.
	Telemetry telemetry.Providers
}

// clients is how the queue's activities call the services: the worker's
// HTTP client, mesh key, call timeout and telemetry.
func (d workerDeps) clients() meshclient.Config {
	return meshclient.Config{HTTP: d.HTTPClient, Signer: d.Mesh, Timeout: d.CallTimeout, Telemetry: d.Telemetry}
}

// workerQueues lists the task queues; a new queue is added here
// (docs/adding-a-domain.md).
var workerQueues = map[string]workerQueue{
	// Tool calls that elicit input from the user over several rounds.
	"calls":     {port: 7209, register: registerCalls},
	"owner":     {port: 7206, register: registerOwner},
	"schedules": {port: 7207, register: registerSchedules},
	// Health snapshots of projects.
	"projects": {port: 7212, register: registerProjects},
	// Invocations of remote A2A agents.
	"remoteagents": {port: 7210, register: registerRemoteAgents},
	// Runs of agents' own workflows (their tool calls run on the calls queue).
	"workflows": {port: 7211, register: registerWorkflows},
	// Webhook deliveries of MCP events subscriptions (docs/events.md).
	"eventlog": {port: 7213, register: registerEventlog},
}

// auditRecorder records in the audit trail what a queue's activities
// must (extensions of asks and runs); nil without an audit service.
func (deps workerDeps) auditRecorder() *audittrail.Recorder {
	return audittrail.Dial(deps.clients(), deps.Services)
}

// registerCalls registers the calls queue: elicited tool calls, their side
// effects run against the services (workers/calls).
func registerCalls(w worker.Worker, deps workerDeps) error {
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  topology.Contracts(),
		Services:   deps.Services,
		HTTPClient: deps.HTTPClient,
		Mesh:       deps.Mesh,
		Log:        deps.Log,
		Telemetry:  deps.Telemetry,
	})
	if err != nil {
		return err
	}
	calls.Register(w, acts)
	return nil
}

// workerConfig is the configuration of `toolmesh worker <queue>`.
type workerConfig struct {
	temporalAddr, healthAddr, dataDir, keyPath string
	services                                   map[string]string
	callTimeout                                time.Duration
	telemetry                                  *cli.TelemetryFlags
}

func bindWorker(s *config.Set, getenv func(string) string, name string, q workerQueue) *workerConfig {
	c := &workerConfig{}
	s.String(&c.temporalAddr, defaultTemporalAddr, config.Opt{Flag: "temporal", Env: "TOOLMESH_TEMPORAL", Usage: "Temporal frontend address"})
	s.String(&c.healthAddr, fmt.Sprintf("127.0.0.1:%d", q.port), config.Opt{Flag: "health-addr", Env: "TOOLMESH_WORKER_" + strings.ToUpper(name) + "_HEALTH_ADDR",
		Usage: "address of the /healthz probe and /metrics"})
	cli.BindData(s, &c.dataDir, "directory holding mesh.key")
	cli.BindMeshKey(s, &c.keyPath, "mesh private key file that signs service calls")
	cli.BindServices(s, &c.services, nil)
	cli.BindCallTimeout(s, &c.callTimeout, "deadline of each service call an activity makes of its own, a schedule run's tool call included (an elicited call's side effect has the edge's)")
	// The schedules queue read its own variable once; one deadline governs
	// every queue now.
	s.Retired("TOOLMESH_SCHEDULES_CALL_TIMEOUT", "TOOLMESH_CALL_TIMEOUT or worker --call-timeout")
	c.telemetry = cli.BindTelemetry(s, getenv)
	return c
}

// runWorker serves one task queue until ctx ends, with /healthz on its
// health address answering 200 once the worker polls, and /metrics beside
// it (the Temporal SDK's worker, workflow and activity metrics, the service
// calls of activities, the process).
func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, log *slog.Logger) error {
	name, q, c, err := parseNamed(args, workerQueues, "worker", "task queue", getenv, stderr, bindWorker)
	if err != nil {
		return err
	}
	urls, err := topology.ServiceURLs(topology.OrLoopback(c.services))
	if err != nil {
		return err
	}
	c.keyPath = cli.OrDataFile(c.keyPath, c.dataDir, cli.MeshKeyFile)
	key, err := cli.ReadMeshKey(c.keyPath)
	if err != nil {
		return err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-worker-"+name)
	if err != nil {
		return err
	}
	log = log.With("worker", name)
	tel, err := c.telemetry.Start(ctx, "toolmesh-worker-"+name, stdout, log)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, log)
	tc, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: c.temporalAddr, Identity: "toolmesh-worker-" + name, Telemetry: tel.Providers}, log)
	if err != nil {
		return err
	}
	defer tc.Close()

	// Every service client of the queue's activities continues their
	// trace, even one built without deps.Telemetry.ClientOption.
	httpClient := meshclient.HTTP()
	httpClient.Transport = tel.Transport(httpClient.Transport)
	w := worker.New(tc, name, temporalclient.WorkerOptions())
	if err := q.register(w, workerDeps{Temporal: tc, Mesh: signer, MeshKey: key, Services: urls, HTTPClient: httpClient, Getenv: getenv, Log: log, CallTimeout: c.callTimeout, Telemetry: tel.Providers}); err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", name, err)
	}
	defer w.Stop()
	log.Info("worker.started", "task_queue", name, "temporal", c.temporalAddr)

	lis, err := server.Listen(c.healthAddr)
	if err != nil {
		return err
	}
	return server.RunHTTP(ctx, server.NewHTTPServer(cli.MetricsMux(tel.MetricsHandler(), c.telemetry.Pprof), log, server.Limits{}), lis, log, server.HTTPOptions{ShutdownTimeout: 5 * time.Second})
}
