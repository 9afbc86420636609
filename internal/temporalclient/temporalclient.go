// Package temporalclient dials Temporal the one way every toolmesh process
// does: the given frontend address and namespace, slog logging, payloads
// encoded as protobuf JSON (readable in the Temporal UI), no gRPC
// compression, and telemetry: a workflow started, signalled, updated or
// queried inside a trace continues it (through its activities, and the
// service calls they make), and the SDK's metrics go to the process's meter
// provider. Workers built on the client inherit both.
package temporalclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	otelsdk "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Config names the Temporal frontend to dial.
type Config struct {
	// HostPort is the frontend address, e.g. "127.0.0.1:7233".
	HostPort string
	// Namespace defaults to "default".
	Namespace string
	// Identity names this client in the Temporal UI (e.g. "toolmesh-worker-owner").
	Identity string
	// Telemetry traces workflows and activities and receives the SDK's
	// metrics (none when zero).
	Telemetry telemetry.Providers
}

func (cfg Config) options(log *slog.Logger) client.Options {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	var interceptors []interceptor.ClientInterceptor
	if tracing, err := tracingInterceptor(cfg.Telemetry); err != nil {
		log.Warn("temporal.tracing_off", "error", err)
	} else {
		interceptors = append(interceptors, tracing)
	}
	return client.Options{
		HostPort:      cfg.HostPort,
		Namespace:     cfg.Namespace,
		Identity:      cfg.Identity,
		Logger:        tlog.NewStructuredLogger(log.With("component", "temporal")),
		DataConverter: DataConverter(),
		// Payloads are small protobuf JSON on a local or cluster network:
		// gzip (the SDK's default) costs more CPU per round trip than it
		// saves, as inside the mesh.
		ConnectionOptions: client.ConnectionOptions{
			GrpcCompression: &client.GrpcCompressionNone{},
			// Reconnect within a second of Temporal coming back (a
			// restarted dev server): the SDK's default waits up to 10s
			// between attempts.
			DialOptions: []grpc.DialOption{
				grpc.WithConnectParams(grpc.ConnectParams{
					Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
					MinConnectTimeout: 5 * time.Second,
				}),
				// Inside the SDK's retries: each attempt ends a moment
				// before its caller's deadline.
				grpc.WithChainUnaryInterceptor(retryUpdateNotReady, leaveReplyMargin),
			},
		},
		Interceptors: interceptors,
		MetricsHandler: otelsdk.NewMetricsHandler(otelsdk.MetricsHandlerOptions{
			Meter:                cfg.Telemetry.Meters().Meter(telemetry.TemporalScope),
			UseMonotonicCounters: true,
			// The default panics; a metric that cannot be recorded is
			// not worth a worker.
			OnError: func(err error) { log.Warn("temporal.metrics_error", "error", err) },
		}),
	}
}

// ReplyMargin is how long before its caller's deadline a call to Temporal
// gives up (a tenth of the time left, when that is less). The SDK retries a
// call while Temporal cannot be reached, up to the call's deadline; a
// service that waits on Temporal that long has no time left to answer its
// own caller, who then sees deadline_exceeded from its side instead of the
// service's unavailable. With the margin the service answers unavailable in
// time.
const ReplyMargin = 500 * time.Millisecond

func leaveReplyMargin(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if dl, ok := ctx.Deadline(); ok {
		margin := min(ReplyMargin, time.Until(dl)/10)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// updateMethods are the calls that deliver a workflow update: the first
// sends it, the second waits for its outcome.
var updateMethods = map[string]bool{
	workflowservice.WorkflowService_UpdateWorkflowExecution_FullMethodName:     true,
	workflowservice.WorkflowService_PollWorkflowExecutionUpdate_FullMethodName: true,
	workflowservice.WorkflowService_ExecuteMultiOperation_FullMethodName:       true,
}

// retryUpdateNotReady sends an update again when Temporal answers that the
// workflow task carrying it failed (WorkflowNotReady). That happens in
// normal operation — new events reached the workflow while the task that
// held the update ran, and the server failed the task (unhandled command)
// rather than the update — and the SDK does not retry it. The update was
// not accepted, so sending it again, under its same update id, does it
// once. Tries go on, backing off, until the caller's deadline.
func retryUpdateNotReady(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !updateMethods[method] {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	wait := 20 * time.Millisecond
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !updateNotReady(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// updateNotReady reports whether err is Temporal's WorkflowNotReady, as
// the SDK's error or as the gRPC status it travels in.
func updateNotReady(err error) bool {
	var notReady *serviceerror.WorkflowNotReady
	if errors.As(err, &notReady) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && errors.As(serviceerror.FromStatus(st), &notReady)
}

// NewLazy returns a client that connects on first use, for a process that
// must start (and serve what needs no Temporal) while Temporal is down; a
// call made while it is unreachable fails.
func NewLazy(cfg Config, log *slog.Logger) (client.Client, error) {
	c, err := client.NewLazyClient(cfg.options(log))
	if err != nil {
		return nil, fmt.Errorf("temporal client for %s: %w", cfg.HostPort, err)
	}
	return c, nil
}

// CheckReachable logs, for a lazy client, whether Temporal answers now: a
// warning that says what is unavailable when it does not (a wrong address
// shows at start, not at the first call that needs it).
func CheckReachable(ctx context.Context, c client.Client, hostPort string, log *slog.Logger) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		if ctx.Err() == nil {
			log.Warn("temporal.unreachable", "temporal", hostPort, "error", err.Error(),
				"message", "calls that need Temporal answer unavailable until it answers; everything else is served")
		}
		return
	}
	log.Info("temporal.reachable", "temporal", hostPort)
}

// Dial connects to Temporal and checks the connection.
func Dial(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	c, err := client.DialContext(ctx, cfg.options(log))
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %s: %w", cfg.HostPort, err)
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("temporal at %s is not healthy: %w", cfg.HostPort, err)
	}
	return c, nil
}

// DataConverter encodes protobuf messages as protobuf JSON (so the Temporal UI
// shows them readably) and everything else as JSON.
func DataConverter() converter.DataConverter {
	return converter.NewCompositeDataConverter(
		converter.NewNilPayloadConverter(),
		converter.NewByteSlicePayloadConverter(),
		converter.NewProtoJSONPayloadConverterWithOptions(converter.ProtoJSONPayloadConverterOptions{}),
		converter.NewProtoPayloadConverter(),
		converter.NewJSONPayloadConverter(),
	)
}

// WorkerOptions are the options of every toolmesh worker. Workflows and
// activities are registered under explicit names and called by those
// names, never by function reference, so renaming a Go function renames
// no Temporal type (docs/temporal-versioning.md).
func WorkerOptions() worker.Options {
	return worker.Options{DisableRegistrationAliasing: true}
}

// ReplayerOptions replay a history the way a worker with WorkerOptions,
// on a client from Dial, runs it.
func ReplayerOptions() worker.WorkflowReplayerOptions {
	return worker.WorkflowReplayerOptions{DataConverter: DataConverter(), DisableRegistrationAliasing: true}
}
