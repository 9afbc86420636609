package connections_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/services/connections"
)

// TestLinkToken: the owner links a personal access token; GitHub names
// its account, and the agent's GetToken answers it. A token GitHub
// refuses is invalid_argument and stores nothing; only the owner links;
// a provider that cannot name the account takes the owner's name for it.
func TestLinkToken(t *testing.T) {
	gh := githubtest.Start(t, "Iv1.pat", "secret")
	pat := gh.Issue("octo-pat")
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{Identifiers: map[connectionsv1.Provider]connections.Identifier{
		github: connections.NewGitHubIdentifier(gh.URL, nil)}})

	// A token GitHub does not know: refused, nothing stored.
	_, err := r.c.LinkToken(owner, &connectionsv1.LinkTokenRequest{Agent: "agent-a", Provider: github, Token: "ghp_notAtoken"})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "GitHub refused the token") || !strings.Contains(err.Error(), "nothing was linked") {
		t.Errorf("a bad token answered %v, want invalid_argument saying GitHub refused it and nothing was linked", err)
	}
	if res, err := r.c.ListConnections(owner, &connectionsv1.ListConnectionsRequest{}); err != nil || len(res.GetConnections()) != 0 {
		t.Fatalf("after a refused token the connections are %v (%v), want none", res.GetConnections(), err)
	}

	// Only the owner links.
	for name, ctx := range map[string]context.Context{"the service role": service, "an admin": as("agent-a", mesh.RoleAdmin)} {
		if _, err := r.c.LinkToken(ctx, &connectionsv1.LinkTokenRequest{Agent: "agent-a", Provider: github, Token: pat}); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s linked a token: %v, want permission_denied", name, err)
		}
	}

	res, err := r.c.LinkToken(owner, &connectionsv1.LinkTokenRequest{Agent: "agent-a", Provider: github, Token: pat, Account: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.GetConnection(); c.GetAccount() != "octo-pat" || c.GetAgent() != "agent-a" || c.GetStatus() != connectionsv1.Status_STATUS_ACTIVE {
		t.Errorf("linked %v, want agent-a active as octo-pat (GitHub's login, not the name given)", c)
	}
	tok, err := r.c.GetToken(service, &connectionsv1.GetTokenRequest{Agent: "agent-a", Provider: github})
	if err != nil || tok.GetToken().GetAccessToken() != pat {
		t.Errorf("GetToken after linking answered %v (%v), want the pasted token", tok.GetNotLinked(), err)
	}
	if strings.Contains(r.logs.String(), pat) {
		t.Errorf("the log carries the token:\n%s", r.logs.String())
	}

	// The search API names no account: the owner's name, or "api key".
	res, err = r.c.LinkToken(owner, &connectionsv1.LinkTokenRequest{Agent: "agent-a", Provider: connectionsv1.Provider_PROVIDER_SEARCH, Token: "sk-search"})
	if err != nil || res.GetConnection().GetAccount() != "api key" {
		t.Errorf("a search key linked as %v (%v), want the account \"api key\"", res.GetConnection(), err)
	}
}
