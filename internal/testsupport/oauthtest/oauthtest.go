// Package oauthtest plays the client side of the MCP authorization flow in
// tests: an OAuth handler for the go-sdk client that answers a step-up
// challenge as a user who consents would.
package oauthtest

import (
	"context"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// StepUp is an auth.OAuthHandler (mcp.StreamableClientTransport's
// OAuthHandler) that sends Token and, on a 403 insufficient_scope
// challenge, replaces it with Mint(the challenged scopes) and lets the
// transport retry the request.
type StepUp struct {
	// Mint returns a token for a space-separated scope list.
	Mint func(scope string) string

	mu         sync.Mutex
	token      string
	challenged []string
}

// NewStepUp starts with a token for scope.
func NewStepUp(scope string, mint func(scope string) string) *StepUp {
	return &StepUp{Mint: mint, token: mint(scope)}
}

// TokenSource implements auth.OAuthHandler.
func (s *StepUp) TokenSource(context.Context) (oauth2.TokenSource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: s.token, TokenType: "Bearer"}), nil
}

// Authorize implements auth.OAuthHandler.
func (s *StepUp) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil || len(cs) == 0 || cs[0].Params["error"] != "insufficient_scope" {
		return nil // not a step-up: the transport hands the response on
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.challenged = append(s.challenged, cs[0].Params["scope"])
	s.token = s.Mint(cs[0].Params["scope"])
	return nil
}

// Challenged returns the scopes of each challenge answered, in order.
func (s *StepUp) Challenged() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.challenged)
}
