package connections

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/oauth2"
)

// OAuthRefresher refreshes tokens with a provider's OAuth 2.0 token
// endpoint (the refresh_token grant, RFC 6749 section 6).
type OAuthRefresher struct {
	// Config names the client and the token endpoint.
	Config oauth2.Config
	// HTTP reaches the token endpoint (through the egress guard);
	// http.DefaultClient when nil.
	HTTP *http.Client
}

// GitHubRefresher refreshes GitHub App user tokens at github.com, or at the
// GitHub Enterprise Server whose web URL is base
// ("https://github.example.com"; github.com when empty).
func GitHubRefresher(base, clientID, clientSecret string, client *http.Client) *OAuthRefresher {
	if base == "" {
		base = "https://github.com"
	}
	base = strings.TrimRight(base, "/")
	return &OAuthRefresher{HTTP: client, Config: oauth2.Config{ClientID: clientID, ClientSecret: clientSecret,
		Endpoint: oauth2.Endpoint{AuthURL: base + "/login/oauth/authorize", TokenURL: base + "/login/oauth/access_token", AuthStyle: oauth2.AuthStyleInParams}}}
}

// refusedCodes are the token endpoint's answers that mean the refresh token
// itself is no good (revoked, expired, or already used): the connection is
// broken. GitHub answers bad_refresh_token; the standard says invalid_grant.
var refusedCodes = map[string]bool{"invalid_grant": true, "bad_refresh_token": true}

// Refresh implements Refresher.
func (r *OAuthRefresher) Refresh(ctx context.Context, refreshToken string) (Tokens, error) {
	if r.HTTP != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, r.HTTP)
	}
	// A token source over a token without an access token refreshes at
	// once.
	t, err := r.Config.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok {
		if refusedCodes[re.ErrorCode] {
			return Tokens{}, fmt.Errorf("%w: %s", ErrRefreshRefused, re.ErrorCode)
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		// Never the body: it may echo what was sent.
		return Tokens{}, fmt.Errorf("the token endpoint answered %d %s", status, re.ErrorCode)
	}
	if err != nil {
		return Tokens{}, fmt.Errorf("refresh: %w", err)
	}
	return Tokens{Access: t.AccessToken, Refresh: t.RefreshToken, Expire: t.Expiry}, nil
}
