package agents_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	"github.com/toolmesh/toolmesh/services/agents"
	"github.com/toolmesh/toolmesh/services/agents/agentsstore"
)

const (
	active  = agentsv1.AgentStatus_AGENT_STATUS_ACTIVE
	paused  = agentsv1.AgentStatus_AGENT_STATUS_PAUSED
	retired = agentsv1.AgentStatus_AGENT_STATUS_RETIRED
)

// open returns the service over a fresh SQLite store.
func open(t *testing.T, cfg agents.Config) *agents.Service {
	t.Helper()
	st, err := agentsstore.Open(t.Context(), sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	return agents.New(st, cfg)
}

// start returns a function that serves the service with cfg over a fresh
// SQLite store.
func start(cfg agents.Config) func(t *testing.T) *servertest.Server {
	return func(t *testing.T) *servertest.Server {
		return servertest.Start(t, open(t, cfg).Registration())
	}
}

func register(t *testing.T, c agentsv1connect.AgentsServiceClient, ctx context.Context, id string) *agentsv1.Agent {
	t.Helper()
	res, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: id})
	if err != nil {
		t.Fatalf("Register %s: %v", id, err)
	}
	return res.GetAgent()
}

func setStatus(c agentsv1connect.AgentsServiceClient, ctx context.Context, id string, s agentsv1.AgentStatus, reason string) (*agentsv1.Agent, error) {
	res, err := c.SetStatus(ctx, &agentsv1.SetStatusRequest{AgentId: id, Status: s, Reason: reason})
	return res.GetAgent(), err
}

func TestRegisterGetAndListWithSummary(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	servertest.EachProtocol(t, start(agents.Config{Now: func() time.Time { return now }}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		ctx := servertest.As(context.Background(), "owner")
		res, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "research-bot", DisplayName: "Research bot", Description: "Reads papers."})
		if err != nil {
			t.Fatalf("Register: %v", err)
		}
		want := &agentsv1.Agent{
			Id: "research-bot", DisplayName: "Research bot", Description: "Reads papers.",
			Status: active, RegisteredBy: "owner",
		}
		if diff := cmp.Diff(want, res.GetAgent(), protocmp.Transform(), protocmp.IgnoreFields(&agentsv1.Agent{}, "create_time", "update_time")); diff != "" {
			t.Errorf("registered agent (-want +got):\n%s", diff)
		}
		if got := res.GetAgent().GetCreateTime().AsTime(); !got.Equal(now) {
			t.Errorf("create_time = %v, want the clock's %v", got, now)
		}
		got, err := c.Get(ctx, &agentsv1.GetRequest{AgentId: "research-bot"})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(res.GetAgent(), got.GetAgent(), protocmp.Transform()); diff != "" {
			t.Errorf("Get returned a different agent than Register (-register +get):\n%s", diff)
		}
		if named := register(t, c, ctx, "zed"); named.GetDisplayName() != "zed" {
			t.Errorf("display name without one given = %q, want the id", named.GetDisplayName())
		}

		for _, id := range []string{"delta", "alpha", "charlie", "bravo"} {
			register(t, c, ctx, id)
		}
		if _, err := setStatus(c, ctx, "bravo", paused, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := setStatus(c, ctx, "charlie", retired, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := setStatus(c, ctx, "delta", paused, ""); err != nil {
			t.Fatal(err)
		}

		page1, err := c.List(ctx, &agentsv1.ListRequest{Limit: 4})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if diff := cmp.Diff([]string{"alpha", "bravo", "charlie", "delta"}, prototest.IDs(page1.GetAgents())); diff != "" {
			t.Errorf("first page is not the first four ids in order (-want +got):\n%s", diff)
		}
		next := int32(4)
		if diff := cmp.Diff(&pagev1.Page{Offset: 0, Limit: 4, Total: 6, NextOffset: &next}, page1.GetPage(), protocmp.Transform()); diff != "" {
			t.Errorf("first page (-want +got):\n%s", diff)
		}
		wantSummary := &agentsv1.StatusSummary{Active: 3, Paused: 2, Retired: 1, Total: 6}
		if diff := cmp.Diff(wantSummary, page1.GetSummary(), protocmp.Transform()); diff != "" {
			t.Errorf("summary (-want +got):\n%s", diff)
		}
		page2, err := c.List(ctx, &agentsv1.ListRequest{Offset: 4, Limit: 4})
		if err != nil {
			t.Fatalf("List page 2: %v", err)
		}
		if diff := cmp.Diff([]string{"research-bot", "zed"}, prototest.IDs(page2.GetAgents())); diff != "" || page2.GetPage().NextOffset != nil {
			t.Errorf("last page = %v next %v, want research-bot, zed and no next page (%s)", prototest.IDs(page2.GetAgents()), page2.GetPage().NextOffset, diff)
		}

		onlyPaused, err := c.List(ctx, &agentsv1.ListRequest{Status: paused})
		if err != nil {
			t.Fatalf("List paused: %v", err)
		}
		if diff := cmp.Diff([]string{"bravo", "delta"}, prototest.IDs(onlyPaused.GetAgents())); diff != "" {
			t.Errorf("paused agents (-want +got):\n%s", diff)
		}
		if onlyPaused.GetPage().GetTotal() != 2 {
			t.Errorf("paused total = %d, want 2", onlyPaused.GetPage().GetTotal())
		}
		if diff := cmp.Diff(wantSummary, onlyPaused.GetSummary(), protocmp.Transform()); diff != "" {
			t.Errorf("a status filter changed the summary, which counts every agent (-want +got):\n%s", diff)
		}

		if _, err := c.Get(ctx, &agentsv1.GetRequest{AgentId: "nobody"}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("Get unknown agent: code %v, want not_found", connect.CodeOf(err))
		} else if !strings.Contains(err.Error(), "agent nobody is not registered") {
			t.Errorf("Get unknown agent: message %q does not say which agent", err)
		}
	})
}

