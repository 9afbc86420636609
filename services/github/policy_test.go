package github_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	githubv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
	"github.com/toolmesh/toolmesh/services/github"
)

// fakeConnections answers GetToken from a map of agent to token, and
// records who asked and what was marked broken.
type fakeConnections struct {
	connectionsv1connect.UnimplementedConnectionsServiceHandler
	mu     sync.Mutex
	tokens map[string]string
	askers []mesh.Caller
	broken []string
	stored []*connectionsv1.StoreConnectionRequest
	storer []mesh.Caller
	ended  map[string]bool // agent/call key of the calls ended
}

// EndLinkCall records the call ended (unless it linked).
func (f *fakeConnections) EndLinkCall(_ context.Context, req *connectionsv1.EndLinkCallRequest) (*connectionsv1.EndLinkCallResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended == nil {
		f.ended = map[string]bool{}
	}
	f.ended[req.GetAgent()+"/"+req.GetCallKey()] = true
	return &connectionsv1.EndLinkCallResponse{Ended: true}, nil
}

func (f *fakeConnections) StoreConnection(ctx context.Context, req *connectionsv1.StoreConnectionRequest) (*connectionsv1.StoreConnectionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetCallKey() != "" && f.ended[req.GetAgent()+"/"+req.GetCallKey()] {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the call ended"))
	}
	f.stored = append(f.stored, req)
	f.storer = append(f.storer, mesh.FromContext(ctx).Caller)
	if f.tokens == nil {
		f.tokens = map[string]string{}
	}
	f.tokens[req.GetAgent()] = req.GetAccessToken()
	return &connectionsv1.StoreConnectionResponse{Connection: &connectionsv1.Connection{Id: connID(req.GetAgent()), Agent: req.GetAgent(), Account: req.GetAccount()}}, nil
}

// storedFor are the connections stored so far, as agent=account.
func (f *fakeConnections) storedFor() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.stored {
		out = append(out, r.GetAgent()+"="+r.GetAccount())
	}
	return out
}

func (f *fakeConnections) GetToken(ctx context.Context, req *connectionsv1.GetTokenRequest) (*connectionsv1.GetTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.askers = append(f.askers, mesh.FromContext(ctx).Caller)
	tok, ok := f.tokens[req.GetAgent()]
	if !ok {
		return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_NotLinked{NotLinked: &connectionsv1.NotLinked{Reason: connectionsv1.NotLinked_REASON_NONE}}}, nil
	}
	return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_Token{Token: &connectionsv1.Token{AccessToken: tok,
		Connection: &connectionsv1.Connection{Id: connID(req.GetAgent()), Agent: req.GetAgent(), Account: "octo-" + req.GetAgent()}}}}, nil
}

func (f *fakeConnections) MarkBroken(_ context.Context, req *connectionsv1.MarkBrokenRequest) (*connectionsv1.MarkBrokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken = append(f.broken, req.GetId())
	return &connectionsv1.MarkBrokenResponse{}, nil
}

// connID is the fake connection id of agent ("agent-a" gives con_000…0a).
func connID(agent string) string {
	return "con_" + strings.Repeat("0", 26-len(agent)+len("agent-")) + agent[len("agent-"):]
}

const linkURL = "https://mesh.example/connections/link"

var self = mesh.Caller{Subject: "toolmesh-github", Agent: "toolmesh-github", Roles: []string{mesh.RoleService}}

func policyClient(t *testing.T, f *fakeGitHub, conns *fakeConnections, policy github.Policy, shared string) githubv1connect.GitHubServiceClient {
	t.Helper()
	return policyClientLogged(t, f, conns, policy, shared, &logtest.Buffer{})
}

func policyClientLogged(t *testing.T, f *fakeGitHub, conns *fakeConnections, policy github.Policy, shared string, logs *logtest.Buffer) githubv1connect.GitHubServiceClient {
	t.Helper()
	srv := servertest.Start(t, server.Register(connectionsv1connect.ConnectionsServiceName, connectionsv1connect.ConnectionsServiceHandler(conns),
		connectionsv1connect.NewConnectionsServiceHandler, connectionsv1.RegisterConnectionsServiceHandler))
	cc := meshclient.New(meshclient.Config{HTTP: srv.Client(), Signer: servertest.MeshSigner()}, connectionsv1connect.NewConnectionsServiceClient, srv.URL)
	s, err := github.New(github.Config{Token: shared, BaseURL: f.srv.URL, Egress: loopback, Policy: policy, Log: logging.New(logs, slog.LevelInfo),
		Connections: github.Connections{Client: cc, Self: self, LinkURL: linkURL}})
	if err != nil {
		t.Fatal(err)
	}
	return client(t, s)
}

