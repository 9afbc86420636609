// Package temporaltest runs a real Temporal dev server (the pinned CLI in the
// module's bin/) for integration tests: on free loopback ports, headless,
// with its database and log in a temporary directory.
//
// One server per test binary is a Shared, started by the first test that
// needs it; a test that needs a server of its own calls Start(t).
//
// The binary is bin/temporal at the module root, which `make tools` and
// `make test` build; tests never download it.
//
// Under -short (make test-short), the fast lane that runs no Temporal
// server, Start and Shared.Server skip the test, saying so.
package temporaltest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/toolmesh/toolmesh/internal/temporaldev"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// Server is a dev server for tests.
type Server struct {
	// HostPort is the frontend address for clients and workers.
	HostPort string
	// Namespace is the namespace to use.
	Namespace string

	dev *temporaldev.Server
}

// Start starts a dev server for tb, stopped when tb's test ends. It fails tb
// when the server cannot start, with "run make tools" when the binary is
// missing.
func Start(tb testing.TB) *Server {
	tb.Helper()
	SkipShort(tb)
	s, err := start(context.Background(), tb.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("stop temporal dev server: %v", err)
		}
		if tb.Failed() {
			tb.Logf("temporal dev server log (%s):\n%s", s.dev.LogPath(), readFile(s.dev.LogPath()))
		}
	})
	return s
}

// Shared is one dev server for a whole test binary, started by the first
// test that needs it and stopped by Run after the last test, so a package
// whose other tests need no Temporal does not pay for one:
//
//	var temporal temporaltest.Shared
//
//	func TestMain(m *testing.M) { os.Exit(temporal.Run(m)) }
//
//	func TestX(t *testing.T) { s := temporal.Server(t); ... }
type Shared struct {
	running bool
	once    sync.Once
	s       *Server
	dir     string
	err     error
}

// Run runs the tests, then stops the server if one was started. It
// returns the exit code for os.Exit, failing when the server did not stop
// cleanly (and printing its log when a test failed).
func (sh *Shared) Run(m *testing.M) int {
	sh.running = true
	code := m.Run()
	if sh.s != nil {
		if err := sh.s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "temporaltest: stop temporal dev server:", err)
			code = 1
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "temporal dev server log (%s):\n%s\n", sh.s.dev.LogPath(), readFile(sh.s.dev.LogPath()))
		}
	}
	if sh.dir != "" {
		os.RemoveAll(sh.dir)
	}
	return code
}

// Server starts the shared server if needed and returns it.
func (sh *Shared) Server(tb testing.TB) *Server {
	tb.Helper()
	SkipShort(tb)
	if !sh.running {
		tb.Fatal("temporaltest: Shared.Server called outside Shared.Run; call os.Exit(temporal.Run(m)) from TestMain so the server is stopped")
	}
	sh.once.Do(func() {
		if sh.dir, sh.err = os.MkdirTemp("", "temporaltest-"); sh.err != nil {
			return
		}
		sh.s, sh.err = start(context.Background(), sh.dir, slog.New(slog.DiscardHandler))
	})
	if sh.err != nil {
		tb.Fatal(sh.err)
	}
	return sh.s
}

// start runs a headless dev server with its state in dir. A port picked as
// free can be taken before the server binds it, so a server that exits
// during start-up is retried on new ports.
func start(ctx context.Context, dir string, log *slog.Logger) (*Server, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	bin, err := Binary(wd)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := porttest.Port()
		if err != nil {
			return nil, err
		}
		dev, err := temporaldev.Start(ctx, temporaldev.Config{
			Binary:  bin,
			Port:    port,
			DataDir: dir,
			Log:     log,
		})
		if errors.Is(err, temporaldev.ErrExited) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Server{HostPort: dev.HostPort(), Namespace: dev.Namespace(), dev: dev}, nil
	}
}

// SkipShort skips tb under -short, the fast lane that runs no Temporal
// server.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a Temporal dev server, which -short does not start (make test runs it)")
	}
}

// Binary finds bin/temporal at the root of the module containing dir (tests
// run in their package's directory).
func Binary(dir string) (string, error) {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			bin := filepath.Join(d, "bin", "temporal")
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("temporal CLI not found at %s: run make tools", bin)
			}
			return bin, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above %s, so no bin/temporal: run the tests inside the module (and make tools)", dir)
		}
		d = parent
	}
}

// Client dials the server; the client is closed when tb's test ends.
func (s *Server) Client(tb testing.TB) client.Client {
	tb.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.HostPort,
		Namespace: s.Namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		tb.Fatalf("dial temporal at %s: %v", s.HostPort, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.dev.Pid() }

// DBPath is the server's SQLite file.
func (s *Server) DBPath() string { return s.dev.DBPath() }

// Stop stops the server now (Start's cleanup and Shared.Run also do); it is safe
// to call more than once.
func (s *Server) Stop() error { return s.dev.Stop() }

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
