package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	gh "github.com/google/go-github/v88/github"

	"github.com/toolmesh/toolmesh/internal/mesh"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Policy says whose token a call acts with.
type Policy string

// The policies.
const (
	// PolicyShared: every call acts with the one configured token.
	PolicyShared Policy = "shared"
	// PolicyPerAgent: each call acts with its agent's own connection
	// (the connections service); an agent without one is asked to link.
	PolicyPerAgent Policy = "per_agent"
	// PolicyPerAgentOrShared: the agent's connection when it has an active
	// one, else the shared token (when configured), else asked to link.
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

// Connections is how the service obtains an agent's token: the
// connections service, called as Self (the mesh's service role).
type Connections struct {
	Client connectionsv1connect.ConnectionsServiceClient
	// Self is the service's own mesh identity; it must hold
	// mesh.RoleService.
	Self mesh.Caller
	// LinkURL is the page on the mesh where a person links an agent's
	// GitHub account; the service adds ?agent=<id>&provider=github.
	LinkURL string
}

// ghClient is the GitHub client of one call, and the connection whose token
// it carries (nil for the shared token).
type ghClient struct {
	gh   *gh.Client
	conn *connectionsv1.Connection
}

// newGitHubClient builds a client that authenticates with token.
func (s *Service) newGitHubClient(token string) (*gh.Client, error) {
	return s.githubClientOn(s.http, gh.WithAuthToken(token))
}

// githubClientOn is a client of GitHub (or the Enterprise server
// configured) over hc, with more options.
func (s *Service) githubClientOn(hc *http.Client, more ...gh.ClientOptionsFunc) (*gh.Client, error) {
	opts := append([]gh.ClientOptionsFunc{gh.WithHTTPClient(hc), gh.WithUserAgent("toolmesh")}, more...)
	if s.baseURL != "" {
		opts = append(opts, gh.WithEnterpriseURLs(s.baseURL, s.baseURL))
	}
	c, err := gh.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("github client: %w", err)
	}
	return c, nil
}

// client returns the GitHub client the call acts with, under the policy,
// before any request upstream: the shared token's, the calling agent's own
// connection's, or a VisitRequired answer asking the person to link.
func (s *Service) client(ctx context.Context) (*ghClient, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if s.policy != PolicyShared {
		res, err := s.conns.Client.GetToken(mesh.WithCall(ctx, mesh.Call{Caller: s.conns.Self}),
			&connectionsv1.GetTokenRequest{Agent: agent, Provider: connectionsv1.Provider_PROVIDER_GITHUB})
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the connections service could not answer agent %s's GitHub token: %w", agent, err))
		}
		if tok := res.GetToken(); tok != nil {
			c, err := s.newGitHubClient(tok.GetAccessToken())
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			conn := tok.GetConnection()
			// Every use of an agent's connection is recorded, never its token.
			s.log.InfoContext(ctx, "github.connection_used", "agent", agent, "provider", "github", "account", conn.GetAccount(),
				"connection", conn.GetId(), "rpc", procedure(ctx))
			return &ghClient{gh: c, conn: conn}, nil
		}
		if s.policy == PolicyPerAgent || s.shared == nil {
			return nil, s.askToLink(ctx, agent, res.GetNotLinked())
		}
	}
	if s.shared == nil {
		return nil, mesh.NewCapabilityGapError(GapToken, errors.New("GitHub is not configured on this mesh: set TOOLMESH_GITHUB_TOKEN "+
			"(and TOOLMESH_GITHUB_URL for GitHub Enterprise Server) for the github service"))
	}
	return &ghClient{gh: s.shared}, nil
}

// procedure names the RPC being served ("/toolmesh.github.v1.GitHubService/GetRepo").
func procedure(ctx context.Context) string {
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return info.Spec().Procedure
	}
	return ""
}

// askToLink answers a call whose agent has no usable GitHub connection:
// the person is asked to visit the link page. The visit id is the same for
// every call of the agent until it links.
func (s *Service) askToLink(ctx context.Context, agent string, nl *connectionsv1.NotLinked) error {
	why := "Link a GitHub account to let agent " + agent + " act on GitHub as that account."
	switch nl.GetReason() {
	case connectionsv1.NotLinked_REASON_BROKEN:
		why = "GitHub refused agent " + agent + "'s linked account; link it again to let the agent act on GitHub."
	case connectionsv1.NotLinked_REASON_EXPIRED:
		why = "Agent " + agent + "'s GitHub link expired; link it again to let the agent act on GitHub."
	}
	visit := "github:" + agent
	call := mesh.FromContext(ctx)
	u := s.linkURL(agent, call.Caller.Subject, visit, call.IdempotencyKey)
	return mesh.NewVisitRequiredError(&toolv1.VisitRequired{Url: u, Message: why, VisitId: visit})
}

// refused handles GitHub refusing the call's token (401): a connection's
// is marked broken and the person is asked to link again; nil for the
// shared token.
func (s *Service) refused(ctx context.Context, c *ghClient) error {
	if c == nil || c.conn == nil {
		return nil
	}
	agent := c.conn.GetAgent()
	_, err := s.conns.Client.MarkBroken(mesh.WithCall(ctx, mesh.Call{Caller: s.conns.Self}), &connectionsv1.MarkBrokenRequest{Id: c.conn.GetId()})
	if err != nil {
		s.log.ErrorContext(ctx, "github.mark_broken", "connection", c.conn.GetId(), "agent", agent, "error", err.Error())
	}
	s.log.WarnContext(ctx, "github.connection_refused", "connection", c.conn.GetId(), "agent", agent, "account", c.conn.GetAccount(), "status", http.StatusUnauthorized)
	return s.askToLink(ctx, agent, &connectionsv1.NotLinked{Reason: connectionsv1.NotLinked_REASON_BROKEN})
}

// EndVisit implements toolmesh.tool.v1.VisitService.EndVisit: the call
// (the caller's agent, the request's idempotency key) that asked to link
// ended without it, so a link made for it afterwards binds nothing.
func (s *Service) EndVisit(ctx context.Context, req *toolv1.EndVisitRequest) (*toolv1.EndVisitResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	key := mesh.FromContext(ctx).IdempotencyKey
	if key == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("EndVisit names the call by its Idempotency-Key header, which is missing"))
	}
	if s.policy == PolicyShared || req.GetVisitId() != "github:"+agent {
		// Not a visit this service asked of the agent: nothing to end.
		return &toolv1.EndVisitResponse{}, nil
	}
	res, err := s.conns.Client.EndLinkCall(mesh.WithCall(ctx, mesh.Call{Caller: s.conns.Self}), &connectionsv1.EndLinkCallRequest{Agent: agent, CallKey: key})
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the connections service could not end agent %s's link call: %w", agent, err))
	}
	s.log.InfoContext(ctx, "github.link_call_ended", "agent", agent, "visit", req.GetVisitId(), "ended", res.GetEnded())
	return &toolv1.EndVisitResponse{}, nil
}
