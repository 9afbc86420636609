package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/console"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
)

// Default addresses of `toolmesh console` (plus --port-offset under up).
const (
	consolePort        = 7180
	consoleMetricsPort = 7181
)

// consoleSessionKeyFile is the console's session key under the data
// directory, created by the console when missing.
const consoleSessionKeyFile = "console-session.key"

// consoleConfig is the configuration of `toolmesh console`.
type consoleConfig struct {
	addr, edgeURL, dataDir, keyFile, metricsAddr, statusURL, temporalUI string
	hosts                                                               []string
	// Sign-in (OpenID Connect), on when issuer is set.
	issuer, clientID, clientSecretFile, publicURL, resource string
	scopes                                                  []string
	sessionTTL, pollInterval                                time.Duration
	telemetry                                               *cli.TelemetryFlags
}

func bindConsole(s *config.Set, getenv func(string) string) *consoleConfig {
	c := &consoleConfig{}
	s.String(&c.addr, fmt.Sprintf("127.0.0.1:%d", consolePort), config.Opt{Flag: "addr", Env: "TOOLMESH_CONSOLE_ADDR",
		Usage: "listen address; on loopback the console serves the local owner without sign-in (development mode)"})
	s.String(&c.edgeURL, fmt.Sprintf("http://127.0.0.1:%d/mcp", edgePort), config.Opt{Flag: "edge-url", Env: "TOOLMESH_CONSOLE_EDGE_URL",
		Usage: "the edge's MCP endpoint, through which the console makes every call as the signed-in person"})
	s.List(&c.hosts, config.Opt{Flag: "allow-host", Env: "TOOLMESH_CONSOLE_ALLOWED_HOSTS", Usage: "Host header value the console answers to, besides loopback names on loopback"})
	cli.BindData(s, &c.dataDir, "directory holding the console's session key")
	s.String(&c.keyFile, "", config.Opt{Flag: "session-key-file", Env: "TOOLMESH_CONSOLE_SESSION_KEY_FILE",
		Usage: "file with the key that seals session cookies (every console replica shares it); created when missing", Default: "<data>/" + consoleSessionKeyFile})
	s.Duration(&c.sessionTTL, console.DefaultSessionTTL, config.Opt{Flag: "session-ttl", Env: "TOOLMESH_CONSOLE_SESSION_TTL", Usage: "how long a sign-in lasts"})
	s.Duration(&c.pollInterval, console.DefaultPollInterval, config.Opt{Flag: "poll-interval", Env: "TOOLMESH_CONSOLE_POLL_INTERVAL",
		Usage: "how often the console reads the pending asks while a browser shows the inbox (once per console process)"})
	s.String(&c.metricsAddr, fmt.Sprintf("127.0.0.1:%d", consoleMetricsPort), config.Opt{Flag: "metrics-addr", Env: "TOOLMESH_CONSOLE_METRICS_ADDR",
		Usage: "address of the console's Prometheus /metrics and /healthz, apart from its pages (\"off\": none)"})
	s.String(&c.statusURL, "", config.Opt{Flag: "mesh-status-url", Env: "TOOLMESH_CONSOLE_MESH_STATUS_URL",
		Usage: "status page of the mesh's supervisor the mesh page shows (toolmesh up's /status.json; up gives its own)"})
	s.String(&c.temporalUI, "", config.Opt{Flag: "temporal-ui-url", Env: "TOOLMESH_CONSOLE_TEMPORAL_UI_URL",
		Usage: "the Temporal Web UI's address (http://127.0.0.1:8233) the runs pages link each run's workflow to (up gives its dev server's; none: no links)"})
	s.String(&c.issuer, "", config.Opt{Flag: "issuer", Env: "TOOLMESH_OAUTH_ISSUER",
		Usage: "OpenID Connect issuer people sign in with, the one the edge trusts; required off loopback, and on loopback it replaces the local owner"})
	s.String(&c.clientID, "toolmesh-console", config.Opt{Flag: "client-id", Env: "TOOLMESH_CONSOLE_CLIENT_ID", Usage: "the console's client id at the issuer"})
	s.String(&c.clientSecretFile, "", config.Opt{Flag: "client-secret-file", Env: "TOOLMESH_CONSOLE_CLIENT_SECRET_FILE",
		Usage: "file with the console's client secret at the issuer (none: a public client, protected by PKCE)"})
	s.String(&c.publicURL, "", config.Opt{Flag: "public-url", Env: "TOOLMESH_CONSOLE_PUBLIC_URL",
		Usage: "the console's base URL as browsers reach it (https://console.example.com); the issuer sends people back to <public-url>/auth/callback", Default: "http://<addr>"})
	s.String(&c.resource, "", config.Opt{Flag: "edge-resource", Env: "TOOLMESH_EDGE_RESOURCE",
		Usage: "with --issuer: the edge's canonical URI, the audience of the access tokens the console asks for (RFC 8707)", Default: "--edge-url"})
	s.List(&c.scopes, config.Opt{Flag: "scope", Env: "TOOLMESH_CONSOLE_SCOPES", Usage: "with --issuer: scope asked for besides openid",
		Default: "toolmesh:read, toolmesh:write, toolmesh:admin"})
	c.telemetry = cli.BindTelemetry(s, getenv)
	return c
}

