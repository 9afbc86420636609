// Package oidctest is an OpenID Connect provider for tests: discovery,
// a JSON Web Key Set, an authorization endpoint that signs in the person a
// test chose (no login form), and a token endpoint that checks PKCE (S256)
// and issues an ID token for the client and an access token for a resource
// (RFC 8707), carrying the person's roles the way the edge reads them.
//
//	p := oidctest.Start(t, "console")
//	p.SignInAs("olivia", "owner")
//	// the browser follows the console to p.URL/authorize and back
package oidctest

import (
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Provider is a running test OpenID Connect provider.
type Provider struct {
	// URL is the issuer: its discovery document is at
	// URL/.well-known/openid-configuration.
	URL string
	// ClientID is the one client the provider knows.
	ClientID string

	key *rsa.PrivateKey
	srv *httptest.Server

	mu       sync.Mutex
	person   *Person
	codes    map[string]*grant
	refresh  map[string]*grant // refresh tokens issued with codes, to what they were issued for
	refusing bool              // refresh tokens are refused (RevokeRefreshTokens)
	lifetime time.Duration     // of access tokens (SetAccessLifetime), else TokenLifetime
	exchange []string          // outcomes of the token endpoint, in order
}

// Person is who the authorization endpoint signs in.
type Person struct {
	Subject string
	Roles   []string
	// Scope is the access token's scope (space-separated).
	Scope string
	// Agent, when set, is the agent_id claim: the agent the person's
	// tokens act as (else the edge takes the subject).
	Agent string
}

// grant is an issued authorization code and what it was issued for.
type grant struct {
	person           Person
	redirectURI      string
	challenge, nonce string
	resource         string
	issued           time.Time
}

// TokenLifetime is how long the provider's tokens last.
const TokenLifetime = time.Hour

// Start runs a provider for the client clientID until the test ends.
func Start(t testing.TB, clientID string) *Provider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{ClientID: clientID, key: key, codes: map[string]*grant{}, refresh: map[string]*grant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.JWKS())
	})
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	p.URL = p.srv.URL
	return p
}

// SignInAs makes the authorization endpoint sign in subject with roles
// and scope from now on.
func (p *Provider) SignInAs(subject, scope string, roles ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.person = &Person{Subject: subject, Roles: roles, Scope: scope}
}

// SetAccessLifetime makes the access tokens issued from now on last d
// (the ID tokens and minted tokens keep TokenLifetime).
func (p *Provider) SetAccessLifetime(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifetime = d
}

// RevokeRefreshTokens makes the token endpoint refuse every refresh token
// from now on (invalid_grant), as an issuer does when the person's grant
// was revoked.
func (p *Provider) RevokeRefreshTokens() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
}

// Exchanges are the token endpoint's outcomes so far, in order: "issued"
// for a code, "refreshed" for a refresh token, or the OAuth error it
// answered.
func (p *Provider) Exchanges() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exchange...)
}

// JWKS is the provider's public key set (what the edge's --jwks-file holds).
func (p *Provider) JWKS() []byte {
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: "oidctest-1", Algorithm: "RS256", Use: "sig"}}})
	return b
}

// AccessToken mints an access token for resource directly, as a client
// credentials grant would (for API callers of a test).
func (p *Provider) AccessToken(t testing.TB, resource string, who Person) string {
	t.Helper()
	tok, err := p.sign(jwt.Claims{Audience: jwt.Audience{resource}}, who, map[string]any{"scope": who.Scope})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (p *Provider) sign(std jwt.Claims, who Person, extra map[string]any) (string, error) {
	return p.signFor(TokenLifetime, std, who, extra)
}

// signFor signs a token that lasts d, with a random id (two tokens for
// the same person in the same second differ).
func (p *Provider) signFor(d time.Duration, std jwt.Claims, who Person, extra map[string]any) (string, error) {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "oidctest-1"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	std.Issuer, std.Subject = p.URL, who.Subject
	std.IssuedAt, std.Expiry = jwt.NewNumericDate(now.Add(-time.Second)), jwt.NewNumericDate(now.Add(d))
	std.ID = rand.Text()
	if len(who.Roles) > 0 {
		extra["roles"] = who.Roles
	}
	if who.Agent != "" {
		extra["agent_id"] = who.Agent
	}
	return jwt.Signed(s).Claims(std).Claims(extra).Serialize()
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                p.URL,
		"authorization_endpoint":                p.URL + "/authorize",
		"token_endpoint":                        p.URL + "/token",
		"jwks_uri":                              p.URL + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"grant_types_supported":                 []string{"authorization_code"},
		"token_endpoint_auth_methods_supported": []string{"none", "client_secret_basic", "client_secret_post"},
	})
}

