package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Trace exporters (--trace-exporter, or OTEL_TRACES_EXPORTER).
const (
	traceExporterNone   = "none"
	traceExporterOTLP   = "otlp"
	traceExporterStdout = "stdout"
)

// TelemetryFlags holds the telemetry settings every long-running command
// (serve, worker, edge) takes. The OTLP exporter reads the standard
// OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, TLS, timeout).
type TelemetryFlags struct {
	exporter string
	protocol string
	ratio    float64
	// service is OTEL_SERVICE_NAME: the process's name in traces when set.
	service string
	// pprof serves /debug/pprof on the process's metrics address.
	Pprof bool
}

func BindTelemetry(s *config.Set, getenv func(string) string) *TelemetryFlags {
	t := &TelemetryFlags{service: getenv("OTEL_SERVICE_NAME")}
	s.String(&t.exporter, traceExporterNone, config.Opt{Flag: "trace-exporter", Env: "OTEL_TRACES_EXPORTER",
		Usage: "where spans go: none, otlp (OTEL_EXPORTER_OTLP_* settings) or stdout"})
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, the standard's more specific
	// variable, wins over the general one.
	protocolEnv := "OTEL_EXPORTER_OTLP_PROTOCOL"
	if getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") != "" {
		protocolEnv = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	}
	s.String(&t.protocol, "http/protobuf", config.Opt{Flag: "otlp-protocol", Env: protocolEnv,
		Usage: "OTLP protocol of --trace-exporter otlp: grpc or http/protobuf (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins when set)"})
	s.Float64(&t.ratio, 1, config.Opt{Flag: "trace-sample-ratio", Env: "TOOLMESH_TRACE_SAMPLE_RATIO",
		Usage: "fraction of new traces recorded, in (0, 1]; calls inside a trace follow their caller"})
	s.Bool(&t.Pprof, false, config.Opt{Flag: "pprof", Env: "TOOLMESH_PPROF",
		Usage: "serve Go's profiles at /debug/pprof on the metrics address (go tool pprof http://<addr>/debug/pprof/profile)"})
	return t
}

// Start builds the process's telemetry: spans to the chosen exporter
// (stdout writes them to out), metrics for /metrics. Stop it with
// StopTelemetry to flush what is left.
func (f *TelemetryFlags) Start(ctx context.Context, service string, out io.Writer, log *slog.Logger) (*telemetry.Telemetry, error) {
	if f.service != "" {
		service = f.service
	}
	var exp sdktrace.SpanExporter
	var err error
	switch kind := strings.ToLower(f.exporter); kind {
	case traceExporterNone, "":
	case traceExporterStdout, "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(out))
	case traceExporterOTLP:
		switch f.protocol {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("--otlp-protocol %q: want grpc or http/protobuf", f.protocol)
		}
	default:
		return nil, fmt.Errorf("--trace-exporter %q: want none, otlp or stdout", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	if r := f.ratio; r <= 0 || r > 1 {
		return nil, fmt.Errorf("--trace-sample-ratio %v: want a fraction in (0, 1]", r)
	}
	// The SDK reports export failures (a collector that is down) through
	// its one global error handler: into this process's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("telemetry.error", "error", err) }))
	tel, err := telemetry.New(telemetry.Config{ServiceName: service, Version: Version, Exporter: exp, SampleRatio: f.ratio})
	if err != nil {
		return nil, err
	}
	if exp != nil {
		log.Info("telemetry.tracing", "exporter", strings.ToLower(f.exporter), "service_name", service, "sample_ratio", f.ratio)
	}
	return tel, nil
}

// StopTelemetry flushes the spans not yet exported, for a few seconds at
// most.
func StopTelemetry(tel *telemetry.Telemetry, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		log.Warn("telemetry.shutdown", "error", err)
	}
}

// Version is reported as service.version.
const Version = "dev"
