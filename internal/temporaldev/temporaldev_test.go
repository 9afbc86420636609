package temporaldev_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/temporaldev"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// binary is the pinned Temporal CLI, for a test that starts a server
// (which -short does not).
func binary(t *testing.T) string {
	t.Helper()
	temporaltest.SkipShort(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := temporaltest.Binary(wd)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func start(t *testing.T, cfg temporaldev.Config) *temporaldev.Server {
	t.Helper()
	s, err := temporaldev.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func dial(t *testing.T, s *temporaldev.Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort: s.HostPort(), Namespace: s.Namespace(),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.HostPort(), err)
	}
	return c
}

// stopAndCheckGone stops s and checks that nothing of it is left: no process
// (by pid, and by any process whose command line names its database) and a
// frontend port that can be bound again.
func stopAndCheckGone(t *testing.T, s *temporaldev.Server, port int) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if err := syscall.Kill(s.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after Stop, kill(%d, 0) = %v, want ESRCH (no such process)", s.Pid(), err)
	}
	if pids := processesNaming(t, s.DBPath()); len(pids) > 0 {
		t.Errorf("after Stop, processes %v still run with %s on their command line", pids, s.DBPath())
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Errorf("after Stop, frontend port %d still taken: %v", port, err)
	} else {
		l.Close()
	}
}

// processesNaming lists the pids whose command line contains arg (Linux).
func processesNaming(t *testing.T, arg string) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(arg)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Restarting on the same data dir keeps workflows and their search
// attributes (what `toolmesh up` relies on), the Web UI answers, and a stop
// leaves nothing behind.
func TestRestartKeepsStateAndStopLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	port, uiPort := freePort(t), freePort(t)
	cfg := temporaldev.Config{Binary: binary(t), Port: port, UIPort: uiPort, DataDir: dir}

	s := start(t, cfg)
	if want := "http://127.0.0.1:" + strconv.Itoa(uiPort); s.UIURL() != want {
		t.Errorf("UIURL = %q, want %q", s.UIURL(), want)
	}
	resp, err := http.Get(s.UIURL())
	if err != nil {
		t.Fatalf("GET web UI: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET web UI: %s, want 200", resp.Status)
	}

	c := dial(t, s)
	// No worker: the workflow stays running, which is the state to keep.
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
		ID: "kept", TaskQueue: "nobody-polls",
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrAgent).ValueSet("agent-kept")),
	}, "SomeWorkflow")
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	c.Close()
	stopAndCheckGone(t, s, port)
	if fi, err := os.Stat(s.LogPath()); err != nil || fi.Size() == 0 {
		t.Errorf("server log %s: %v, want a non-empty file", s.LogPath(), err)
	}

	s = start(t, cfg)
	c = dial(t, s)
	defer c.Close()
	desc, err := c.DescribeWorkflow(t.Context(), "kept", "")
	if err != nil {
		t.Fatalf("after restart, describe workflow: %v", err)
	}
	if desc.WorkflowExecution.RunID != run.GetRunID() {
		t.Errorf("after restart, run id = %s, want %s", desc.WorkflowExecution.RunID, run.GetRunID())
	}
	agent, _ := desc.TypedSearchAttributes.GetKeyword(temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrAgent))
	if agent != "agent-kept" {
		t.Errorf("after restart, %s = %q, want agent-kept", workflowcontract.SearchAttrAgent, agent)
	}
	stopAndCheckGone(t, s, port)
}

// A taken frontend port fails Start with the server's own explanation, and
// leaves no process behind.
func TestStartOnBusyPortExplainsAndLeavesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()

	s, err := temporaldev.Start(t.Context(), temporaldev.Config{Binary: binary(t), Port: port, DataDir: dir})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start on a busy port succeeded")
	}
	t.Logf("Start on a busy port: %v", err)
	if !errors.Is(err, temporaldev.ErrExited) || !strings.Contains(err.Error(), fmt.Sprintf("port %d", port)) {
		t.Errorf("Start on busy port %d: err = %v, want ErrExited naming the port", port, err)
	}
	if pids := processesNaming(t, filepath.Join(dir, temporaldev.DBFileName)); len(pids) > 0 {
		t.Errorf("after a failed Start, processes %v are left", pids)
	}
}

func TestStartWithoutBinarySaysMakeTools(t *testing.T) {
	_, err := temporaldev.Start(t.Context(), temporaldev.Config{
		Binary: filepath.Join(t.TempDir(), "bin", "temporal"), Port: 7233, DataDir: t.TempDir(),
	})
	if err == nil || !strings.Contains(err.Error(), "run make tools") {
		t.Fatalf("Start with a missing binary: err = %v, want it to say run make tools", err)
	}
}
