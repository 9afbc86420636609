// Package temporaldev runs the Temporal dev server — `temporal server
// start-dev` from the pinned Temporal CLI — as a child process: on loopback,
// with its SQLite file and its log under a data directory, the toolmesh
// search attributes registered and dynamic config tuned for low latency.
// Start returns once the server really serves; Stop ends it gracefully and
// never leaves a process behind.
//
// Everything comes in as Config; this package reads no flags and no
// environment.
package temporaldev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/toolmesh/toolmesh/internal/childproc"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// DefaultNamespace is the namespace the dev server always creates.
const DefaultNamespace = "default"

// Files under Config.DataDir.
const (
	DBFileName  = "temporal.db"
	LogFileName = "temporal.log"
)

// ErrExited reports that the server process ended before it was ready
// (a busy port, a bad flag, a broken database file); the error text carries
// the tail of its log.
var ErrExited = errors.New("temporal dev server exited")

// SearchAttributes returns the custom search attributes the server registers
// (all Keyword; names in internal/workflowcontract).
func SearchAttributes() map[string]enumspb.IndexedValueType {
	out := map[string]enumspb.IndexedValueType{}
	for _, name := range workflowcontract.SearchAttributes() {
		out[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	return out
}

// DynamicConfig returns the dynamic config values the server starts with
// (Config.DynamicConfig adds to and overrides them). Every key is registered
// in the Temporal server the pinned CLI embeds (v1.29.1); a misspelled key
// would be ignored silently by the server, so keep this list checked against
// that version when the CLI is bumped.
func DynamicConfig() map[string]any {
	return map[string]any{
		// Multi-round elicitation rounds are workflow updates, and the edge
		// may wait only for an update to be accepted. Both default to true
		// in 1.29.1; set so that a CLI bump cannot silently turn them off.
		"frontend.enableUpdateWorkflowExecution":              true,
		"frontend.enableUpdateWorkflowExecutionAsyncAccepted": true,
		// Update-with-start (the ExecuteMultiOperation API) starts the
		// elicitation workflow and delivers the first round in one call.
		// Described as "under active development"; on in 1.29.1.
		"frontend.enableExecuteMultiOperation": true,
		// Eager workflow start: the first workflow task comes back inline in
		// the start response when the starter has a local worker, skipping a
		// trip through the transfer queue and matching.
		"system.enableEagerWorkflowStart": true,
		// Eager activities: an activity scheduled on the worker's own task
		// queue comes back inline in the workflow-task completion response
		// (the side effect of a final round). Off by default in 1.29.1.
		"system.enableActivityEagerExecution": true,
		// One partition per task queue. Locally each queue has one worker;
		// with the default 4 partitions a task can land on a partition where
		// no poll is waiting and waits to be forwarded to one that has.
		"matching.numTaskqueueReadPartitions":  1,
		"matching.numTaskqueueWritePartitions": 1,
		// The dev server has one history shard, and each shard's transfer
		// queue (which hands new workflow and activity tasks to matching)
		// reads at most 20 times a second by default; under load a new task
		// waits for that limiter. Same for the visibility queue, which makes
		// search attribute changes listable.
		"history.transferProcessorMaxPollRPS":   10000,
		"history.visibilityProcessorMaxPollRPS": 10000,
		// A timer task never fires earlier than this long after it was
		// created (default 1s, a margin for clock skew between history
		// hosts; the dev server is one process). With the default, a
		// timer due sooner fires up to a second late: a Temporal Schedule
		// that wakes for its next run, a short retry backoff.
		"history.timerProcessorMaxTimeShift": "100ms",
		// Fairness between agents: a task carrying a fairness key (the
		// agent's id) is dispatched in turn with the other keys' tasks of
		// its queue, so one agent's backlog does not delay every other
		// agent's. Fairness needs the priority-enabled matcher; both are off
		// by default in 1.29.1. (A workflow started eagerly skips matching,
		// and so fairness, for its first task only.)
		"matching.useNewMatcher":  true,
		"matching.enableFairness": true,
	}
}

// sqlitePragmas trade the durability of the last few commits on an OS
// crash or power loss (never on a process crash) for commits without an
// fsync each: write-ahead log plus synchronous=NORMAL.
func sqlitePragmas() []string {
	return []string{"journal_mode=wal", "synchronous=normal"}
}

// Config says how to run the dev server.
type Config struct {
	// Binary is the path of the pinned Temporal CLI (bin/temporal).
	Binary string
	// IP the frontend (and UI) bind to; default 127.0.0.1.
	IP string
	// Port is the frontend gRPC port (required).
	Port int
	// UIPort is the Web UI port; 0 runs the server headless.
	UIPort int
	// DataDir holds the SQLite file (DBFileName) and the server log
	// (LogFileName); it is created when missing. Starting again on the same
	// directory keeps every workflow.
	DataDir string
	// Namespace to serve; default DefaultNamespace.
	Namespace string
	// DynamicConfig adds to and overrides DynamicConfig().
	DynamicConfig map[string]any
	// StartTimeout bounds the wait for readiness; default 60s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before it kills the
	// process; default 15s.
	StopTimeout time.Duration
	// Log receives lifecycle events; nil discards them.
	Log *slog.Logger
}

// Server is a running dev server.
type Server struct {
	cfg      Config
	cmd      *exec.Cmd
	logFile  *os.File
	done     chan struct{} // closed once the process has exited and been reaped
	waitErr  error         // set before done is closed
	stopOnce sync.Once
	stopErr  error
}

// Start launches the dev server and waits until the frontend serves the
// namespace, history answers, the search attributes exist and (when there is
// one) the Web UI answers. On any failure the process is stopped before
// Start returns.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create temporal data dir: %w", err)
	}
	args, err := cfg.args()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(cfg.DataDir, LogFileName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open temporal log: %w", err)
	}
	fmt.Fprintf(logFile, "\n# %s toolmesh: %s %q\n", time.Now().UTC().Format(time.RFC3339), cfg.Binary, args)

	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childproc.Attr()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start temporal dev server: %w", err)
	}
	s := &Server{cfg: cfg, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	cfg.Log.Info("temporal.starting", "pid", cmd.Process.Pid, "addr", s.HostPort(), "data", cfg.DataDir)

	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	cfg.Log.Info("temporal.ready", "addr", s.HostPort(), "ui", s.UIURL(), "namespace", cfg.Namespace,
		"startup_ms", time.Since(began).Milliseconds())
	return s, nil
}

