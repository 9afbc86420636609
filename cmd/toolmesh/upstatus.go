package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/supervise"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Metrics of `toolmesh up` on its status page's /metrics.
const (
	// metricUpRestarts counts restarts by process.
	metricUpRestarts = "toolmesh.up.restarts"
	// metricUpReady is 1 while a process is ready, else 0.
	metricUpReady = "toolmesh.up.process.ready"
)

// upStatus is what the status page's /status.json answers.
type upStatus struct {
	Processes []supervise.Status `json:"processes"`
}

// serveUpStatus serves the status page of `toolmesh up` on lis until ctx
// ends or stop is called:
//
//	GET /             the processes as a table (what `toolmesh up status` prints)
//	GET /status.json  the same as JSON
//	GET /metrics      Prometheus: restarts and readiness by process
//	GET /healthz      200 when every process is ready, else 503 naming those that are not
func serveUpStatus(ctx context.Context, lis net.Listener, sup *supervise.Supervisor, log *slog.Logger) (stop func(), err error) {
	tel, err := telemetry.New(telemetry.Config{ServiceName: "toolmesh-up", Version: cli.Version})
	if err != nil {
		return nil, err
	}
	attrProcess := attribute.Key("process")
	meter := tel.Meter()
	restarts, err := meter.Int64ObservableCounter(metricUpRestarts, metric.WithUnit("{restart}"),
		metric.WithDescription("Restarts of a process of toolmesh up after it exited unexpectedly."))
	if err != nil {
		return nil, err
	}
	ready, err := meter.Int64ObservableGauge(metricUpReady,
		metric.WithDescription("1 while the process is running and ready, else 0."))
	if err != nil {
		return nil, err
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range sup.Status() {
			attrs := metric.WithAttributes(attrProcess.String(st.Name))
			o.ObserveInt64(restarts, int64(st.Restarts), attrs)
			r := int64(0)
			if st.State == supervise.StateReady {
				r = 1
			}
			o.ObserveInt64(ready, r, attrs)
		}
		return nil
	}, restarts, ready); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeStatusTable(w, sup.Status(), time.Now())
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(upStatus{Processes: sup.Status()})
	})
	mux.Handle("GET /metrics", tel.MetricsHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		var down []string
		for _, st := range sup.Status() {
			if st.State != supervise.StateReady {
				down = append(down, st.Name+" "+string(st.State))
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		if len(down) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", strings.Join(down, ", "))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := server.RunHTTP(sctx, server.NewHTTPServer(mux, log, server.Limits{}), lis, log, server.HTTPOptions{ShutdownTimeout: time.Second}); err != nil {
			log.Warn("up.status_page_failed", "error", err)
		}
	}()
	return func() {
		cancel()
		<-done
		cli.StopTelemetry(tel, log)
	}, nil
}

// writeStatusTable prints one line per process.
func writeStatusTable(w io.Writer, procs []supervise.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPID\tFOR\tRESTARTS\tLAST FAILURE")
	for _, st := range procs {
		pid := "-"
		if st.PID != 0 {
			pid = fmt.Sprint(st.PID)
		}
		state := string(st.State)
		if len(st.WaitingFor) > 0 {
			state += " for " + strings.Join(st.WaitingFor, ",")
		}
		last := st.LastFailure
		if last == "" {
			last = "-"
		} else if st.RecentFailures > 0 {
			last += fmt.Sprintf(" (%d recent)", st.RecentFailures)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", st.Name, state, pid, now.Sub(st.Since).Round(time.Second), st.Restarts, last)
	}
	_ = tw.Flush()
}

// upStatusConfig is the configuration of `toolmesh up status`.
type upStatusConfig struct {
	portOffset int
	statusAddr string
	json       bool
}

func bindUpStatus(s *config.Set) *upStatusConfig {
	c := &upStatusConfig{}
	bindPortOffset(s, &c.portOffset, "the --port-offset of the toolmesh up to ask")
	bindStatusAddr(s, &c.statusAddr, "the --status-addr of the toolmesh up to ask")
	s.Bool(&c.json, false, config.Opt{Flag: "json", Usage: "print JSON"})
	return c
}

// runUpStatus prints the processes of a running `toolmesh up`, read from
// its status page.
func runUpStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("up status", getenv, stderr)
	c := bindUpStatus(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	offset, addr, asJSON := &c.portOffset, &c.statusAddr, &c.json
	if *addr == "" {
		*addr = fmt.Sprintf("127.0.0.1:%d", upStatusPort+*offset)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+"/status.json", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("no toolmesh up answers at %s (is it running, with this --port-offset?): %w", *addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status page at %s: %s", *addr, resp.Status)
	}
	var st upStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("status page at %s: %w", *addr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if len(st.Processes) == 0 {
		return errors.New("the status page lists no processes")
	}
	writeStatusTable(stdout, st.Processes, time.Now())
	return nil
}
