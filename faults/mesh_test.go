//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	meshauth "github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/supervise"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// Default ports of the mesh `toolmesh up` starts (--port-offset moves them
// all): 7100-7299 for the edge, services, workers and Temporal, 8233 for
// the Temporal UI.
const (
	meshPortsLow, meshPortsHigh = 7100, 7300
	temporalUIPort              = 8233
	upStatusPort                = 7199
)

// edgeBodyTimeout is the shared mesh's edge's body read deadline, shorter
// than the default so that the slow-body case ends soon.
const edgeBodyTimeout = 5 * time.Second

// meshEnv is the environment of the shared mesh: the edge cuts slow bodies
// off after edgeBodyTimeout, schedules may run every second, an agent may
// create as many tasks as the load needs, the testing domain's purge
// takes longer than any call deadline of the deadline case, and webhooks
// may go to loopback.
var meshEnv = []string{
	"TOOLMESH_EDGE_BODY_TIMEOUT=" + edgeBodyTimeout.String(),
	"TOOLMESH_SCHEDULES_MIN_INTERVAL=1s",
	"WORK_TASK_MAX_PER_DAY=1000000",
	"TOOLMESH_TESTING_DELAYS=Purge=5s",
	// The events cases' webhook receivers listen on loopback.
	"TOOLMESH_EVENTLOG_WEBHOOK_ALLOW_LOOPBACK=true",
}

// mesh is a running `toolmesh up`.
type mesh struct {
	dir, data  string
	offset     int
	cmd        *exec.Cmd
	exited     chan struct{}
	logs       *logtest.Buffer // up's stderr: the log of every process
	mcpURL     string
	consoleURL string            // the console's base URL
	a2aURL     string            // the development agent's A2A base URL
	services   map[string]string // domain -> base URL
	temporal   string            // Temporal frontend host:port
}

// sharedMesh returns the `toolmesh up` the mesh tests share, starting it
// for the first one. TestMain stops it after the last test.
func sharedMesh(t *testing.T) *mesh {
	t.Helper()
	suite.mu.Lock()
	m := suite.shared
	suite.mu.Unlock()
	if m == nil {
		offset, err := porttest.Offset(append(porttest.Range(meshPortsLow, meshPortsHigh), temporalUIPort)...)
		if err != nil {
			t.Fatal(err)
		}
		m, err = startMesh(filepath.Join(suite.dir, "mesh"), offset)
		if err != nil {
			t.Fatal(err)
		}
		suite.mu.Lock()
		suite.shared = m
		suite.mu.Unlock()
	}
	m.waitReady(t, 2*time.Minute)
	return m
}

var serviceLine = regexp.MustCompile(`^\s+([a-z]+)\s+(http://\S+)\s+\(Connect`)

// startMesh runs `toolmesh up` and returns once it says it is up.
func startMesh(dir string, offset int, env ...string) (*mesh, error) {
	m := &mesh{dir: dir, data: filepath.Join(dir, "data"), offset: offset, exited: make(chan struct{}),
		logs: &logtest.Buffer{}, services: map[string]string{}}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, err
	}
	// The suite kills the same process several times a minute when its
	// cases run with -count: allow it more restarts than the default 5.
	m.cmd = exec.Command(suite.bin, "up", "--port-offset", strconv.Itoa(offset), "--data", m.data, "--temporal-bin", suite.temporal,
		"--restart-limit", "100")
	m.cmd.Dir = dir
	m.cmd.Env = append(append(os.Environ(), meshEnv...), env...)
	m.cmd.Stderr = io.MultiWriter(m.logs, logFile)
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	up := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line := s.Text()
			if sm := serviceLine.FindStringSubmatch(line); sm != nil {
				m.services[sm[1]] = sm[2]
			}
			if _, url, ok := strings.Cut(line, "MCP endpoint"); ok {
				m.mcpURL = strings.Fields(url)[0]
			}
			if _, url, ok := strings.Cut(line, "  Console "); ok {
				m.consoleURL = strings.TrimSuffix(strings.Fields(url)[0], "/")
			}
			if _, url, ok := strings.Cut(line, "A2A endpoint"); ok {
				m.a2aURL = strings.Fields(url)[0]
			}
			if _, addr, ok := strings.Cut(line, "  Temporal  "); ok {
				m.temporal = strings.Fields(addr)[0]
			}
			if strings.Contains(line, "Press Ctrl-C") {
				close(up)
			}
		}
		_ = m.cmd.Wait()
		logFile.Close()
		close(m.exited)
	}()
	select {
	case <-up:
		return m, nil
	case <-m.exited:
		return nil, fmt.Errorf("toolmesh up exited before the mesh was up:\n%s", tail(m.logs.String()))
	case <-time.After(3 * time.Minute):
		m.stop()
		return nil, fmt.Errorf("toolmesh up did not come up in 3m:\n%s", tail(m.logs.String()))
	}
}