func (c *Config) withDefaults() error {
	if c.Binary == "" {
		return errors.New("temporal dev server: no CLI binary given")
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return fmt.Errorf("temporal CLI not found at %s (run make tools): %w", c.Binary, err)
	}
	if c.Port <= 0 || c.Port > 65535 {
		return fmt.Errorf("temporal dev server: invalid frontend port %d", c.Port)
	}
	if c.UIPort < 0 || c.UIPort > 65535 || c.UIPort == c.Port {
		return fmt.Errorf("temporal dev server: invalid UI port %d", c.UIPort)
	}
	if c.DataDir == "" {
		return errors.New("temporal dev server: no data dir given")
	}
	if c.IP == "" {
		c.IP = "127.0.0.1"
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// args builds the start-dev command line.
func (c *Config) args() ([]string, error) {
	args := []string{
		"server", "start-dev",
		"--ip", c.IP,
		"--port", strconv.Itoa(c.Port),
		"--db-filename", filepath.Join(c.DataDir, DBFileName),
		"--log-format", "json",
		"--log-level", "warn",
		"--color", "never",
	}
	if c.UIPort == 0 {
		args = append(args, "--headless")
	} else {
		args = append(args, "--ui-port", strconv.Itoa(c.UIPort))
	}
	if c.Namespace != DefaultNamespace {
		args = append(args, "--namespace", c.Namespace)
	}
	sas := SearchAttributes()
	for _, name := range slices.Sorted(maps.Keys(sas)) {
		args = append(args, "--search-attribute", name+"="+shortType(sas[name]))
	}
	for _, p := range sqlitePragmas() {
		args = append(args, "--sqlite-pragma", p)
	}
	dc := DynamicConfig()
	maps.Copy(dc, c.DynamicConfig)
	for _, key := range slices.Sorted(maps.Keys(dc)) {
		v, err := json.Marshal(dc[key])
		if err != nil {
			return nil, fmt.Errorf("dynamic config %s: %w", key, err)
		}
		args = append(args, "--dynamic-config-value", key+"="+string(v))
	}
	return args, nil
}

// shortType is the CLI spelling of a search attribute type ("Keyword").
func shortType(t enumspb.IndexedValueType) string {
	for name, v := range enumspb.IndexedValueType_shorthandValue {
		if enumspb.IndexedValueType(v) == t {
			return name
		}
	}
	return t.String()
}

// HostPort is the frontend gRPC address for SDK clients and workers.
func (s *Server) HostPort() string {
	return net.JoinHostPort(s.cfg.IP, strconv.Itoa(s.cfg.Port))
}

// Namespace is the namespace the server serves.
func (s *Server) Namespace() string { return s.cfg.Namespace }

// UIURL is the Web UI address, or "" when the server runs headless.
func (s *Server) UIURL() string {
	if s.cfg.UIPort == 0 {
		return ""
	}
	return "http://" + net.JoinHostPort(s.cfg.IP, strconv.Itoa(s.cfg.UIPort))
}

// DBPath is the SQLite file holding the server's state.
func (s *Server) DBPath() string { return filepath.Join(s.cfg.DataDir, DBFileName) }

// LogPath is the file the server's output goes to.
func (s *Server) LogPath() string { return filepath.Join(s.cfg.DataDir, LogFileName) }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Done is closed when the server process has exited, whether by Stop or not.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM, waits up to Config.StopTimeout for the server to
// finish, then kills it. It returns once the process has exited and is safe
// to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop()
		s.logFile.Close()
	})
	return s.stopErr
}

