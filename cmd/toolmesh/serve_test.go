package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
)

// serve runs `toolmesh serve args...` until the test ends, or until stop is
// called, and waits until it is healthy.
func serve(t *testing.T, env map[string]string, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), func(k string) string { return env[k] }, nil, nil, discard{})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve %s: %v", args[0], err)
			}
		})
	}
	t.Cleanup(stop)
	addr := args[indexOf(args, "--addr")+1]
	dead := make(chan struct{})
	if err := waitHealthy(ctx, "http://"+addr+"/healthz", dead, 20*time.Second); err != nil {
		t.Fatalf("serve %s did not become healthy: %v", args[0], err)
	}
	return stop
}

func indexOf(args []string, flag string) int {
	for i, a := range args {
		if a == flag {
			return i
		}
	}
	return -1
}

// testPublicKey writes the public key of servertest.MeshSigner, whose tokens
// servertest clients send, and returns its path for --mesh-public-key.
func testPublicKey(t *testing.T) string {
	t.Helper()
	b, err := mesh.MarshalPublicKey(servertest.MeshSigner().PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "mesh.pub")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestServeChecksCallersAgainstTheAgentsDirectory(t *testing.T) {
	data := t.TempDir()
	agentsAddr, messagesAddr := porttest.Addr(t), porttest.Addr(t)
	// As under `toolmesh up`: the agents service seeds the development agent,
	// the other services ask it about their callers.
	pub := testPublicKey(t)
	serve(t, map[string]string{agentsSeedEnv: "local"}, "agents", "--addr", agentsAddr, "--data", filepath.Join(data, "a"), "--mesh-public-key", pub)
	serve(t, nil, "messages", "--addr", messagesAddr, "--data", filepath.Join(data, "m"), "--agents-url", "http://"+agentsAddr, "--mesh-public-key", pub)

	client := servertest.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	msgs := messagesv1connect.NewMessagesServiceClient(client, "http://"+messagesAddr, servertest.ClientOptions(nil)...)
	dir := agentsv1connect.NewAgentsServiceClient(client, "http://"+agentsAddr, servertest.ClientOptions(nil)...)
	send := func(agent string) error {
		_, err := msgs.Send(servertest.As(context.Background(), agent), &messagesv1.SendRequest{ToAgent: "bob", Message: "hello from " + agent})
		return err
	}

	if err := send("local"); err != nil {
		t.Errorf("seeded agent local: %v, want the send to pass", err)
	}
	err := send("stranger")
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "agent stranger is not registered") {
		t.Errorf("unregistered agent: %v, want permission_denied naming it", err)
	}
	if _, err := dir.Register(servertest.As(context.Background(), "local"), &agentsv1.RegisterRequest{AgentId: "stranger"}); err != nil {
		t.Fatalf("register stranger: %v", err)
	}
	if err := send("stranger"); err != nil {
		t.Errorf("after registering stranger: %v, want the send to pass", err)
	}
}

func TestServeRejectsAMalformedSeed(t *testing.T) {
	err := run(context.Background(), []string{"serve", "agents", "--addr", porttest.Addr(t), "--data", t.TempDir(), "--mesh-public-key", testPublicKey(t)},
		func(k string) string { return map[string]string{agentsSeedEnv: "local, Not Valid"}[k] }, nil, nil, discard{})
	if err == nil || !strings.Contains(err.Error(), agentsSeedEnv) || !strings.Contains(err.Error(), "Not Valid") {
		t.Errorf("serve agents with a malformed seed: %v, want an error naming %s and the id", err, agentsSeedEnv)
	}
}