func getRepo(c githubv1connect.GitHubServiceClient, agent string) error {
	_, err := c.GetRepo(servertest.As(context.Background(), agent), &githubv1.GetRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	return err
}

// TestPerAgentActsAsEachAgent: under per_agent each agent's calls carry its
// own token, never another's or the shared one, and an agent without a
// connection is asked to link before anything reaches GitHub.
func TestPerAgentActsAsEachAgent(t *testing.T) {
	f := newFake(t)
	conns := &fakeConnections{tokens: map[string]string{"agent-a": "gho_tokenOfA", "agent-b": "gho_tokenOfB"}}
	logs := &logtest.Buffer{}
	c := policyClientLogged(t, f, conns, github.PolicyPerAgent, token, logs)
	for _, agent := range []string{"agent-a", "agent-b", "agent-a"} {
		if err := getRepo(c, agent); err != nil {
			t.Fatalf("GetRepo as %s: %v", agent, err)
		}
		if got, want := f.last().Auth, "Bearer "+conns.tokens[agent]; got != want {
			t.Errorf("GitHub got %q for %s's call, want %q", got, agent, want)
		}
	}
	for _, a := range conns.askers {
		if a.Agent != "toolmesh-github" || !a.HasRole(mesh.RoleService) {
			t.Errorf("the connections service was asked by %+v, want the github service's service-role identity", a)
		}
	}

	before := f.count()
	err := getRepo(c, "agent-c")
	v, verr := mesh.VisitRequired(err)
	if verr != nil || v == nil || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("GetRepo as an agent without a connection: %v (visit %v, %v); want VisitRequired", err, v, verr)
	}
	u, _ := url.Parse(v.GetUrl())
	if u.Scheme+"://"+u.Host+u.Path != linkURL || u.Query().Get("agent") != "agent-c" || u.Query().Get("provider") != "github" || v.GetVisitId() != "github:agent-c" {
		t.Errorf("visit = %v, want the link page for agent-c", v)
	}
	if again, _ := mesh.VisitRequired(getRepo(c, "agent-c")); again.GetVisitId() != v.GetVisitId() {
		t.Errorf("a second call's visit id %q differs from the first's %q", again.GetVisitId(), v.GetVisitId())
	}
	if f.count() != before {
		t.Errorf("GitHub got %d requests for calls of an agent without a connection, want none", f.count()-before)
	}
	used := logs.Events("github.connection_used")
	if len(used) != 3 || used[0]["agent"] != "agent-a" || used[0]["account"] != "octo-agent-a" || used[0]["rpc"] != githubv1connect.GitHubServiceGetRepoProcedure {
		t.Errorf("connection uses logged: %v; want one event per call naming agent, account and RPC", used)
	}
	if strings.Contains(logs.String(), "gho_tokenOf") {
		t.Error("a token is in the logs")
	}
}

// TestPerAgentOrShared: an agent without a connection acts with the shared
// token; with no shared token it is asked to link.
func TestPerAgentOrShared(t *testing.T) {
	f := newFake(t)
	conns := &fakeConnections{tokens: map[string]string{"agent-a": "gho_tokenOfA"}}
	c := policyClient(t, f, conns, github.PolicyPerAgentOrShared, token)
	if err := getRepo(c, "agent-b"); err != nil || f.last().Auth != "Bearer "+token {
		t.Errorf("an agent without a connection: %v, GitHub got %q; want the shared token", err, f.last().Auth)
	}
	if err := getRepo(c, "agent-a"); err != nil || f.last().Auth != "Bearer gho_tokenOfA" {
		t.Errorf("an agent with a connection: %v, GitHub got %q; want its own token", err, f.last().Auth)
	}
	noShared := policyClient(t, f, conns, github.PolicyPerAgentOrShared, "")
	if v, _ := mesh.VisitRequired(getRepo(noShared, "agent-b")); v == nil {
		t.Error("without a shared token, an agent without a connection is not asked to link")
	}
}

// TestRefusedConnectionAsksAgain: GitHub refusing an agent's token (401)
// marks its connection broken and asks the person to link again.
func TestRefusedConnectionAsksAgain(t *testing.T) {
	f := newFake(t)
	f.refuse = func(w http.ResponseWriter) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"Bad credentials"}`))
		return true
	}
	conns := &fakeConnections{tokens: map[string]string{"agent-a": "gho_revoked"}}
	c := policyClient(t, f, conns, github.PolicyPerAgent, "")
	v, _ := mesh.VisitRequired(getRepo(c, "agent-a"))
	if v == nil || len(conns.broken) != 1 || conns.broken[0] != connID("agent-a") {
		t.Fatalf("after a 401: visit %v, broken %v; want a visit and the connection marked broken", v, conns.broken)
	}
}

func TestPolicyConfig(t *testing.T) {
	for _, bad := range []string{"per-agent", "PER_AGENT", "none"} {
		if _, err := github.ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) succeeded", bad)
		}
	}
	if p, err := github.ParsePolicy(""); err != nil || p != github.PolicyShared {
		t.Errorf("ParsePolicy(\"\") = %v, %v; want shared", p, err)
	}
	if _, err := github.New(github.Config{Policy: github.PolicyPerAgent}); err == nil {
		t.Error("per_agent without the connections service was accepted")
	}
}