// stop stops the mesh as Ctrl-C does.
func (m *mesh) stop() {
	_ = m.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.exited:
	case <-time.After(90 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

func (m *mesh) statusURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", upStatusPort+m.offset, path)
}

// status returns what `toolmesh up status` shows.
func (m *mesh) status(t *testing.T) []supervise.Status {
	t.Helper()
	st, err := m.statuses()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// statuses is status for a goroutine other than the test's.
func (m *mesh) statuses() ([]supervise.Status, error) {
	resp, err := http.Get(m.statusURL("/status.json"))
	if err != nil {
		return nil, fmt.Errorf("up status page: %w", err)
	}
	defer resp.Body.Close()
	var st struct{ Processes []supervise.Status }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("up status page: %w", err)
	}
	return st.Processes, nil
}

func (m *mesh) process(t *testing.T, name string) supervise.Status {
	t.Helper()
	for _, p := range m.status(t) {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("up runs no process %s", name)
	return supervise.Status{}
}

// fault brackets the moment a signal took effect on a process. sent is
// taken before the signal is sent and landed once its effect is seen
// (SIGKILL: the process has exited; SIGSTOP: it is stopped; any other
// signal: the kill call returned). A call that started before sent met the
// process as it was, one that started after landed met it as the signal
// left it, and one in between may have met either: the cases classify by
// the bracket, never by a single instant, so no call falls between two
// classes.
type fault struct{ sent, landed time.Time }

// kill sends sig to the process up runs as name and returns when it took
// effect.
func (m *mesh) kill(t *testing.T, name string, sig syscall.Signal) fault {
	t.Helper()
	p := m.process(t, name)
	if p.PID == 0 {
		t.Fatalf("%s is not running: %+v", name, p)
	}
	return signalPID(t, name, p.PID, sig)
}

// killTemporalServer kills the Temporal dev server itself: the `temporal`
// process under `toolmesh temporal-dev`.
func (m *mesh) killTemporalServer(t *testing.T) fault {
	t.Helper()
	return signalPID(t, "the Temporal dev server", m.temporalServerPID(t), syscall.SIGKILL)
}

// signalPID sends sig to pid and waits until it took effect (see fault).
func signalPID(t *testing.T, name string, pid int, sig syscall.Signal) fault {
	t.Helper()
	f := fault{sent: time.Now()}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill %s: %v", name, err)
	}
	switch sig {
	case syscall.SIGKILL:
		// Exited: gone, or a zombie its parent has not reaped yet. Either
		// way its sockets are closed.
		eventually(t, 30*time.Second, fmt.Sprintf("%s (pid %d) exited", name, pid), func() bool {
			st := procState(pid)
			return st == "" || st == "Z" || st == "X"
		})
	case syscall.SIGSTOP:
		eventually(t, 30*time.Second, fmt.Sprintf("%s (pid %d) stopped", name, pid), func() bool { return procState(pid) == "T" })
	}
	f.landed = time.Now()
	t.Logf("sent %v to %s (pid %d); took effect within %s", sig, name, pid, f.landed.Sub(f.sent))
	return f
}

// procState is the state letter of pid in /proc (R, S, T, Z, ...), empty
// when there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
	if !ok || rest == "" {
		return ""
	}
	return rest[:1]
}

// temporalServerPID is the pid of the `temporal` process under
// `toolmesh temporal-dev`.
func (m *mesh) temporalServerPID(t *testing.T) int {
	t.Helper()
	parent := m.process(t, "temporal").PID
	// The children of every thread of `toolmesh temporal-dev`: the one
	// that started the server is any of them.
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
	var children []string
	for _, th := range threads {
		b, _ := os.ReadFile(th)
		children = append(children, strings.Fields(string(b))...)
	}
	if len(children) != 1 {
		t.Fatalf("find the Temporal server under pid %d: children %q", parent, children)
	}
	pid, _ := strconv.Atoi(children[0])
	return pid
}

