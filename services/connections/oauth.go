package connections

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// Revoker revokes a token at its provider, so that unlinking a connection
// ends the access upstream too.
type Revoker interface {
	// Revoke revokes the access token (and what it was issued with). A
	// token the provider no longer knows is ErrAlreadyRevoked.
	Revoke(ctx context.Context, accessToken string) error
}

// ErrAlreadyRevoked is a Revoker's answer for a token the provider does
// not know any more (revoked already, or expired).
var ErrAlreadyRevoked = errors.New("the provider does not know the token any more")

// GitHubRevoker revokes GitHub App and OAuth app tokens through
// DELETE /applications/{client_id}/token (the app's basic auth), at
// github.com or at the GitHub Enterprise Server whose web URL is base.
type GitHubRevoker struct {
	// API is the REST API's base ("https://api.github.com",
	// "https://github.example.com/api/v3").
	API                    string
	ClientID, ClientSecret string
	// HTTP reaches the API (through the egress guard); http.DefaultClient
	// when nil.
	HTTP *http.Client
}

// NewGitHubRevoker is the revoker of the app clientID at github.com, or at
// the GitHub Enterprise Server whose web URL is base.
func NewGitHubRevoker(base, clientID, clientSecret string, client *http.Client) *GitHubRevoker {
	return &GitHubRevoker{API: githubAPI(base), ClientID: clientID, ClientSecret: clientSecret, HTTP: client}
}

// Revoke implements Revoker.
func (r *GitHubRevoker) Revoke(ctx context.Context, accessToken string) error {
	body, _ := json.Marshal(map[string]string{"access_token": accessToken})
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.API+"/applications/"+url.PathEscape(r.ClientID)+"/token", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	req.SetBasicAuth(r.ClientID, r.ClientSecret)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	hc := r.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	switch res.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusNotFound:
		return ErrAlreadyRevoked
	}
	// Never the body: it may echo what was sent.
	return fmt.Errorf("GitHub answered %d to the revocation", res.StatusCode)
}
