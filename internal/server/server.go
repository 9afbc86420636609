// Package server runs one domain service: a single h2c listener that serves
// Connect, gRPC and gRPC-Web (connect-go), gRPC server reflection,
// grpc.health.v1, REST/JSON through grpc-gateway, and a plain /healthz for
// probes, and /metrics for Prometheus when given. Every request passes the
// telemetry interceptor (a span continuing the caller's trace, the RPC
// duration histogram), the error interceptor (an unexpected error or a
// panic answers with a fixed message and an error id, its cause logged;
// see newErrorInterceptor), the mesh interceptor (a verified mesh token: no
// or a bad token is Unauthenticated) and the protovalidate interceptor
// before its handler runs.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// Service is one Connect service to mount.
type Service struct {
	// Name is the fully-qualified service name, e.g. "toolmesh.tasks.v1.TasksService".
	Name string
	// Mount builds the Connect handler with the given options; it is the
	// generated New<Service>Handler bound to the implementation.
	Mount func(opts ...connect.HandlerOption) (string, http.Handler)
	// Gateway registers the service's REST routes on mux, calling it over
	// conn (the generated Register<Service>Handler). Optional.
	Gateway func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error
	// Public are routes ("GET /path/{x}" patterns) served without a mesh
	// token: only what a domain publishes to anyone by design (a signed
	// attestation). Optional.
	Public map[string]http.Handler
}

// Register describes impl, the implementation of the service name, for New:
// newHandler is its generated New<Service>Handler and gateway its generated
// Register<Service>Handler (nil for none).
func Register[H any](name string, impl H, newHandler func(H, ...connect.HandlerOption) (string, http.Handler),
	gateway func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error) Service {
	return Service{
		Name:    name,
		Mount:   func(opts ...connect.HandlerOption) (string, http.Handler) { return newHandler(impl, opts...) },
		Gateway: gateway,
	}
}

// Options tune a Server. Zero values get sensible defaults.
type Options struct {
	// DrainDelay is how long the server keeps answering, while reporting
	// NOT_SERVING, before it stops accepting requests on shutdown.
	DrainDelay time.Duration
	// ShutdownTimeout bounds how long in-flight requests may finish.
	ShutdownTimeout time.Duration
	// Interceptors run after the mesh and validation interceptors.
	Interceptors []connect.Interceptor
	// Mesh verifies the mesh token of every request. Required: a service
	// never trusts identity it cannot verify.
	Mesh *mesh.Verifier
	// Telemetry instruments every call, REST included (none when zero).
	Telemetry telemetry.Providers
	// Metrics, when set, is served at GET /metrics (the process's
	// Prometheus page), unauthenticated like /healthz.
	Metrics http.Handler
	// Limits cut off slow and oversized clients (defaults when zero).
	Limits Limits
	// Pprof serves /debug/pprof beside /metrics (see HandlePprof).
	Pprof bool
	// Busy tells an error of the services' store that is transient (a
	// busy or locked database: sqldb.IsBusy); the caller gets Unavailable,
	// which it may retry, instead of Internal. Nil: no error is. It is
	// given, not imported: this package knows no database.
	Busy func(error) bool
}

// compressMinBytes is the smallest response a service compresses for a
// client that accepts compression.
const compressMinBytes = 4 << 10

// Server is a running service listener.
type Server struct {
	log     *slog.Logger
	lis     net.Listener
	http    *http.Server
	health  *grpchealth.StaticChecker
	names   []string
	serving atomic.Bool
	gwConn  *grpc.ClientConn
	opts    Options
}

// New builds a server for services on lis. It does not start serving.
func New(ctx context.Context, lis net.Listener, log *slog.Logger, opts Options, services ...Service) (*Server, error) {
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.Mesh == nil {
		return nil, errors.New("server: no mesh token verifier configured (the mesh public key)")
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	opts.Limits = opts.Limits.withDefaults()
	validator, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	interceptors := append([]connect.Interceptor{
		opts.Telemetry.ConnectInterceptor(),
		newErrorInterceptor(log, opts.Busy),
		mesh.NewServerInterceptor(opts.Mesh, log),
		boundary.NewRequestInterceptor(validator, log),
	}, opts.Interceptors...)
	handlerOpts := []connect.HandlerOption{connect.WithInterceptors(interceptors...),
		// Compressing a small answer costs more CPU than it saves bytes
		// (and a gzip writer's reset alone outweighs a point read).
		connect.WithCompressMinBytes(compressMinBytes)}
	handlerOpts = append(handlerOpts, strictJSONCodecs()...)
	if max := opts.Limits.MaxBodyBytes; max > 0 {
		// The cap again after decompression.
		handlerOpts = append(handlerOpts, connect.WithReadMaxBytes(int(max)))
	}

	names := make([]string, 0, len(services))
	mux := http.NewServeMux()
	for _, s := range services {
		path, h := s.Mount(handlerOpts...)
		mux.Handle(path, h)
		for pattern, h := range s.Public {
			mux.Handle(pattern, h)
		}
		names = append(names, s.Name)
	}
	reflector := grpcreflect.NewStaticReflector(names...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	checker := grpchealth.NewStaticChecker(names...)
	mux.Handle(grpchealth.NewHandler(checker))

	s := &Server{log: log, lis: lis, health: checker, names: names, opts: opts}
	mux.HandleFunc("GET /healthz", s.healthz)
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Pprof {
		HandlePprof(mux)
	}

	// REST: grpc-gateway translates JSON/HTTP into gRPC calls to this same
	// listener, so REST requests pass the same interceptors; the trace
	// follows both hops.
	gwConn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		opts.Telemetry.GatewayDialOption())
	if err != nil {
		return nil, fmt.Errorf("dial own gRPC port for gateway: %w", err)
	}
	s.gwConn = gwConn
	useStrictQuery()
	gw := runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		runtime.WithMiddlewares(telemetry.GatewayRoute),
	)
	hasGateway := false
	for _, svc := range services {
		if svc.Gateway == nil {
			continue
		}
		if err := svc.Gateway(ctx, gw, gwConn); err != nil {
			gwConn.Close()
			return nil, fmt.Errorf("register REST gateway for %s: %w", svc.Name, err)
		}
		hasGateway = true
	}
	if hasGateway {
		mux.Handle("/v1/", opts.Telemetry.GatewayHandler(gw))
	}

	s.http = NewHTTPServer(mux, log, opts.Limits)
	return s, nil
}

