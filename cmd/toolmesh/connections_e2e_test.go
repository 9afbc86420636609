package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
)

// serveLogged runs `toolmesh serve` in-process like serve, keeping what it
// logs in logs; stop stops it (it is also stopped when the test ends).
func serveLogged(t *testing.T, env map[string]string, logs *logtest.Buffer, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), func(k string) string { return env[k] }, nil, nil, logs)
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
	if err := waitHealthy(ctx, "http://"+args[indexOf(args, "--addr")+1]+"/healthz", make(chan struct{}), 20*time.Second); err != nil {
		t.Fatalf("serve %s did not become healthy: %v", args[0], err)
	}
	return stop
}

// TestKeyringRotationThroughServe follows docs/connections.md's rotation:
// a connection sealed under the first key; the new key added last, and the
// restarted service rewraps the connection at start; the old key removed,
// and the connection still answers its token.
func TestKeyringRotationThroughServe(t *testing.T) {
	data := t.TempDir()
	_, meshPub, _, err := ensureMeshKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	keyring, _, err := ensureConnectionsKeyring(data)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(keyring)
	if err != nil {
		t.Fatal(err)
	}
	newKey := "2099-01-01 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)) + "\n"
	key, err := cli.ReadMeshKey(cli.DataFile(data, cli.MeshKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := mesh.NewSigner(key, "toolmesh-test")
	if err != nil {
		t.Fatal(err)
	}
	addr := porttest.Addr(t)
	conns := meshclient.New(meshclient.Config{Signer: signer}, connectionsv1connect.NewConnectionsServiceClient, "http://"+addr)
	svc := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "toolmesh-link", Agent: "toolmesh-link", Roles: []string{mesh.RoleService}}})
	start := func(keys string) (*logtest.Buffer, func()) {
		t.Helper()
		if err := os.WriteFile(keyring, []byte(keys), 0o600); err != nil {
			t.Fatal(err)
		}
		logs := &logtest.Buffer{}
		return logs, serveLogged(t, nil, logs, "connections", "--addr", addr, "--data", data, "--mesh-public-key", meshPub)
	}
	token := func() string {
		t.Helper()
		res, err := conns.GetToken(svc, &connectionsv1.GetTokenRequest{Agent: "local", Provider: connectionsv1.Provider_PROVIDER_GITHUB})
		if err != nil {
			t.Fatalf("GetToken: %v", err)
		}
		return res.GetToken().GetAccessToken()
	}

	_, stop := start(string(first))
	if _, err := conns.StoreConnection(svc, &connectionsv1.StoreConnectionRequest{Agent: "local", Provider: connectionsv1.Provider_PROVIDER_GITHUB,
		Account: "octo-local", AccessToken: "gho_beforeRotation"}); err != nil {
		t.Fatal(err)
	}
	stop()

	logs, stop := start(string(first) + newKey)
	deadline := time.Now().Add(20 * time.Second)
	for len(logs.Events("connections.rewrap")) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // waiting for the start-up rewrap's log line
	}
	if ev := logs.Events("connections.rewrap"); len(ev) != 1 || ev[0]["rewrapped"] != float64(1) || ev[0]["newest"] != "2099-01-01" {
		t.Fatalf("rewrap events %v, want one rewrapping the one connection under 2099-01-01", ev)
	}
	if got := token(); got != "gho_beforeRotation" {
		t.Errorf("token after rotating = %q", got)
	}
	stop()

	start("# the old key removed\n" + newKey)
	if got := token(); got != "gho_beforeRotation" {
		t.Errorf("token with only the new key = %q", got)
	}
}

