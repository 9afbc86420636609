package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	gh "github.com/google/go-github/v88/github"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/upstream"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Policy says whose token a call acts with: the policies every provider's
// service shares (internal/upstream).
type Policy = upstream.Policy

// The policies.
const (
	PolicyShared           = upstream.PolicyShared
	PolicyPerAgent         = upstream.PolicyPerAgent
	PolicyPerAgentOrShared = upstream.PolicyPerAgentOrShared
)

// ParsePolicy reads a policy by its name; "" is PolicyShared.
func ParsePolicy(s string) (Policy, error) { return upstream.ParsePolicy(s) }

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
	// Audit records every use of an agent's connection in the audit trail
	// before its token goes upstream; nil: uses are only logged.
	Audit *audittrail.Recorder
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
		// Every use of an agent's connection is logged and recorded in the
		// audit trail, never its token (internal/upstream).
		tok, notLinked, err := upstream.Connections{Client: s.conns.Client, Self: s.conns.Self, Provider: connectionsv1.Provider_PROVIDER_GITHUB,
			Audit: s.conns.Audit, Log: s.log}.Token(ctx, agent, audittrail.ToolOf(ctx, "github_call"))
		if err != nil {
			return nil, err
		}
		if tok != nil {
			c, err := s.newGitHubClient(tok.GetAccessToken())
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			return &ghClient{gh: c, conn: tok.GetConnection()}, nil
		}
		if s.policy == PolicyPerAgent || s.shared == nil {
			return nil, s.askToLink(ctx, agent, notLinked)
		}
	}
	if s.shared == nil {
		return nil, mesh.NewCapabilityGapError(GapToken, errors.New("GitHub is not configured on this mesh: set TOOLMESH_GITHUB_TOKEN "+
			"(and TOOLMESH_GITHUB_URL for GitHub Enterprise Server) for the github service"))
	}
	return &ghClient{gh: s.shared}, nil
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