// incomingHeader forwards the idempotency key from REST requests to the gRPC
// call, besides the gateway's defaults (which pass Authorization, and so the
// mesh token, through as "authorization").
func incomingHeader(key string) (string, bool) {
	if http.CanonicalHeaderKey(key) == mesh.HeaderIdempotencyKey {
		return strings.ToLower(key), true
	}
	return runtime.DefaultHeaderMatcher(key)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.serving.Load() {
		http.Error(w, "not serving", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Run serves until ctx is cancelled, then shuts down gracefully: it reports
// NOT_SERVING on health checks, waits DrainDelay, and lets in-flight requests
// finish within ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	s.setServing(true)
	s.log.Info("server.started", "addr", s.Addr(), "services", s.names)
	defer s.gwConn.Close()
	return RunHTTP(ctx, s.http, s.lis, s.log, HTTPOptions{
		DrainDelay:      s.opts.DrainDelay,
		ShutdownTimeout: s.opts.ShutdownTimeout,
		OnDrain:         func() { s.setServing(false) },
		// The gateway's connection to this listener would otherwise keep
		// an HTTP/2 connection open through the shutdown.
		BeforeShutdown: func() { s.gwConn.Close() },
	})
}

// HTTPOptions tune RunHTTP.
type HTTPOptions struct {
	// DrainDelay is how long to keep serving after OnDrain before closing.
	DrainDelay time.Duration
	// ShutdownTimeout bounds how long in-flight requests may finish.
	ShutdownTimeout time.Duration
	// OnDrain runs when shutdown begins (e.g. to fail readiness checks).
	OnDrain func()
	// BeforeShutdown runs after the drain delay, before connections close.
	BeforeShutdown func()
	// AnswerInFlight, when set, runs once the listener has closed, beside
	// the server's graceful shutdown: it must make every request still in
	// flight answer (the edge answers its tool calls "unavailable") before
	// ctx ends, so that no accepted request sees its connection drop. Its
	// ctx ends ShutdownTimeout after the shutdown began.
	AnswerInFlight func(ctx context.Context)
}

// RunHTTP serves hs on lis until ctx is cancelled, then shuts down
// gracefully. It is the one shutdown sequence of every toolmesh listener.
func RunHTTP(ctx context.Context, hs *http.Server, lis net.Listener, log *slog.Logger, opts HTTPOptions) error {
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	if opts.OnDrain != nil {
		opts.OnDrain()
	}
	log.Info("server.draining", "addr", lis.Addr().String(), "delay", opts.DrainDelay.String())
	if opts.DrainDelay > 0 {
		time.Sleep(opts.DrainDelay)
	}
	if opts.BeforeShutdown != nil {
		opts.BeforeShutdown()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	answered := make(chan struct{})
	if opts.AnswerInFlight != nil {
		go func() {
			defer close(answered)
			opts.AnswerInFlight(sctx)
		}()
	} else {
		close(answered)
	}
	err := hs.Shutdown(sctx)
	<-answered
	if err != nil {
		// Whatever is left is cut off now, rather than when the process
		// exits.
		_ = hs.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("server.stopped", "addr", lis.Addr().String())
	return nil
}

// NewHTTPServer returns an http.Server that serves HTTP/1.1 and cleartext
// HTTP/2 (h2c) within limits (defaults for zero fields): header and body
// deadlines, the body cap and the cap on connections per client address.
func NewHTTPServer(h http.Handler, log *slog.Logger, limits Limits) *http.Server {
	limits = limits.withDefaults()
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           limits.guardBodies(h),
		Protocols:         protocols,
		ReadHeaderTimeout: limits.HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if limits.MaxConnsPerClient > 0 {
		hs.ConnState = newConnLimiter(limits.MaxConnsPerClient, log).track
	}
	return hs
}

func (s *Server) setServing(on bool) {
	status := grpchealth.StatusNotServing
	if on {
		status = grpchealth.StatusServing
	}
	s.serving.Store(on)
	s.health.SetStatus("", status)
	for _, n := range s.names {
		s.health.SetStatus(n, status)
	}
}

// Listen opens a TCP listener on addr ("127.0.0.1:0" picks a free port).
func Listen(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return lis, nil
}