// waitReady waits until every process is ready.
func (m *mesh) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		select {
		case <-m.exited:
			t.Fatalf("toolmesh up exited:\n%s", tail(m.logs.String()))
		default:
		}
		resp, err := http.Get(m.statusURL("/healthz"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mesh is not ready after %s: %+v", within, m.status(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRestarted waits until up runs name again under a pid other than
// old, and the whole mesh is ready. A process that was told to stop still
// shows ready while it drains, so readiness alone would not tell.
func (m *mesh) waitRestarted(t *testing.T, name string, old int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for p := m.process(t, name); p.PID == old || p.State != supervise.StateReady; p = m.process(t, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s was not restarted within %s: %+v", name, within, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.waitReady(t, time.Until(deadline))
}

// token mints a mesh token for direct service calls.
func (m *mesh) token(t *testing.T, agent string, roles ...string) string {
	t.Helper()
	args := []string{"token", "--agent", agent, "--data", m.data}
	for _, r := range roles {
		args = append(args, "--role", r)
	}
	out, err := exec.Command(suite.bin, args...).Output()
	if err != nil {
		t.Fatalf("toolmesh token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// events returns the log events named msg the mesh's processes wrote.
func (m *mesh) events(msg string) []map[string]any { return m.logs.Events(msg) }

// connect opens an MCP session with the edge at url, at protocol version
// (the stateless 2026-07-28 when empty).
func connectMCP(t *testing.T, url, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectMCPWith(t, url, version, opts, nil)
}

// connectMCPWith connects with an HTTP client of its own (nil: the
// default).
func connectMCPWith(t *testing.T, url, version string, opts *mcp.ClientOptions, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	if version == "" {
		version = edge.ModernProtocol
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "toolmesh-faults", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// envelope is a tool result's structured content.
type envelope struct {
	Status     string          `json:"status"`
	DomainCode string          `json:"domain_code"`
	Message    string          `json:"message"`
	Data       json.RawMessage `json:"data"`
}

// outcome is what one tools/call got.
type outcome struct {
	// front is the process the call was sent to: "" for the edge,
	// "console" for a form sent to the console.
	front      string
	tool       string
	key        string
	env        envelope
	err        error // no tool result: a transport or protocol error
	start, end time.Time
}

func (o outcome) ok() bool { return o.err == nil && o.env.Status == "ok" }

// code is the domain code of a failed call, "transport" when no tool result
// came back.
func (o outcome) code() string {
	switch {
	case o.err != nil:
		return "transport"
	case o.env.Status == "ok":
		return "ok"
	}
	return o.env.DomainCode
}

// callTimeout bounds every tools/call of the suite.
const callTimeout = 60 * time.Second

// callTool makes one tools/call with an idempotency key (none when empty).
func callTool(cs *mcp.ClientSession, tool string, args map[string]any, key string) outcome {
	meta := mcp.Meta{}
	if key != "" {
		meta[edge.MetaIdempotencyKey] = key
	}
	return callToolMeta(cs, tool, args, meta)
}

// callToolMeta makes one tools/call with the _meta given (its idempotency
// key, if any, is the outcome's key).
func callToolMeta(cs *mcp.ClientSession, tool string, args map[string]any, meta mcp.Meta) outcome {
	key, _ := meta[edge.MetaIdempotencyKey].(string)
	o := outcome{tool: tool, key: key, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if len(meta) > 0 {
		params.Meta = meta
	}
	res, err := cs.CallTool(ctx, params)
	o.end = time.Now()
	if err != nil {
		o.err = err
		return o
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &o.env); err != nil || o.env.Status == "" {
		o.err = fmt.Errorf("tool result without an envelope: %s", raw)
	}
	return o
}

// failures returns how many of the calls did not succeed, logging each.
func failures(t *testing.T, calls []outcome) int {
	t.Helper()
	n := 0
	for _, o := range calls {
		if !o.ok() {
			n++
			t.Logf("%s failed with %s: %s %v", o.tool, o.code(), o.env.Message, o.err)
		}
	}
	return n
}

// servingAgain waits until a call that started after the killed process
// had exited succeeds, and returns when it ended: when the process (or its
// replacement) was serving again.
func servingAgain(t *testing.T, calls *outcomes, killed fault) time.Time {
	t.Helper()
	var back time.Time
	eventually(t, 30*time.Second, "serving again after the kill", func() bool {
		for _, o := range calls.list() {
			if o.start.After(killed.landed) && o.ok() {
				back = o.end
				return true
			}
		}
		return false
	})
	return back
}

// protoData decodes an ok outcome's data into the tool's response message.
func protoData(o outcome, m proto.Message) error {
	if !o.ok() {
		return fmt.Errorf("%s: %s %s %v", o.tool, o.code(), o.env.Message, o.err)
	}
	return protojson.Unmarshal(o.env.Data, m)
}

// openSessions opens n MCP sessions with the edge (stateless protocol), one
// per load worker.
func openSessions(t *testing.T, url string, n int) []*mcp.ClientSession {
	t.Helper()
	out := make([]*mcp.ClientSession, n)
	for i := range out {
		out[i] = connectMCP(t, url, "", nil)
	}
	return out
}

// outcomes collects the outcomes of concurrent calls.
type outcomes struct {
	mu  sync.Mutex
	all []outcome
}

func (s *outcomes) add(o outcome) {
	s.mu.Lock()
	s.all = append(s.all, o)
	s.mu.Unlock()
}

func (s *outcomes) list() []outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outcome(nil), s.all...)
}

// bearer adds a mesh token to every request of a Connect client, and the
// idempotency key withKey put in the call's context.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			if key, ok := ctx.Value(idempotencyKey{}).(string); ok {
				req.Header().Set(meshauth.HeaderIdempotencyKey, key)
			}
			return next(ctx, req)
		}
	}))
}

type idempotencyKey struct{}

// withKey makes a direct service call carry key as its idempotency key.
func withKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, key)
}

// h2c is an HTTP client for the services' cleartext HTTP/2.
func h2c() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols}}
}

// eventually polls cond until it holds, failing t after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// isReset reports a transport error of a connection the other end dropped
// while the request was on it.
func isReset(err error) bool {
	return err != nil && (errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF"))
}

// isRefused reports a transport error of a connection nobody accepted.
func isRefused(err error) bool {
	return err != nil && (errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused"))
}