// TestGitHubPerAgentThroughTheEdge runs `serve connections` and `serve
// github` under the per_agent policy against a fake GitHub: a call of an
// agent without a connection reaches no GitHub and answers the link page;
// once a connection is stored (as the link callback will), the agent's
// calls carry its own token and never the shared one; the token is in no
// tool answer, log line or database file in clear.
func TestGitHubPerAgentThroughTheEdge(t *testing.T) {
	const (
		shared   = "ghp_SHAREDsharedSHARED0001"
		agentTok = "gho_LOCALagentTOKEN000001"
		linkURL  = "http://127.0.0.1:7180/connections/link"
	)
	var mu sync.Mutex
	var auths []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != "/api/v3/repos/octocat/hello" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":1,"name":"hello","full_name":"octocat/hello","default_branch":"main","owner":{"login":"octocat"}}`))
	}))
	t.Cleanup(fake.Close)

	data := t.TempDir()
	meshKey, meshPub, _, err := ensureMeshKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ensureConnectionsKeyring(data); err != nil {
		t.Fatal(err)
	}
	key, err := cli.ReadMeshKey(meshKey)
	if err != nil {
		t.Fatal(err)
	}
	connAddr, ghAddr := porttest.Addr(t), porttest.Addr(t)
	logs := &logtest.Buffer{}
	serveLogged(t, nil, logs, "connections", "--addr", connAddr, "--data", data, "--mesh-public-key", meshPub)
	serveLogged(t, map[string]string{
		githubPolicyEnv: "per_agent", githubTokenEnv: shared, githubURLEnv: fake.URL, githubEgressAllowEnv: "127.0.0.0/8", githubLinkURLEnv: linkURL,
	}, logs, "github", "--addr", ghAddr, "--data", data, "--mesh-public-key", meshPub, "--mesh-key", meshKey, "--service", "connections=http://"+connAddr)

	signer, err := mesh.NewSigner(key, "toolmesh-edge")
	if err != nil {
		t.Fatal(err)
	}
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services: map[string]string{githubv1connect.GitHubServiceName: "http://" + ghAddr,
			connectionsv1connect.ConnectionsServiceName: "http://" + connAddr},
		DevAgent:   "local",
		HTTPClient: edgeClient,
		Mesh:       signer,
	})

	// No connection: the link (this client declares no URL elicitation,
	// so it is in the -32021 refusal), and nothing sent to GitHub.
	_, err = tryCallTool(s, &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
	if err == nil || !strings.Contains(err.Error(), linkURL+"?agent=local&provider=github") {
		t.Fatalf("github_get_repo without a connection: %v, want the link page for agent local", err)
	}
	if len(auths) != 0 {
		t.Fatalf("GitHub got %d requests for an agent without a connection", len(auths))
	}

	// The link callback stores the connection (service role).
	conns := meshclient.New(meshclient.Config{Signer: signer}, connectionsv1connect.NewConnectionsServiceClient, "http://"+connAddr)
	svc := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "toolmesh-link", Agent: "toolmesh-link", Roles: []string{mesh.RoleService}}})
	if _, err := conns.StoreConnection(svc, &connectionsv1.StoreConnectionRequest{Agent: "local", Provider: connectionsv1.Provider_PROVIDER_GITHUB,
		Account: "octo-local", Scopes: []string{"repo"}, AccessToken: agentTok}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if env := callTool(t, s, "github_get_repo", map[string]any{"owner": "octocat", "repo": "hello"}); env.Status != "ok" {
			t.Fatalf("github_get_repo with a connection = %+v", env)
		}
	}
	mu.Lock()
	for _, a := range auths {
		if a != "Bearer "+agentTok {
			t.Errorf("GitHub got %q, want only the agent's own token", a)
		}
	}
	mu.Unlock()

	list := callTool(t, s, "connections_list", nil)
	all := string(list.Data) + logs.String() + dbFiles(t, filepath.Join(data, cli.DBFile("connections")))
	if strings.Contains(all, agentTok) {
		t.Error("the agent's token is in clear in the list answer, a log line or the database file")
	}
	if list.Status != "ok" || !strings.Contains(string(list.Data), "octo-local") {
		t.Errorf("connections_list = %s, want the linked account", list.Data)
	}
}

func dbFiles(t *testing.T, path string) string {
	t.Helper()
	var all []byte
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if len(all) == 0 {
		t.Fatalf("%s is empty", path)
	}
	return string(all)
}
