package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// The boundary tests (boundary_e2e_test.go, inflight_e2e_test.go,
// slowclients_e2e_test.go) run the built binary, as separate processes, and
// probe its HTTP trust boundary from outside; these are their helpers.

// buildToolmesh builds the binary for one test.
func buildToolmesh(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toolmesh")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build toolmesh: %v\n%s", err, out)
	}
	return bin
}

// testMeshDir writes the mesh key pair of servertest.MeshSigner, which
// every servertest service accepts, as a data directory's mesh.key and
// mesh.pub.
func testMeshDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	seed := sha256.Sum256([]byte("toolmesh servertest mesh key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	if !key.Public().(ed25519.PublicKey).Equal(servertest.MeshSigner().PublicKey()) {
		t.Fatal("the servertest mesh key changed")
	}
	priv, err := mesh.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := mesh.MarshalPublicKey(servertest.MeshSigner().PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, cli.MeshKeyFile, string(priv))
	writeFile(t, dir, cli.MeshPubKeyFile, string(pub))
	return dir
}

// binProcess is a running toolmesh process.
type binProcess struct {
	name string
	cmd  *exec.Cmd
	logs *logtest.Buffer
	done chan error
}

// startBin runs `bin args...` until the test ends and waits until health
// answers 200 (no wait when health is empty).
func startBin(t *testing.T, bin, health string, args ...string) *binProcess {
	t.Helper()
	p := &binProcess{name: strings.Join(args[:min(2, len(args))], " "), cmd: exec.Command(bin, args...), logs: &logtest.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.logs)
		}
	})
	if health != "" {
		if err := waitHealthy(context.Background(), health, nil, 60*time.Second); err != nil {
			t.Fatalf("%s did not become healthy: %v\n%s", p.name, err, p.logs)
		}
	}
	return p
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (p *binProcess) stop(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop after SIGTERM", p.name)
		return nil
	}
}

// toolCall sends one stateless tools/call (the shape the edge's fast path
// serves) with optional extra headers and returns the status and body.
func toolCall(t *testing.T, client *http.Client, url, tool, args string, h http.Header) (*http.Response, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

// resultEnvelope reads the envelope of a tools/call answer (SSE or JSON).
func resultEnvelope(t *testing.T, body string) envelope {
	t.Helper()
	if i := strings.Index(body, "data: "); i >= 0 {
		body = body[i+len("data: "):]
	}
	var msg struct {
		Result struct {
			StructuredContent envelope `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &msg); err != nil {
		t.Fatalf("not a tools/call result: %s", body)
	}
	return msg.Result.StructuredContent
}

func mcpResultEnvelope(res *mcp.CallToolResult) envelope {
	var env envelope
	if len(res.Content) == 1 {
		if text, ok := res.Content[0].(*mcp.TextContent); ok {
			_ = json.Unmarshal([]byte(text.Text), &env)
		}
	}
	return env
}
