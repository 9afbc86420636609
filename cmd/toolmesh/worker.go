package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/mesh"
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
	// HTTPClient reaches the services (h2c).
	HTTPClient *http.Client
	// Getenv reads the environment (only cmd/ does).
	Getenv func(string) string
	// Log is the worker's logger.
	Log *slog.Logger
	// CallTimeout bounds each service call an activity makes.
	CallTimeout time.Duration
	// Telemetry instruments the service clients activities build
	// (Telemetry.ClientOption): their calls continue the activity's trace.
	Telemetry telemetry.Providers
}

// workerQueues lists the task queues; each issue that adds workflows adds
// its queue here.
var workerQueues = map[string]workerQueue{
	// Tool calls that elicit input from the user over several rounds.
	"calls":     {port: 7209, register: registerCalls},
	"owner":     {port: 7206, register: registerOwner},
	"schedules": {port: 7207, register: registerSchedules},
	// Invocations of remote A2A agents.
	"remoteagents": {port: 7210, register: registerRemoteAgents},
}

// registerCalls registers the calls queue: elicited tool calls, their side
// effects run against the services (workers/calls).
func registerCalls(w worker.Worker, deps workerDeps) error {
	acts, err := calls.NewActivities(calls.Config{
		Contracts:     contracts(),
		Services:      deps.Services,
		HTTPClient:    deps.HTTPClient,
		Mesh:          deps.Mesh,
		CallTimeout:   deps.CallTimeout,
		Log:           deps.Log,
		ClientOptions: []connect.ClientOption{deps.Telemetry.ClientOption()},
	})
	if err != nil {
		return err
	}
	calls.Register(w, acts)
	return nil
}

func workerNames() string {
	names := make([]string, 0, len(workerQueues))
	for n := range workerQueues {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// runWorker serves one task queue until ctx ends, with /healthz on its
// health address answering 200 once the worker polls, and /metrics beside
// it (the Temporal SDK's worker, workflow and activity metrics, the service
// calls of activities, the process).
func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("worker needs a task queue: %s", workerNames())
	}
	name := args[0]
	q, ok := workerQueues[name]
	if !ok {
		return fmt.Errorf("unknown task queue %q (queues: %s)", name, workerNames())
	}
	fs := flag.NewFlagSet("worker "+name, flag.ContinueOnError)
	temporalAddr := fs.String("temporal", envOr(getenv, "TOOLMESH_TEMPORAL", "127.0.0.1:7233"), "Temporal frontend address")
	healthAddr := fs.String("health-addr", fmt.Sprintf("127.0.0.1:%d", q.port), "address of the /healthz probe")
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory holding mesh.key")
	keyPath := fs.String("mesh-key", getenv("TOOLMESH_MESH_KEY"), "mesh private key file that signs service calls (default <data>/mesh.key)")
	services, err := envServices(getenv)
	if err != nil {
		return err
	}
	fs.Var(services, "service", "a domain service as domain=url (repeatable; default $"+servicesEnv+", else every domain on loopback), e.g. tasks=http://127.0.0.1:7101")
	callTimeout := fs.Duration("call-timeout", 15*time.Second, "deadline of each service call an activity makes")
	telFlags := addTelemetryFlags(fs, getenv)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if len(services) == 0 {
		for n, d := range domains {
			services[n] = fmt.Sprintf("http://127.0.0.1:%d", d.port)
		}
	}
	urls, err := serviceURLs(services)
	if err != nil {
		return err
	}
	if *keyPath == "" {
		*keyPath = filepath.Join(*dataDir, meshKeyFile)
	}
	key, err := readMeshKey(*keyPath)
	if err != nil {
		return err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-worker-"+name)
	if err != nil {
		return err
	}
	log = log.With("worker", name)
	tel, err := telFlags.start(ctx, "toolmesh-worker-"+name, stdout, log)
	if err != nil {
		return err
	}
	defer stopTelemetry(tel, log)
	tc, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: *temporalAddr, Identity: "toolmesh-worker-" + name, Telemetry: tel.Providers}, log)
	if err != nil {
		return err
	}
	defer tc.Close()

	// Every service client of the queue's activities continues their
	// trace, even one built without deps.Telemetry.ClientOption.
	httpClient := newH2CClient()
	httpClient.Transport = tel.Transport(httpClient.Transport)
	w := worker.New(tc, name, temporalclient.WorkerOptions())
	if err := q.register(w, workerDeps{Temporal: tc, Mesh: signer, MeshKey: key, Services: urls, HTTPClient: httpClient, Getenv: getenv, Log: log, CallTimeout: *callTimeout, Telemetry: tel.Providers}); err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", name, err)
	}
	defer w.Stop()
	log.Info("worker.started", "task_queue", name, "temporal", *temporalAddr)

	lis, err := server.Listen(*healthAddr)
	if err != nil {
		return err
	}
	return server.RunHTTP(ctx, server.NewHTTPServer(metricsMux(tel.MetricsHandler(), *telFlags.pprof), log, server.Limits{}), lis, log, server.HTTPOptions{ShutdownTimeout: 5 * time.Second})
}

// newH2CClient returns an HTTP client that speaks cleartext HTTP/2 to the
// mesh's services.
func newH2CClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
}
