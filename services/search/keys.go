package search

import (
	"context"
	"net/url"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/upstream"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1/toolv1connect"
)

// KeyedProvider is a provider that searches with an API key given per
// call: the calling agent's own, under the per_agent policies.
type KeyedProvider interface {
	Provider
	// WithKey is the provider searching with key.
	WithKey(key string) Provider
}

// Keys is how the service obtains the calling agent's own API key (the
// connections service, provider search) and where the owner links one.
type Keys struct {
	upstream.Connections
	// LinkURL is the console's Connections page, where the owner links an
	// agent's key; the service adds ?agent=<id>&provider=PROVIDER_SEARCH.
	LinkURL string
}

// providerFor is the provider the call in ctx searches with, under the
// policy: the shared one, the calling agent's own key, or a
// VisitRequired answer asking the owner to link one; before anything is
// sent to the provider.
func (s *Service) providerFor(ctx context.Context) (Provider, error) {
	if s.policy == upstream.PolicyShared {
		if s.provider == nil {
			return nil, s.gap()
		}
		return s.provider, nil
	}
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if s.keyed == nil {
		return nil, s.gap()
	}
	tok, _, err := s.keys.Token(ctx, agent, audittrail.ToolOf(ctx, "search_call"))
	switch {
	case err != nil:
		return nil, err
	case tok != nil:
		return s.keyed.WithKey(tok.GetAccessToken()), nil
	case s.policy == upstream.PolicyPerAgentOrShared && s.shared:
		return s.provider, nil
	}
	u := s.keys.LinkURL + "?" + url.Values{"agent": {agent}, "provider": {connectionsv1.Provider_PROVIDER_SEARCH.String()}}.Encode()
	return nil, mesh.NewVisitRequiredError(&toolv1.VisitRequired{Url: u, VisitId: "search:" + agent,
		Message: "Link a search API key for agent " + agent + " (the owner, in the console's Connections page) to let it search as itself."})
}

// EndVisit implements toolmesh.tool.v1.VisitService.EndVisit: a key the
// owner links is bound to no call, so a call that ended changes nothing.
func (s *Service) EndVisit(ctx context.Context, _ *toolv1.EndVisitRequest) (*toolv1.EndVisitResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	return &toolv1.EndVisitResponse{}, nil
}

// VisitRegistration describes the service's toolmesh.tool.v1.VisitService
// (EndVisit), served beside it.
func (s *Service) VisitRegistration() server.Service {
	return server.Register(toolv1connect.VisitServiceName, toolv1connect.VisitServiceHandler(s), toolv1connect.NewVisitServiceHandler, nil)
}
