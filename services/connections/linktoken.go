package connections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
)

// Identifier says whose a token is at one provider, so that a token the
// owner pastes is checked before it is stored and the connection names
// the upstream account.
type Identifier interface {
	// Identify answers the account the token acts as and the scopes it
	// was granted; ErrTokenRefused when the provider refuses the token.
	Identify(ctx context.Context, token string) (Identity, error)
}

// Identity is whose a token is.
type Identity struct {
	Account string
	Scopes  []string
}

// ErrTokenRefused is an Identifier's answer for a token the provider does
// not accept (wrong, expired or revoked).
var ErrTokenRefused = errors.New("the provider refused the token")

// defaultKeyAccount names the account of a token whose provider cannot say
// whose it is, when the owner names none.
const defaultKeyAccount = "api key"

// LinkToken implements ConnectionsService.LinkToken: the owner's form. The
// token is checked with the provider first where it can say whose the
// token is; a refused token stores nothing.
func (s *Service) LinkToken(ctx context.Context, req *connectionsv1.LinkTokenRequest) (*connectionsv1.LinkTokenResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleOwner)
	if err != nil {
		return nil, err
	}
	provider := req.GetProvider()
	who := Identity{Account: strings.TrimSpace(req.GetAccount())}
	if who.Account == "" {
		who.Account = defaultKeyAccount
	}
	if id := s.cfg.Identifiers[provider]; id != nil {
		who, err = id.Identify(ctx, req.GetToken())
		switch {
		case errors.Is(err, ErrTokenRefused):
			s.cfg.Log.Warn("connections.token_refused", "agent", req.GetAgent(), "provider", protoenum.Word(provider), "by", caller.Subject)
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s refused the token (wrong, expired or revoked): nothing was linked; check the token and paste it again",
				providerTitle(provider)))
		case err != nil:
			s.cfg.Log.Warn("connections.token_unchecked", "agent", req.GetAgent(), "provider", protoenum.Word(provider), "error", err.Error())
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s could not be asked whose the token is (%v): nothing was linked; try again",
				providerTitle(provider), err))
		}
	}
	c, err := s.link(ctx, req.GetAgent(), provider, who.Account, who.Scopes, Tokens{Access: req.GetToken()}, "", caller.Subject)
	if err != nil {
		return nil, err
	}
	return &connectionsv1.LinkTokenResponse{Connection: c}, nil
}

// providerTitle names a provider for people.
func providerTitle(p connectionsv1.Provider) string {
	switch p {
	case connectionsv1.Provider_PROVIDER_GITHUB:
		return "GitHub"
	case connectionsv1.Provider_PROVIDER_SEARCH:
		return "The search API"
	}
	return protoenum.Word(p)
}

// GitHubIdentifier asks GitHub whose a token is: GET /user, whose login is
// the account; the granted scopes of a classic token are its
// X-OAuth-Scopes header (a fine-grained token has none).
type GitHubIdentifier struct {
	// API is the REST API's base ("https://api.github.com",
	// "https://github.example.com/api/v3").
	API string
	// HTTP reaches the API (through the egress guard); http.DefaultClient
	// when nil.
	HTTP *http.Client
}

// NewGitHubIdentifier asks github.com, or the GitHub Enterprise Server
// whose web URL is base.
func NewGitHubIdentifier(base string, client *http.Client) *GitHubIdentifier {
	return &GitHubIdentifier{API: githubAPI(base), HTTP: client}
}

// githubAPI is the REST API's base of github.com (base empty) or of the
// GitHub Enterprise Server whose web URL is base.
func githubAPI(base string) string {
	if base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/api/v3"); base != "" {
		return base + "/api/v3"
	}
	return "https://api.github.com"
}

// Identify implements Identifier.
func (g *GitHubIdentifier) Identify(ctx context.Context, token string) (Identity, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.API+"/user", nil)
	if err != nil {
		return Identity{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	hc := g.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return Identity{}, fmt.Errorf("GET /user: %w", err)
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusUnauthorized:
		return Identity{}, ErrTokenRefused
	case res.StatusCode != http.StatusOK:
		// Never the body: it may echo what was sent.
		return Identity{}, fmt.Errorf("GET /user answered %d", res.StatusCode)
	}
	var user struct {
		Login string `json:"login"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&user); err != nil || strings.TrimSpace(user.Login) == "" {
		return Identity{}, errors.New("GET /user answered no login")
	}
	who := Identity{Account: user.Login}
	for sc := range strings.SplitSeq(res.Header.Get("X-OAuth-Scopes"), ",") {
		if sc = strings.TrimSpace(sc); sc != "" {
			who.Scopes = append(who.Scopes, sc)
		}
	}
	return who, nil
}
