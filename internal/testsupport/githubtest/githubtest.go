// Package githubtest is a fake GitHub for tests: an OAuth app's
// authorization server (authorize, then exchange a code with PKCE S256 and
// the client secret, once) and the REST endpoints the github service's
// tools read, recording which token each request carried.
//
//	g := githubtest.Start(t, "Iv1.client", "the-secret")
//	g.Approve("octo-ann") // who approves the app at the authorize page
//	// the browser follows the link page to g.URL/login/oauth/authorize and back
package githubtest

import (
	"crypto/rand"
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
)

// Fake is a running fake GitHub.
type Fake struct {
	// URL is its web address, and its API's (URL/api/v3/) as a GitHub
	// Enterprise Server's.
	URL string
	// ClientID and ClientSecret are the one OAuth app it knows.
	ClientID, ClientSecret string

	srv *httptest.Server

	mu        sync.Mutex
	approver  string
	codes     map[string]grant
	tokens    map[string]string // every token issued -> its login
	gone      map[string]bool   // tokens revoked
	calls     []Call
	exchanges []string
	revoked   []string

	expiresIn time.Duration       // lifetime of the tokens codes are exchanged for (0: none)
	refresh   map[string]string   // live refresh tokens -> the access token issued with each
	refreshed []string            // the refresh grants' outcomes: "issued" or the error
	refreshes map[string]struct{} // every refresh token issued
}

// Call is one REST request: its path and the token it carried ("" for
// none) and whose that token is ("" when the fake issued no such token).
type Call struct {
	Method, Path string
	Token, Login string
}

type grant struct{ login, challenge, redirect string }

// Start runs a fake GitHub for the app (clientID, clientSecret) until the
// test ends.
func Start(t testing.TB, clientID, clientSecret string) *Fake {
	t.Helper()
	f := &Fake{ClientID: clientID, ClientSecret: clientSecret, codes: map[string]grant{}, tokens: map[string]string{}, gone: map[string]bool{},
		refresh: map[string]string{}, refreshes: map[string]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/oauth/authorize", f.authorize)
	mux.HandleFunc("POST /login/oauth/access_token", f.token)
	mux.HandleFunc("GET /api/v3/user", f.user)
	mux.HandleFunc("GET /api/v3/repos/{owner}/{repo}", f.repo)
	mux.HandleFunc("DELETE /api/v3/applications/{client}/token", f.revoke)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL
	return f
}

// Approve makes the authorize page approve the app as login from now on
// ("" refuses: access_denied).
func (f *Fake) Approve(login string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.approver = login
}

// ExpireIn makes the tokens codes are exchanged for from now on expire
// after d, with a refresh token (as a GitHub App's user tokens do); 0
// makes them last (an OAuth app's). A refreshed token lasts 8 hours.
func (f *Fake) ExpireIn(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expiresIn = d
}

// Refreshes are the refresh grants' outcomes so far: "issued" or the OAuth
// error answered.
func (f *Fake) Refreshes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refreshed...)
}

// RefreshTokens are every refresh token issued so far.
func (f *Fake) RefreshTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.refreshes))
	for r := range f.refreshes {
		out = append(out, r)
	}
	return out
}

// Refuse makes GitHub refuse token from now on (401 Bad credentials), as
// when its user revoked the app's access in their settings.
func (f *Fake) Refuse(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[token] = true
}

// Calls are the REST requests so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Exchanges are the token endpoint's outcomes so far: "issued" or the
// OAuth error it answered.
func (f *Fake) Exchanges() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.exchanges...)
}

// Tokens are the access tokens issued so far (revoked ones too), each to
// its login.
func (f *Fake) Tokens() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.tokens))
	for k, v := range f.tokens {
		out[k] = v
	}
	return out
}

// Issue issues an access token to login directly, as a finished link
// would have.
func (f *Fake) Issue(login string) string {
	tok := "gho_" + strings.ReplaceAll(rand.Text(), "-", "")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[tok] = login
	return tok
}

// Revoked are the tokens revoked through the applications API so far.
func (f *Fake) Revoked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

