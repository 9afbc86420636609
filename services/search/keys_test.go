package search_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/upstream"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1/searchv1connect"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
)

// keyring is a connections service holding agents' search keys.
type keyring struct {
	connectionsv1connect.UnimplementedConnectionsServiceHandler
	keys map[string]string
}

func (k keyring) GetToken(_ context.Context, req *connectionsv1.GetTokenRequest) (*connectionsv1.GetTokenResponse, error) {
	if req.GetProvider() != connectionsv1.Provider_PROVIDER_SEARCH {
		return nil, connect.NewError(connect.CodeInvalidArgument, nil)
	}
	key, ok := k.keys[req.GetAgent()]
	if !ok {
		return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_NotLinked{NotLinked: &connectionsv1.NotLinked{Reason: connectionsv1.NotLinked_REASON_NONE}}}, nil
	}
	return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_Token{Token: &connectionsv1.Token{AccessToken: key,
		Connection: &connectionsv1.Connection{Id: "con_" + req.GetAgent(), Agent: req.GetAgent(), Provider: req.GetProvider(), Account: "api key"}}}}, nil
}

// TestPerAgentKeys: under per_agent an agent searches with its own key and
// an agent without one is sent to the console's Connections page before
// anything reaches the provider; per_agent_or_shared falls back to the
// shared key.
func TestPerAgentKeys(t *testing.T) {
	const link = "http://127.0.0.1:7180/connections"
	a := newAPI(t, fixture(t, "brave_web.json"))
	ring := keyring{keys: map[string]string{"researcher": "key-of-researcher"}}
	client := func(policy upstream.Policy, shared string) searchv1connect.SearchServiceClient {
		p, err := searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: shared, URL: a.srv.URL + "/res/v1/web/search", Egress: loopback, KeysPerAgent: true})
		if err != nil {
			t.Fatal(err)
		}
		svc := search.New(search.Config{Provider: p, Policy: policy, Shared: shared != "", Keys: search.Keys{LinkURL: link,
			Connections: upstream.Connections{Client: ring, Self: mesh.Caller{Agent: "toolmesh-search", Roles: []string{mesh.RoleService}}, Provider: connectionsv1.Provider_PROVIDER_SEARCH}}})
		srv := servertest.Start(t, svc.Registration())
		return searchv1connect.NewSearchServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	}
	sent := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		var out []string
		for _, r := range a.requests {
			out = append(out, r.Header.Get("X-Subscription-Token"))
		}
		a.requests = nil
		return out
	}

	perAgent := client(upstream.PolicyPerAgent, "")
	if _, err := perAgent.Web(as(), &searchv1.WebRequest{Query: "q"}); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) != 1 || got[0] != "key-of-researcher" {
		t.Errorf("the provider got keys %q, want the researcher's own", got)
	}
	_, err := perAgent.DeepResearch(servertest.As(context.Background(), "keyless"), &searchv1.DeepResearchRequest{Question: "what is toolmesh"})
	v, verr := mesh.VisitRequired(err)
	if verr != nil || v == nil || !strings.HasPrefix(v.GetUrl(), link+"?") || !strings.Contains(v.GetUrl(), "agent=keyless") || !strings.Contains(v.GetUrl(), "provider=PROVIDER_SEARCH") {
		t.Errorf("a keyless agent's call answered %v, want a visit to the console's Connections page for it", err)
	}
	if got := sent(); len(got) != 0 {
		t.Errorf("the provider got %d requests for an agent without a key", len(got))
	}

	fallback := client(upstream.PolicyPerAgentOrShared, "shared-key")
	for _, agent := range []string{"researcher", "keyless"} {
		if _, err := fallback.Web(servertest.As(context.Background(), agent), &searchv1.WebRequest{Query: "q"}); err != nil {
			t.Fatalf("%s under per_agent_or_shared: %v", agent, err)
		}
	}
	if got := sent(); len(got) != 2 || got[0] != "key-of-researcher" || got[1] != "shared-key" {
		t.Errorf("under per_agent_or_shared the provider got keys %q, want the researcher's own, then the shared one", got)
	}
}
