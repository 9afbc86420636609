package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/temporaldev"
)

// temporalDevConfig is the configuration of `toolmesh temporal-dev`.
type temporalDevConfig struct {
	dataDir, bin, ip, healthAddr string
	port, uiPort                 int
}

func bindTemporalDev(s *config.Set) *temporalDevConfig {
	c := &temporalDevConfig{}
	cli.BindData(s, &c.dataDir, "directory for the server's state ("+temporaldev.DBFileName+") and log")
	bindTemporalBin(s, &c.bin)
	s.String(&c.ip, "127.0.0.1", config.Opt{Flag: "ip", Env: "TOOLMESH_TEMPORAL_DEV_IP", Usage: "address the frontend and the UI bind to"})
	s.Int(&c.port, temporalPort, config.Opt{Flag: "port", Env: "TOOLMESH_TEMPORAL_DEV_PORT", Usage: "frontend (gRPC) port"})
	s.Int(&c.uiPort, temporalUIPort, config.Opt{Flag: "ui-port", Env: "TOOLMESH_TEMPORAL_DEV_UI_PORT", Usage: "Web UI port (0: no UI)"})
	s.String(&c.healthAddr, fmt.Sprintf("127.0.0.1:%d", temporalHealthPort), config.Opt{Flag: "health-addr", Env: "TOOLMESH_TEMPORAL_DEV_HEALTH_ADDR", Usage: "address of the /healthz probe"})
	return c
}

// runTemporalDev runs the Temporal dev server from the pinned CLI (through
// internal/temporaldev: search attributes, dynamic config, state under the
// data dir) until ctx ends, with a /healthz that answers 200 only once the
// server really serves: the frontend, the search attributes and the UI.
// `toolmesh up` and Tilt start Temporal this way, as one more process.
func runTemporalDev(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, log *slog.Logger) error {
	s := cli.NewConfig("temporal-dev", getenv, stderr)
	c := bindTemporalDev(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("temporal-dev takes no arguments, got %q", s.FlagSet().Args())
	}
	dataDir, bin, ip, port, uiPort, healthAddr := &c.dataDir, &c.bin, &c.ip, &c.port, &c.uiPort, &c.healthAddr
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