func (f *Fake) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	back, err := url.Parse(q.Get("redirect_uri"))
	if q.Get("client_id") != f.ClientID || err != nil || q.Get("redirect_uri") == "" {
		http.Error(w, "unknown client or no redirect_uri", http.StatusBadRequest)
		return
	}
	answer := back.Query()
	answer.Set("state", q.Get("state"))
	f.mu.Lock()
	who := f.approver
	f.mu.Unlock()
	switch {
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		answer.Set("error", "invalid_request")
	case who == "":
		answer.Set("error", "access_denied")
	default:
		code := rand.Text()
		f.mu.Lock()
		f.codes[code] = grant{login: who, challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
		f.mu.Unlock()
		answer.Set("code", code)
	}
	back.RawQuery = answer.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fail := func(code string) {
		f.mu.Lock()
		f.exchanges = append(f.exchanges, code)
		f.mu.Unlock()
		// GitHub answers 200 with an error body.
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
	}
	if r.ParseForm() != nil {
		fail("invalid_request")
		return
	}
	if r.PostForm.Get("client_id") != f.ClientID || r.PostForm.Get("client_secret") != f.ClientSecret {
		fail("incorrect_client_credentials")
		return
	}
	if r.PostForm.Get("grant_type") == "refresh_token" {
		f.refreshGrant(w, r.PostForm.Get("refresh_token"))
		return
	}
	f.mu.Lock()
	g, ok := f.codes[r.PostForm.Get("code")]
	delete(f.codes, r.PostForm.Get("code")) // once, whatever the outcome
	f.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !ok:
		fail("bad_verification_code")
		return
	case r.PostForm.Get("redirect_uri") != "" && r.PostForm.Get("redirect_uri") != g.redirect:
		fail("redirect_uri_mismatch")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		fail("bad_verification_code")
		return
	}
	f.mu.Lock()
	f.exchanges = append(f.exchanges, "issued")
	body := f.issueLocked(g.login, f.expiresIn)
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(body)
}

// issueLocked issues an access token to login, with a refresh token when it
// expires (after ttl), and answers the token endpoint's body.
func (f *Fake) issueLocked(login string, ttl time.Duration) map[string]any {
	tok := "gho_" + strings.ReplaceAll(rand.Text(), "-", "")
	f.tokens[tok] = login
	body := map[string]any{"access_token": tok, "token_type": "bearer", "scope": "repo"}
	if ttl > 0 {
		rt := "ghr_" + strings.ReplaceAll(rand.Text(), "-", "")
		f.refresh[rt] = tok
		f.refreshes[rt] = struct{}{}
		body["expires_in"] = int(ttl / time.Second)
		body["refresh_token"] = rt
		body["refresh_token_expires_in"] = 15811200
	}
	return body
}

// refreshGrant answers grant_type=refresh_token: a live refresh token is
// used once, and, as GitHub does, the old pair stops working.
func (f *Fake) refreshGrant(w http.ResponseWriter, rt string) {
	f.mu.Lock()
	old, ok := f.refresh[rt]
	if !ok {
		f.refreshed = append(f.refreshed, "bad_refresh_token")
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "bad_refresh_token"})
		return
	}
	delete(f.refresh, rt)
	f.gone[old] = true
	f.refreshed = append(f.refreshed, "issued")
	body := f.issueLocked(f.tokens[old], 8*time.Hour)
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(body)
}

// who records r and answers whose token it carries ("" when none the
// fake issued, or revoked).
func (f *Fake) who(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == r.Header.Get("Authorization") {
		tok, _ = strings.CutPrefix(tok, "token ")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	login := f.tokens[tok]
	if f.gone[tok] {
		login = ""
	}
	f.calls = append(f.calls, Call{Method: r.Method, Path: r.URL.Path, Token: tok, Login: login})
	return login
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest"}`))
}

func (f *Fake) user(w http.ResponseWriter, r *http.Request) {
	login := f.who(r)
	if login == "" {
		unauthorized(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"login": login, "id": len(login), "type": "User"})
}

func (f *Fake) repo(w http.ResponseWriter, r *http.Request) {
	if f.who(r) == "" {
		unauthorized(w)
		return
	}
	owner, name := r.PathValue("owner"), r.PathValue("repo")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": 1, "name": name, "full_name": owner + "/" + name, "default_branch": "main",
		"owner": map[string]any{"login": owner}})
}

// revoke is DELETE /applications/{client_id}/token: the app (basic auth
// with its client id and secret) revokes one of its tokens.
func (f *Fake) revoke(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok || id != f.ClientID || secret != f.ClientSecret || r.PathValue("client") != f.ClientID {
		unauthorized(w)
		return
	}
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil || body.AccessToken == "" {
		http.Error(w, `{"message":"access_token is required"}`, http.StatusUnprocessableEntity)
		return
	}
	f.mu.Lock()
	_, known := f.tokens[body.AccessToken]
	known = known && !f.gone[body.AccessToken]
	if known {
		f.gone[body.AccessToken] = true
		f.revoked = append(f.revoked, body.AccessToken)
	}
	f.mu.Unlock()
	if !known {
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
