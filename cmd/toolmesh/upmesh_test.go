package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// upMesh is a mesh the real binary's `toolmesh up` runs for a test, at a
// free port offset, with its data in a directory of its own.
type upMesh struct {
	// Offset is the mesh's port offset; Dir holds its binary's working
	// directory and Data its state.
	Offset    int
	Dir, Data string
	// Printed is what up printed until it was up.
	Printed []string

	cmd    *exec.Cmd
	lines  chan string
	exited chan error
	stderr *logtest.Buffer
	once   sync.Once
}

// meshBinaries builds the toolmesh binary into a test directory and finds
// the pinned Temporal CLI.
func meshBinaries(t *testing.T) (bin, temporal string) {
	t.Helper()
	temporal, err := filepath.Abs(filepath.Join("..", "..", "bin", "temporal"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(temporal); err != nil {
		t.Fatalf("the pinned Temporal CLI is missing (make tools): %v", err)
	}
	bin = filepath.Join(t.TempDir(), "toolmesh")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build toolmesh: %v\n%s", err, out)
	}
	return bin, temporal
}

// startUp runs `toolmesh up` with env added to the environment and waits
// until it says it is up (it is stopped when the test ends).
func startUp(t *testing.T, bin, temporal string, env ...string) *upMesh {
	t.Helper()
	m := &upMesh{Dir: t.TempDir(), lines: make(chan string, 100), exited: make(chan error, 1), stderr: &logtest.Buffer{}}
	m.Data = filepath.Join(m.Dir, "data")
	m.Offset = porttest.FreeOffset(t, append(append(porttest.Range(edgePort, 7300), temporalUIPort), a2aPort)...)
	m.cmd = exec.Command(bin, "up", "--port-offset", strconv.Itoa(m.Offset), "--data", m.Data, "--temporal-bin", temporal)
	m.cmd.Dir = m.Dir
	m.cmd.Env = append(os.Environ(), env...)
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			m.lines <- s.Text()
		}
		close(m.lines)
		m.exited <- m.cmd.Wait()
	}()
	t.Cleanup(func() { m.Stop() })
	timeout := time.After(3 * time.Minute)
	for !strings.Contains(strings.Join(m.Printed, "\n"), "Press Ctrl-C") {
		select {
		case l, ok := <-m.lines:
			if !ok {
				t.Fatalf("up exited before the mesh was up:\n%s\n%s", strings.Join(m.Printed, "\n"), tail(m.stderr.String()))
			}
			m.Printed = append(m.Printed, l)
		case <-timeout:
			t.Fatalf("up did not come up:\n%s\n%s", strings.Join(m.Printed, "\n"), tail(m.stderr.String()))
		}
	}
	return m
}

// Link returns the URL up printed under name ("MCP endpoint", ...).
func (m *upMesh) Link(t *testing.T, name string) string {
	t.Helper()
	re := regexp.MustCompile(`^\s+` + regexp.QuoteMeta(name) + `\s+(http://\S+)`)
	for _, l := range m.Printed {
		if s := re.FindStringSubmatch(l); s != nil {
			return s[1]
		}
	}
	t.Fatalf("up printed no %s:\n%s", name, strings.Join(m.Printed, "\n"))
	return ""
}

// Stop interrupts up (Ctrl-C) and returns what it printed after, and how
// it exited; later calls return nothing.
func (m *upMesh) Stop() (after []string, err error) {
	m.once.Do(func() {
		_ = m.cmd.Process.Signal(os.Interrupt)
		for l := range m.lines {
			after = append(after, l)
		}
		err = <-m.exited
	})
	return after, err
}

// Stderr is what the mesh's processes logged so far.
func (m *upMesh) Stderr() string { return m.stderr.String() }

// upStatusOf is what `toolmesh up status` says of m's processes.
func upStatusOf(t *testing.T, bin string, m *upMesh) upStatus {
	t.Helper()
	out, err := exec.Command(bin, "up", "status", "--json", "--port-offset", strconv.Itoa(m.Offset)).Output()
	if err != nil {
		t.Fatalf("toolmesh up status: %v", err)
	}
	var st upStatus
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// twoMeshes runs two meshes (each its own `toolmesh up`) whose development
// agents are alice and bob, with MCP sessions to each. Both run on
// loopback, so their A2A endpoints and published keys must be reachable
// from each other for development.
func twoMeshes(t *testing.T) (m1, m2 *upMesh, alice, bob *mcp.ClientSession) {
	t.Helper()
	bin, temporal := meshBinaries(t)
	allow := cli.RemoteEgressAllowEnv + "=127.0.0.1"
	m1 = startUp(t, bin, temporal, allow, "TOOLMESH_DEV_AGENT=alice")
	m2 = startUp(t, bin, temporal, allow, "TOOLMESH_DEV_AGENT=bob")
	return m1, m2, mcpSessionTo(t, m1.Link(t, linkMCP)), mcpSessionTo(t, m2.Link(t, linkMCP))
}
