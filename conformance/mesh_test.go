//go:build conformance

package conformance

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// Default ports of the mesh `toolmesh up` starts (--port-offset moves them
// all): 7100-7299 for the edge, services, workers and Temporal.
const (
	meshPortsLow, meshPortsHigh = 7100, 7300
	upStatusPort                = 7199
)

// mesh is a running `toolmesh up` of the conformance build.
type mesh struct {
	offset int
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *logtest.Buffer
	// mcpURL is the edge's MCP endpoint on 127.0.0.1: the suite's checks
	// against DNS rebinding need a loopback URL.
	mcpURL string
}

// startMesh runs `toolmesh up` on a free port offset, with its data under
// dir, and returns once every process is ready; the test's cleanup stops
// it.
func startMesh(t *testing.T, dir string) *mesh {
	t.Helper()
	offset := porttest.FreeOffset(t, porttest.Range(meshPortsLow, meshPortsHigh)...)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		t.Fatal(err)
	}
	m := &mesh{offset: offset, exited: make(chan struct{}), logs: &logtest.Buffer{}}
	m.cmd = exec.Command(suite.bin, "up", "--port-offset", strconv.Itoa(offset), "--data", filepath.Join(dir, "data"),
		"--temporal-bin", suite.temporal, "--temporal-ui-port", "0")
	m.cmd.Dir = dir
	m.cmd.Stderr = io.MultiWriter(m.logs, logFile)
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line := s.Text()
			if _, url, ok := strings.Cut(line, "MCP endpoint"); ok {
				m.mcpURL = strings.Fields(url)[0]
			}
			if strings.Contains(line, "Press Ctrl-C") {
				close(up)
			}
		}
		_ = m.cmd.Wait()
		logFile.Close()
		close(m.exited)
	}()
	t.Cleanup(m.stop)
	select {
	case <-up:
	case <-m.exited:
		t.Fatalf("toolmesh up exited before the mesh was up:\n%s", tail(m.logs.String()))
	case <-time.After(3 * time.Minute):
		t.Fatalf("toolmesh up did not come up in 3m:\n%s", tail(m.logs.String()))
	}
	m.waitReady(t, 2*time.Minute)
	return m
}

// waitReady waits until up reports every process ready.
func (m *mesh) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", upStatusPort+m.offset)
	deadline := time.Now().Add(within)
	for {
		select {
		case <-m.exited:
			t.Fatalf("toolmesh up exited:\n%s", tail(m.logs.String()))
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mesh is not ready after %s:\n%s", within, tail(m.logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
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

// tail is the end of a long log.
func tail(s string) string {
	const n = 4000
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