func (s *Server) stop() error {
	select {
	case <-s.done:
		return s.exitError()
	default:
	}
	began := time.Now()
	// os.Process signals through a pidfd on Linux, so a signal can never
	// reach a recycled pid.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.cfg.Log.Warn("temporal.sigterm_failed", "error", err)
	}
	timer := time.NewTimer(s.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		s.cfg.Log.Info("temporal.stopped", "stop_ms", time.Since(began).Milliseconds())
		return nil
	case <-timer.C:
	}
	s.cfg.Log.Warn("temporal.stop_timeout", "after", s.cfg.StopTimeout.String())
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("temporal dev server did not stop within %s after SIGTERM and was killed", s.cfg.StopTimeout)
}

// exitError describes an exit that Stop did not ask for, leading with the
// server's last error (such as "can't set frontend port 7233: ... address
// already in use").
func (s *Server) exitError() error {
	tail := s.logTail()
	reason := ""
	for _, line := range slices.Backward(strings.Split(tail, "\n")) {
		var entry struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Level == "ERROR" && entry.Msg != "" {
			reason = ": " + entry.Msg
			break
		}
	}
	return fmt.Errorf("%w (%v)%s; log %s ends:\n%s", ErrExited, s.waitErr, reason, s.LogPath(), tail)
}

// logTail returns the last lines of the server log, for error messages.
func (s *Server) logTail() string {
	const maxBytes, maxLines = 8192, 10
	f, err := os.Open(s.LogPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	seeked := false
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		_, err = f.Seek(-maxBytes, io.SeekEnd)
		seeked = err == nil
	}
	b, _ := io.ReadAll(f)
	if _, rest, ok := bytes.Cut(b, []byte("\n")); seeked && ok {
		b = rest // the first line is cut
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls until the server is usable, the process exits, ctx ends
// or Config.StartTimeout passes.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	// A process that exits ends the wait at once, not after the attempt.
	ctx, cancelExited := context.WithCancelCause(ctx)
	defer cancelExited(nil)
	go func() {
		select {
		case <-s.done:
			cancelExited(ErrExited)
		case <-ctx.Done():
		}
	}()
	c, err := client.NewLazyClient(client.Options{
		HostPort:  s.HostPort(),
		Namespace: s.cfg.Namespace,
		Logger:    sdklog.NewStructuredLogger(s.cfg.Log.With("component", "temporal.readiness")),
	})
	if err != nil {
		return fmt.Errorf("temporal client: %w", err)
	}
	defer c.Close()

	steps := []struct {
		name  string
		check func(context.Context) error
	}{
		{"frontend", func(ctx context.Context) error { return s.checkFrontend(ctx, c) }},
		{"search attributes", func(ctx context.Context) error { return s.ensureSearchAttributes(ctx, c) }},
		{"web UI", s.checkUI},
	}
	for _, step := range steps {
		var last error
		for {
			attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
			last = step.check(attempt)
			cancelAttempt()
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				if errors.Is(context.Cause(ctx), ErrExited) {
					<-s.done
					return s.exitError()
				}
				if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
					return fmt.Errorf("temporal dev server not ready after %s (%s: %v); log %s:\n%s",
						s.cfg.StartTimeout, step.name, last, s.LogPath(), s.logTail())
				}
				return fmt.Errorf("wait for temporal dev server: %w", ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// checkFrontend succeeds once the frontend is healthy, knows the namespace
// and can reach history: describing a workflow that does not exist is
// answered NotFound by the history service, and Unavailable before it owns
// its shard.
func (s *Server) checkFrontend(ctx context.Context, c client.Client) error {
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.cfg.Namespace}); err != nil {
		return err
	}
	_, err := c.DescribeWorkflow(ctx, "toolmesh-readiness-probe", "")
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return nil
	}
	if err == nil {
		return nil
	}
	return err
}

// ensureSearchAttributes registers any missing toolmesh search attribute
// (a database created by an older toolmesh lacks the ones added since; the
// CLI only registers them when it creates the namespace) and succeeds once
// all are listed.
func (s *Server) ensureSearchAttributes(ctx context.Context, c client.Client) error {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.cfg.Namespace})
	if err != nil {
		return err
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range SearchAttributes() {
		got, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case got != typ:
			return fmt.Errorf("search attribute %s has type %s, want %s (delete %s to start afresh)", name, got, typ, s.DBPath())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	s.cfg.Log.Info("temporal.search_attributes.add", "names", slices.Sorted(maps.Keys(missing)))
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: s.cfg.Namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return errors.New("search attributes added; waiting until they are listed")
}

// checkUI succeeds when the Web UI answers, or at once when headless.
func (s *Server) checkUI(ctx context.Context) error {
	if s.cfg.UIPort == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.UIURL()+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("web UI answered %s", resp.Status)
	}
	return nil
}