func TestAgentIDsAreUnique(t *testing.T) {
	servertest.EachProtocol(t, start(agents.Config{}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		ctx := servertest.As(context.Background(), "owner")
		first := register(t, c, ctx, "worker")
		_, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "worker", DisplayName: "Impostor"})
		if servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Fatalf("second Register of worker: code %v, want already_exists", connect.CodeOf(err))
		}
		var ce *connect.Error
		errors.As(err, &ce)
		if want := "agent worker is already registered; agent ids are permanent, so choose another id"; ce.Message() != want {
			t.Errorf("message = %q, want %q", ce.Message(), want)
		}
		got, _ := c.Get(ctx, &agentsv1.GetRequest{AgentId: "worker"})
		if !proto.Equal(first, got.GetAgent()) {
			t.Errorf("the refused Register changed the agent: %v, want %v", got.GetAgent(), first)
		}

		// A retired id stays taken.
		if _, err := setStatus(c, ctx, "worker", retired, "done"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "worker"}); servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Errorf("Register of a retired id: code %v, want already_exists", connect.CodeOf(err))
		}
	})
}

func TestIdempotencyKeyRule(t *testing.T) {
	servertest.EachProtocol(t, start(agents.Config{}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		owner := servertest.As(context.Background(), "owner")
		servertest.KeyRule(t, owner, "k1", func(ctx context.Context, variant int) (string, error) {
			// The other request registers another id under the same key.
			res, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: fmt.Sprintf("worker-%d", variant)})
			return res.GetAgent().GetId(), err
		})
		req := &agentsv1.RegisterRequest{AgentId: "worker-0"}
		if _, err := c.Register(servertest.WithIdempotencyKey(owner, "k2"), req); servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Errorf("a new key for a taken id: code %v, want already_exists", connect.CodeOf(err))
		}
		other := servertest.WithIdempotencyKey(servertest.As(context.Background(), "someone-else"), "k1")
		if _, err := c.Register(other, req); servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Errorf("another caller replaying the key: code %v, want already_exists", connect.CodeOf(err))
		}
		if _, err := c.Get(owner, &agentsv1.GetRequest{AgentId: "worker-1"}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("the refused registration of worker-1: code %v, want not_found", connect.CodeOf(err))
		}
	})
}