// authorize signs in the chosen person at once and sends the browser back
// with a code bound to the PKCE challenge, the nonce and the redirect URI.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect := q.Get("redirect_uri")
	if q.Get("client_id") != p.ClientID || redirect == "" {
		http.Error(w, "unknown client or no redirect_uri", http.StatusBadRequest)
		return
	}
	back, err := url.Parse(redirect)
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	answer := back.Query()
	answer.Set("state", q.Get("state"))
	p.mu.Lock()
	who := p.person
	p.mu.Unlock()
	switch {
	case q.Get("response_type") != "code" || !strings.Contains(" "+q.Get("scope")+" ", " openid "):
		answer.Set("error", "invalid_request")
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		answer.Set("error", "invalid_request")
		answer.Set("error_description", "PKCE with S256 is required")
	case who == nil:
		answer.Set("error", "access_denied")
		answer.Set("error_description", "nobody signs in at the test provider")
	default:
		code := rand.Text()
		p.mu.Lock()
		p.codes[code] = &grant{person: *who, redirectURI: redirect, challenge: q.Get("code_challenge"), nonce: q.Get("nonce"),
			resource: q.Get("resource"), issued: time.Now()}
		p.mu.Unlock()
		answer.Set("code", code)
	}
	back.RawQuery = answer.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token exchanges a code once, for the verifier of its challenge.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code, desc string) {
		p.mu.Lock()
		p.exchange = append(p.exchange, code)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	if err := r.ParseForm(); err != nil {
		fail("invalid_request", "unreadable form")
		return
	}
	client := r.PostForm.Get("client_id")
	if id, _, ok := r.BasicAuth(); ok {
		client = id
	}
	if client != p.ClientID {
		fail("invalid_client", "unknown client")
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
	case "refresh_token":
		p.mu.Lock()
		g, refusing := p.refresh[r.PostForm.Get("refresh_token")], p.refusing
		p.mu.Unlock()
		if g == nil || refusing {
			fail("invalid_grant", "unknown or revoked refresh token")
			return
		}
		p.issue(w, g, "refreshed", "", fail)
		return
	default:
		fail("unsupported_grant_type", "only authorization_code and refresh_token")
		return
	}
	p.mu.Lock()
	g := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code")) // a code is used once, whatever the outcome
	p.mu.Unlock()
	if g == nil || time.Since(g.issued) > time.Minute {
		fail("invalid_grant", "unknown, used or expired code")
		return
	}
	if r.PostForm.Get("redirect_uri") != g.redirectURI {
		fail("invalid_grant", "redirect_uri differs from the authorization request's")
		return
	}
	verifier := r.PostForm.Get("code_verifier")
	sum := sha256.Sum256([]byte(verifier))
	if verifier == "" || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		fail("invalid_grant", "the PKCE code_verifier does not match the code_challenge")
		return
	}
	if rs := r.PostForm.Get("resource"); rs != "" {
		g.resource = rs
	}
	idExtra := map[string]any{}
	if g.nonce != "" {
		idExtra["nonce"] = g.nonce
	}
	idToken, err := p.sign(jwt.Claims{Audience: jwt.Audience{p.ClientID}}, g.person, idExtra)
	if err != nil {
		fail("server_error", err.Error())
		return
	}
	p.issue(w, g, "issued", idToken, fail)
}

// issue answers the token endpoint with an access token for g (its
// resource the audience, else the client) and a refresh token for it;
// outcome is logged in Exchanges.
func (p *Provider) issue(w http.ResponseWriter, g *grant, outcome, idToken string, fail func(code, desc string)) {
	aud := jwt.Audience{p.ClientID}
	if g.resource != "" {
		aud = jwt.Audience{g.resource}
	}
	p.mu.Lock()
	lifetime := cmp.Or(p.lifetime, TokenLifetime)
	p.mu.Unlock()
	access, err := p.signFor(lifetime, jwt.Claims{Audience: aud}, g.person, map[string]any{"scope": g.person.Scope})
	if err != nil {
		fail("server_error", err.Error())
		return
	}
	refresh := rand.Text()
	p.mu.Lock()
	p.refresh[refresh] = g
	p.exchange = append(p.exchange, outcome)
	p.mu.Unlock()
	answer := map[string]any{
		"access_token": access, "token_type": "Bearer", "expires_in": int(lifetime / time.Second),
		"refresh_token": refresh, "scope": g.person.Scope,
	}
	if idToken != "" {
		answer["id_token"] = idToken
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(answer)
}
