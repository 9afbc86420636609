package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// startTasks serves the tasks service on SQLite, accepting tokens of the
// mesh key pair under dir, and returns its URL.
func startTasks(t *testing.T, dir string) string {
	t.Helper()
	_, pubPath, _, err := ensureMeshKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := cli.ReadMeshVerifier(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	db, err := sqldb.Open(ctx, filepath.Join(dir, "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := tasksstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(ctx, lis, logging.Discard(), server.Options{Mesh: verifier, ShutdownTimeout: 5 * time.Second}, tasks.New(st, tasks.Config{}).Registration())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		db.Close()
	})
	return "http://" + srv.Addr()
}

func TestEdgeOverStdio(t *testing.T) {
	dir := t.TempDir()
	url := startTasks(t, dir)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"edge", "--stdio", "--data", dir, "--service", "tasks=" + url}, func(string) string { return "" }, inR, outW, &stderr)
		outW.Close()
		exited <- err
	}()

	client := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v (stderr: %s)", err, stderr.String())
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	if !names["tasks_create"] || !names["tasks_list"] {
		t.Errorf("tools over stdio = %v, want the tasks tools among them", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "from the desktop"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(raw), `"agent_id":"local"`) {
		t.Errorf("tasks_create over stdio = %s, want ok as the local agent", raw)
	}
	cs.Close()
	inW.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("edge --stdio exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("edge --stdio did not exit when the client went away")
	}
	if strings.Contains(stderr.String(), `"level":"ERROR"`) {
		t.Errorf("stderr has errors: %s", stderr.String())
	}
}

func TestTokenCommandMintsWhatServicesAccept(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "--data", dir}, func(string) string { return "" }, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(dir, cli.MeshKeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mesh.key = %v (%v), want mode 0600", info, err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"token", "--data", dir, "--agent", "a1", "--role", "owner", "--ttl", "5m"}, func(string) string { return "" }, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	verifier, err := cli.ReadMeshVerifier(filepath.Join(dir, cli.MeshPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caller, err := verifier.Verify(strings.TrimSpace(out.String()), time.Now())
	if err != nil {
		t.Fatalf("the service refuses the minted token: %v", err)
	}
	if caller.Agent != "a1" || !caller.HasRole("owner") {
		t.Errorf("token caller = %+v", caller)
	}
	if err := run(context.Background(), []string{"token", "--data", dir}, func(string) string { return "" }, nil, io.Discard, io.Discard); err == nil {
		t.Error("token without --agent succeeded")
	}
}

func TestEdgeRefusesUnsafeConfigurations(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := ensureMeshKeys(dir); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"dev mode on all interfaces": {"edge", "--data", dir, "--addr", "0.0.0.0:0"},
		"HS256 off loopback":         {"edge", "--data", dir, "--addr", "0.0.0.0:0", "--issuer", "https://a.example", "--dev-hs256-secret-file", writeFile(t, dir, "hs", strings.Repeat("s", 40))},
		"keys without issuer":        {"edge", "--data", dir, "--jwks-file", writeFile(t, dir, "jwks", `{"keys":[]}`)},
		"bad grants file":            {"edge", "--data", dir, "--grants-file", writeFile(t, dir, "grants.yaml", "subjects:\n  a:\n    tols: [x]\n")},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := run(ctx, args, func(string) string { return "" }, nil, io.Discard, io.Discard); err == nil {
				t.Fatal("the edge started")
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeygenCreatesAndRotatesTheRequestStateKey(t *testing.T) {
	dir := t.TempDir()
	keygen := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"keygen", "--data", dir}, args...), func(string) string { return "" }, nil, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	keygen()
	current := filepath.Join(dir, cli.StateKeyFile)
	info, err := os.Stat(current)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state.key = %v (%v), want mode 0600", info, err)
	}
	first, err := cli.ReadStateSealer(current, filepath.Join(dir, cli.StatePreviousKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if out := keygen(); !strings.Contains(out, "kept existing request state key") {
		t.Errorf("second keygen: %s", out)
	}
	if out := keygen("--rotate-state-key"); !strings.Contains(out, "rotated the request state key") {
		t.Errorf("rotation: %s", out)
	}
	rotated, err := cli.ReadStateSealer(current, filepath.Join(dir, cli.StatePreviousKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.KeyID() == first.KeyID() {
		t.Error("rotation kept the current key")
	}
	// A state sealed before the rotation still opens after it.
	st := requeststate.State{Expires: time.Now().Add(time.Minute), Round: 1, WorkflowID: "call/x/1", RunID: "r"}
	b := requeststate.Binding{Subject: "s", Agent: "a", Tool: "x", ArgumentsDigest: "d"}
	tok, err := first.Seal(st, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rotated.Open(tok, b, time.Now()); err != nil {
		t.Errorf("a state of the previous key after rotation: %v", err)
	}
}

func TestEdgeWithTemporalNeedsAStateKey(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := ensureMeshKeys(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := run(ctx, []string{"edge", "--data", dir, "--addr", "127.0.0.1:0", "--temporal", "127.0.0.1:1"}, func(string) string { return "" }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "toolmesh keygen") {
		t.Fatalf("edge --temporal without state.key: %v, want an error pointing at toolmesh keygen", err)
	}
}