func TestSetStatus(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	servertest.EachProtocol(t, start(agents.Config{Now: func() time.Time { return now }}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		owner := servertest.As(context.Background(), "owner")
		register(t, c, owner, "worker")

		now = now.Add(time.Minute)
		a, err := setStatus(c, owner, "worker", paused, "too many retries")
		if err != nil {
			t.Fatalf("active -> paused: %v", err)
		}
		if a.GetStatus() != paused || a.GetStatusReason() != "too many retries" || !a.GetUpdateTime().AsTime().Equal(now) {
			t.Errorf("paused agent = %v, want paused with the reason, updated at %v", a, now)
		}
		got, _ := c.Get(owner, &agentsv1.GetRequest{AgentId: "worker"})
		if got.GetAgent().GetStatus() != paused {
			t.Errorf("Get after pausing: status %v, want paused", got.GetAgent().GetStatus())
		}

		// The agent itself may not undo it.
		_, err = setStatus(c, servertest.As(context.Background(), "worker"), "worker", active, "")
		if servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("agent unpausing itself: code %v, want permission_denied", connect.CodeOf(err))
		} else if !strings.Contains(err.Error(), "cannot change its own status") {
			t.Errorf("agent unpausing itself: message %q does not say why", err)
		}

		// Setting the status it has changes nothing.
		before := now
		now = now.Add(time.Minute)
		same, err := setStatus(c, owner, "worker", paused, "again")
		if err != nil {
			t.Fatalf("paused -> paused: %v", err)
		}
		if !same.GetUpdateTime().AsTime().Equal(before) || same.GetStatusReason() != "too many retries" {
			t.Errorf("paused -> paused changed the agent: %v", same)
		}

		if _, err := setStatus(c, owner, "worker", active, ""); err != nil {
			t.Fatalf("paused -> active: %v", err)
		}
		if _, err := setStatus(c, owner, "worker", retired, "replaced"); err != nil {
			t.Fatalf("active -> retired: %v", err)
		}
		for _, to := range []agentsv1.AgentStatus{active, paused} {
			_, err := setStatus(c, owner, "worker", to, "")
			if servertest.Code(t, err) != connect.CodeFailedPrecondition {
				t.Errorf("retired -> %v: code %v, want failed_precondition", to, connect.CodeOf(err))
			} else if !strings.Contains(err.Error(), "agent worker is retired") {
				t.Errorf("retired -> %v: message %q does not say why", to, err)
			}
		}
		got, _ = c.Get(owner, &agentsv1.GetRequest{AgentId: "worker"})
		if got.GetAgent().GetStatus() != retired {
			t.Errorf("after refused moves: status %v, want retired", got.GetAgent().GetStatus())
		}

		if _, err := setStatus(c, owner, "nobody", paused, ""); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("set status of unknown agent: code %v, want not_found", connect.CodeOf(err))
		}
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	servertest.EachProtocol(t, start(agents.Config{}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		ctx := servertest.As(context.Background(), "owner")
		cases := []struct {
			name string
			call func() error
			want map[string][]string
		}{
			{"missing id", func() error {
				_, err := c.Register(ctx, &agentsv1.RegisterRequest{})
				return err
			}, map[string][]string{"agent_id": {"required"}}},
			{"upper-case id", func() error {
				_, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "Worker"})
				return err
			}, map[string][]string{"agent_id": {"string.pattern"}}},
			{"id over 63 characters", func() error {
				_, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "a" + strings.Repeat("b", 63)})
				return err
			}, map[string][]string{"agent_id": {"string.pattern"}}},
			{"long display name", func() error {
				_, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "x", DisplayName: strings.Repeat("n", 101)})
				return err
			}, map[string][]string{"display_name": {"string.max_len"}}},
			{"long description", func() error {
				_, err := c.Register(ctx, &agentsv1.RegisterRequest{AgentId: "x", Description: strings.Repeat("d", 1001)})
				return err
			}, map[string][]string{"description": {"string.max_len"}}},
			{"malformed id on get", func() error {
				_, err := c.Get(ctx, &agentsv1.GetRequest{AgentId: "no spaces"})
				return err
			}, map[string][]string{"agent_id": {"string.pattern"}}},
			{"undefined status filter", func() error {
				_, err := c.List(ctx, &agentsv1.ListRequest{Status: 9})
				return err
			}, map[string][]string{"status": {"enum.defined_only"}}},
			{"limit over the bound", func() error {
				_, err := c.List(ctx, &agentsv1.ListRequest{Limit: 201})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"negative offset", func() error {
				_, err := c.List(ctx, &agentsv1.ListRequest{Offset: -1})
				return err
			}, map[string][]string{"offset": {"int32.gte_lte"}}},
			{"missing status", func() error {
				_, err := c.SetStatus(ctx, &agentsv1.SetStatusRequest{AgentId: "x"})
				return err
			}, map[string][]string{"status": {"required"}}},
			{"long reason", func() error {
				_, err := c.SetStatus(ctx, &agentsv1.SetStatusRequest{AgentId: "x", Status: paused, Reason: strings.Repeat("r", 501)})
				return err
			}, map[string][]string{"reason": {"string.max_len"}}},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, servertest.Violations(t, tc.call())); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		if res, err := c.List(ctx, &agentsv1.ListRequest{}); err != nil || res.GetPage().GetTotal() != 0 {
			t.Errorf("rejected requests stored something: %d agents (err %v)", res.GetPage().GetTotal(), err)
		}
	})
}

