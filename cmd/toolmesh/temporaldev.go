package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/temporaldev"
)

// runTemporalDev runs the Temporal dev server from the pinned CLI (through
// internal/temporaldev: search attributes, dynamic config, state under the
// data dir) until ctx ends, with a /healthz that answers 200 only once the
// server really serves: the frontend, the search attributes and the UI.
// `toolmesh up` and Tilt start Temporal this way, as one more process.
func runTemporalDev(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	fs := flag.NewFlagSet("temporal-dev", flag.ContinueOnError)
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory for the server's state ("+temporaldev.DBFileName+") and log")
	bin := fs.String("temporal-bin", getenv("TOOLMESH_TEMPORAL_BIN"), "path of the pinned Temporal CLI (default: temporal next to this binary, else ./bin/temporal)")
	ip := fs.String("ip", "127.0.0.1", "address the frontend and the UI bind to")
	port := fs.Int("port", temporalPort, "frontend (gRPC) port")
	uiPort := fs.Int("ui-port", temporalUIPort, "Web UI port (0: no UI)")
	healthAddr := fs.String("health-addr", fmt.Sprintf("127.0.0.1:%d", temporalHealthPort), "address of the /healthz probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("temporal-dev takes no arguments, got %q", fs.Args())
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	binary, err := temporalBinary(*bin, self)
	if err != nil {
		return err
	}
	// Listen first: a busy health port fails before the server starts.
	lis, err := server.Listen(*healthAddr)
	if err != nil {
		return err
	}
	log = log.With("component", "temporal")
	srv, err := temporaldev.Start(ctx, temporaldev.Config{
		Binary:  binary,
		IP:      *ip,
		Port:    *port,
		UIPort:  *uiPort,
		DataDir: *dataDir,
		Log:     log,
	})
	if err != nil {
		lis.Close()
		return fmt.Errorf("start temporal: %w", err)
	}
	log.Info("temporal_dev.ready", "frontend", srv.HostPort(), "ui", srv.UIURL(), "namespace", srv.Namespace(), "state", srv.DBPath(), "log", srv.LogPath())

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		select {
		case <-srv.Done():
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("temporal dev server exited\n"))
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	// The health server stops when ctx ends or the dev server dies.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-srv.Done():
			cancel()
		case <-hctx.Done():
		}
	}()
	runErr := server.RunHTTP(hctx, server.NewHTTPServer(mux, log, server.Limits{}), lis, log, server.HTTPOptions{ShutdownTimeout: 5 * time.Second})
	died := false
	select {
	case <-srv.Done():
		died = ctx.Err() == nil
	default:
	}
	stopErr := srv.Stop()
	if died {
		return fmt.Errorf("temporal dev server exited unexpectedly: %w", stopErr)
	}
	return errors.Join(runErr, stopErr)
}
