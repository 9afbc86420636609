// Package upstream is a provider's service's side of the connections
// domain: whose credentials a call acts with (Policy), and the calling
// agent's own token, obtained from the connections service with each use
// recorded in the audit trail before the token goes upstream.
package upstream

import (
	"context"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
)

// Policy says whose credentials a call acts with.
type Policy string

// The policies.
const (
	// PolicyShared: every call acts with the one configured credential.
	PolicyShared Policy = "shared"
	// PolicyPerAgent: each call acts with its agent's own connection
	// (the connections service); an agent without one is asked to link.
	PolicyPerAgent Policy = "per_agent"
	// PolicyPerAgentOrShared: the agent's connection when it has an active
	// one, else the shared credential (when configured), else asked to
	// link.
	PolicyPerAgentOrShared Policy = "per_agent_or_shared"
)

// ParsePolicy reads a policy by its name; "" is PolicyShared.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return PolicyShared, nil
	case PolicyShared, PolicyPerAgent, PolicyPerAgentOrShared:
		return p, nil
	}
	return "", fmt.Errorf("policy %q: want %s, %s or %s", s, PolicyShared, PolicyPerAgent, PolicyPerAgentOrShared)
}

// Connections obtains the calling agent's token at one provider.
type Connections struct {
	// Client reaches the connections service.
	Client connectionsv1connect.ConnectionsServiceClient
	// Self is the service's own mesh identity; it must hold
	// mesh.RoleService.
	Self mesh.Caller
	// Provider is the provider whose tokens the service uses.
	Provider connectionsv1.Provider
	// Audit records every use before the token goes upstream; nil: uses
	// are only logged.
	Audit *audittrail.Recorder
	// Log receives each use (never a token).
	Log *slog.Logger
}

// Token answers agent's usable token for the call ctx serves (tool names
// it, e.g. "search_web"), or why there is none. The use is logged and
// recorded in the audit trail first: a use that cannot be recorded is not
// answered (Unavailable).
func (c Connections) Token(ctx context.Context, agent, tool string) (*connectionsv1.Token, *connectionsv1.NotLinked, error) {
	provider := protoenum.Word(c.Provider)
	res, err := c.Client.GetToken(mesh.WithCall(ctx, mesh.Call{Caller: c.Self}), &connectionsv1.GetTokenRequest{Agent: agent, Provider: c.Provider})
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the connections service could not answer agent %s's %s token: %w", agent, provider, err))
	}
	tok := res.GetToken()
	if tok == nil {
		return nil, res.GetNotLinked(), nil
	}
	conn := tok.GetConnection()
	if c.Log != nil {
		c.Log.InfoContext(ctx, provider+".connection_used", "agent", agent, "provider", provider, "account", conn.GetAccount(),
			"connection", conn.GetId(), "tool", tool, "rpc", procedure(ctx))
	}
	if c.Audit != nil {
		err := c.Audit.RecordUse(ctx, audittrail.TokenUse{Connection: conn, Tool: tool, CallKey: mesh.FromContext(ctx).IdempotencyKey})
		if err != nil {
			if c.Log != nil {
				c.Log.ErrorContext(ctx, provider+".use_unaudited", "agent", agent, "connection", conn.GetId(), "error", err.Error())
			}
			return nil, nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the use of agent %s's %s connection could not be recorded in the audit trail, so it was not used; try again", agent, provider))
		}
	}
	return tok, nil, nil
}

// procedure names the RPC ctx serves ("/toolmesh.github.v1.GitHubService/GetRepo").
func procedure(ctx context.Context) string {
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return info.Spec().Procedure
	}
	return ""
}