func TestCallWithoutIdentityIsUnauthenticated(t *testing.T) {
	servertest.EachProtocol(t, start(agents.Config{}), agentsv1connect.NewAgentsServiceClient, func(t *testing.T, c agentsv1connect.AgentsServiceClient) {
		_, err := c.Register(context.Background(), &agentsv1.RegisterRequest{AgentId: "x"})
		if servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("Register: code %v, want unauthenticated", connect.CodeOf(err))
		}
		_, err = c.List(context.Background(), &agentsv1.ListRequest{})
		if servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("List: code %v, want unauthenticated", connect.CodeOf(err))
		}
	})
}

func TestSeedRegistersMissingAgentsOnly(t *testing.T) {
	ctx := context.Background()
	svc := open(t, agents.Config{})
	if err := svc.Seed(ctx, "local"); err != nil {
		t.Fatalf("Seed: %v", err)
	}
	srv := servertest.Start(t, svc.Registration())
	c := agentsv1connect.NewAgentsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	owner := servertest.As(ctx, "owner")
	got, err := c.Get(owner, &agentsv1.GetRequest{AgentId: "local"})
	if err != nil {
		t.Fatalf("Get seeded agent: %v", err)
	}
	if got.GetAgent().GetStatus() != active || got.GetAgent().GetRegisteredBy() != agents.SeedSubject {
		t.Errorf("seeded agent = %v, want active, registered by %s", got.GetAgent(), agents.SeedSubject)
	}

	// A restart seeds again: the agent an operator paused stays paused.
	if _, err := setStatus(c, owner, "local", paused, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Seed(ctx, "local", "helper"); err != nil {
		t.Fatalf("second Seed: %v", err)
	}
	got, _ = c.Get(owner, &agentsv1.GetRequest{AgentId: "local"})
	if got.GetAgent().GetStatus() != paused {
		t.Errorf("seeding again changed local to %v, want it left paused", got.GetAgent().GetStatus())
	}
	if _, err := c.Get(owner, &agentsv1.GetRequest{AgentId: "helper"}); err != nil {
		t.Errorf("second seeded agent: %v", err)
	}

	if err := svc.Seed(ctx, "Not Valid"); err == nil || !strings.Contains(err.Error(), "agent_id") {
		t.Errorf("Seed with a malformed id: %v, want an error naming agent_id", err)
	}
}

func TestServesREST(t *testing.T) {
	srv := start(agents.Config{})(t)
	do := func(method, path, body string) (int, string) {
		return srv.REST(t, servertest.Bearer("owner"), method, path, body)
	}
	if code, out := do(http.MethodPost, "/v1/agents", `{"agent_id":"rest-bot"}`); code != http.StatusOK || !strings.Contains(out, `"id":"rest-bot"`) {
		t.Errorf("POST /v1/agents = %d %s, want 200 with the agent", code, out)
	}
	if code, out := do(http.MethodPost, "/v1/agents", `{"agent_id":"rest-bot"}`); code != http.StatusConflict {
		t.Errorf("POST /v1/agents again = %d %s, want 409", code, out)
	}
	if code, out := do(http.MethodPost, "/v1/agents/rest-bot/status", `{"status":"AGENT_STATUS_PAUSED"}`); code != http.StatusOK || !strings.Contains(out, `"AGENT_STATUS_PAUSED"`) {
		t.Errorf("POST /v1/agents/rest-bot/status = %d %s, want 200 with the paused agent", code, out)
	}
	code, out := do(http.MethodGet, "/v1/agents?status=AGENT_STATUS_PAUSED", "")
	if code != http.StatusOK || !strings.Contains(out, `"rest-bot"`) || !strings.Contains(out, fmt.Sprintf(`"paused":%d`, 1)) {
		t.Errorf("GET /v1/agents = %d %s, want 200 listing rest-bot with a summary", code, out)
	}
}

// fakeConnections records the agents whose connections were unlinked, and
// fails while down is set.
type fakeConnections struct {
	connectionsv1connect.UnimplementedConnectionsServiceHandler
	mu      sync.Mutex
	down    bool
	revoked []string
	callers []mesh.Caller
}

func (f *fakeConnections) RevokeAgent(ctx context.Context, req *connectionsv1.RevokeAgentRequest) (*connectionsv1.RevokeAgentResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("GitHub did not answer"))
	}
	f.revoked = append(f.revoked, req.GetAgent())
	f.callers = append(f.callers, mesh.FromContext(ctx).Caller)
	return &connectionsv1.RevokeAgentResponse{}, nil
}