// oidc is the console's sign-in settings (nil without --issuer).
func (c *consoleConfig) oidc() (*console.OIDC, error) {
	if c.issuer == "" {
		return nil, nil
	}
	o := &console.OIDC{Issuer: c.issuer, ClientID: c.clientID, Resource: c.resource, Scopes: c.scopes}
	if o.Resource == "" {
		o.Resource = c.edgeURL
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []string{"toolmesh:read", "toolmesh:write", "toolmesh:admin"}
	}
	base := c.publicURL
	if base == "" {
		base = "http://" + c.addr
	}
	o.RedirectURL = strings.TrimSuffix(base, "/") + "/auth/callback"
	if c.clientSecretFile != "" {
		b, err := os.ReadFile(c.clientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("read the console's client secret: %w", err)
		}
		o.ClientSecret = strings.TrimSpace(string(b))
	}
	return o, nil
}

// runConsole serves the web console (package console): a client of the
// edge, with no mesh key and no store of its own.
func runConsole(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, log *slog.Logger) error {
	s := cli.NewConfig("console", getenv, stderr)
	c := bindConsole(s, getenv)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("console takes no arguments, got %q", s.FlagSet().Args())
	}
	key, err := ensureConsoleSessionKey(cli.OrDataFile(c.keyFile, c.dataDir, consoleSessionKeyFile))
	if err != nil {
		return err
	}
	signIn, err := c.oidc()
	if err != nil {
		return err
	}
	log = log.With("service", "console")
	tel, err := c.telemetry.Start(ctx, "toolmesh-console", stdout, log)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, log)
	con, err := console.New(console.Config{
		Addr: c.addr, EdgeURL: c.edgeURL, AllowedHosts: c.hosts,
		SessionKey: key, SessionTTL: c.sessionTTL, PollInterval: c.pollInterval, MeshStatusURL: c.statusURL, TemporalUIURL: c.temporalUI,
		HTTPClient: meshclient.HTTP(), OIDC: signIn, Log: log,
	})
	if err != nil {
		return err
	}
	defer con.Close()
	lis, err := server.Listen(c.addr)
	if err != nil {
		return err
	}
	servers := []cli.HTTPListener{{Srv: server.NewHTTPServer(con.Handler(), log, server.Limits{}), Lis: lis, Opts: server.HTTPOptions{ShutdownTimeout: 5 * time.Second}}}
	if c.metricsAddr != "" && c.metricsAddr != "off" {
		mlis, err := server.Listen(c.metricsAddr)
		if err != nil {
			lis.Close()
			return err
		}
		servers = append(servers, cli.HTTPListener{Srv: server.NewHTTPServer(cli.MetricsMux(tel.MetricsHandler(), c.telemetry.Pprof), log, server.Limits{}), Lis: mlis, Opts: server.HTTPOptions{}})
	}
	log.Info("console.started", "url", "http://"+lis.Addr().String()+"/", "edge", c.edgeURL, "issuer", c.issuer)
	return cli.RunHTTPAll(ctx, log, servers...)
}

// ensureConsoleSessionKey reads the session key file, creating it (32
// random bytes, hex, mode 0600) when missing.
func ensureConsoleSessionKey(path string) ([]byte, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := writeConsoleSessionKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("write console session key: %w", err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read console session key: %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) < 32 {
		return nil, fmt.Errorf("console session key %s: want at least 32 bytes in hex", path)
	}
	return k, nil
}

// writeConsoleSessionKey creates the key file; it fails with fs.ErrExist
// when another process made it first.
func writeConsoleSessionKey(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(hex.EncodeToString(k) + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
