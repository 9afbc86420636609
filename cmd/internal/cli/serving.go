package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/toolmesh/toolmesh/internal/server"
)

// MetricsMux serves a process's /metrics and /healthz, and /debug/pprof
// when pprof is set.
func MetricsMux(metrics http.Handler, pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	if pprof {
		server.HandlePprof(mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// HTTPListener is one server of a process and the listener it serves.
type HTTPListener struct {
	Srv  *http.Server
	Lis  net.Listener
	Opts server.HTTPOptions
}

// RunHTTPAll serves every listener until ctx ends or one fails, then
// stops them all.
func RunHTTPAll(ctx context.Context, log *slog.Logger, servers ...HTTPListener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(servers))
	for _, h := range servers {
		go func() {
			err := server.RunHTTP(ctx, h.Srv, h.Lis, log, h.Opts)
			cancel()
			errs <- err
		}()
	}
	var all []error
	for range servers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}