// Retiring an agent unlinks its connections first, as the mesh's service;
// when they cannot be unlinked the agent is not retired, and retiring it
// again does. Pausing touches no connection.
func TestRetiringUnlinksConnections(t *testing.T) {
	f := &fakeConnections{down: true}
	csrv := servertest.Start(t, server.Register(connectionsv1connect.ConnectionsServiceName, connectionsv1connect.ConnectionsServiceHandler(f),
		connectionsv1connect.NewConnectionsServiceHandler, connectionsv1.RegisterConnectionsServiceHandler))
	self := mesh.Caller{Subject: "toolmesh-agents", Agent: "toolmesh-agents", Roles: []string{mesh.RoleService}}
	cc := meshclient.New(meshclient.Config{HTTP: csrv.Client(), Signer: servertest.MeshSigner()}, connectionsv1connect.NewConnectionsServiceClient, csrv.URL)
	srv := start(agents.Config{Connections: &agents.Connections{Client: cc, Self: self}})(t)
	c := agentsv1connect.NewAgentsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	owner := servertest.As(context.Background(), "owner")
	register(t, c, owner, "worker")

	if _, err := setStatus(c, owner, "worker", paused, "a pause"); err != nil {
		t.Fatal(err)
	}
	if _, err := setStatus(c, owner, "worker", retired, "done"); servertest.Code(t, err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "was not retired") {
		t.Fatalf("retiring while the connections cannot be unlinked: %v, want unavailable", err)
	}
	got, _ := c.Get(owner, &agentsv1.GetRequest{AgentId: "worker"})
	if got.GetAgent().GetStatus() != paused {
		t.Fatalf("the agent is %v, want still paused", got.GetAgent().GetStatus())
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	if a, err := setStatus(c, owner, "worker", retired, "done"); err != nil || a.GetStatus() != retired {
		t.Fatalf("retiring again: %v, %v", a, err)
	}
	if len(f.revoked) != 1 || f.revoked[0] != "worker" || f.callers[0].Agent != self.Agent || !f.callers[0].HasRole(mesh.RoleService) {
		t.Errorf("unlinked %v as %v, want worker's once, as the service", f.revoked, f.callers)
	}
}
