package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/toolmesh/toolmesh/internal/mesh"
)

// OIDC signs people in with OpenID Connect (authorization code with PKCE)
// against the issuer the edge trusts. The console then calls the edge
// with each person's own access token, so the edge sees and judges that
// person exactly as it would an MCP client of theirs.
type OIDC struct {
	// Issuer is the OpenID provider, the edge's --issuer; its discovery
	// document is read on the first sign-in.
	Issuer string
	// ClientID and ClientSecret are the console's registration at the
	// issuer (no secret: a public client, protected by PKCE alone).
	ClientID, ClientSecret string
	// RedirectURL is the console's callback as browsers reach it:
	// https://console.example.com/auth/callback.
	RedirectURL string
	// Resource is the edge's canonical URI (its --resource), asked for as
	// the access token's audience (RFC 8707).
	Resource string
	// Scopes are asked for besides openid (the edge's toolmesh:… scopes).
	Scopes []string
}

// Paths of sign-in.
const (
	signInPath   = "/auth/signin"
	callbackPath = "/auth/callback"
	signOutPath  = "/auth/signout"
)

// loginCookie carries one sign-in in progress from the redirect to the
// issuer to the callback: its state, nonce and PKCE verifier, sealed like
// the session. SameSite=Lax, because the issuer's redirect back is a
// cross-site navigation that a Strict cookie would miss.
const loginCookie = "toolmesh_console_login"

// loginLifetime bounds how long a person may take at the issuer.
const loginLifetime = 10 * time.Minute

// login is a sign-in in progress.
type login struct {
	State    string `json:"st"`
	Nonce    string `json:"no"`
	Verifier string `json:"pv"`
	// Next is the console path to show after sign-in.
	Next string `json:"nx"`
	// Kept is a form sent after the session ended: its path and fields,
	// given back after sign-in to send again.
	KeptPath string            `json:"kp,omitempty"`
	Kept     map[string]string `json:"kf,omitempty"`
	Expires  int64             `json:"exp"`
}

// signer is the OpenID Connect client of a console.
type signer struct {
	cfg  OIDC
	http *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
	endOIDC  string // the issuer's end_session_endpoint, when it has one
}

// discover reads the issuer's discovery document once it answers.
func (s *signer) discover(ctx context.Context) (*oidc.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider != nil {
		return s.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, s.http), s.cfg.Issuer)
	if err != nil {
		return nil, err
	}
	var extra struct {
		EndSession string `json:"end_session_endpoint"`
	}
	_ = p.Claims(&extra)
	s.provider, s.endOIDC = p, extra.EndSession
	return p, nil
}

func (s *signer) oauth(p *oidc.Provider) *oauth2.Config {
	ep := p.Endpoint()
	// One style, not the library's guess: a guess retries a refused code
	// exchange in the other style.
	ep.AuthStyle = oauth2.AuthStyleInParams
	if s.cfg.ClientSecret != "" {
		ep.AuthStyle = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: ep,
		RedirectURL: s.cfg.RedirectURL, Scopes: append([]string{oidc.ScopeOpenID}, s.cfg.Scopes...)}
}

// startLogin sends the browser to the issuer, with a fresh state, nonce
// and PKCE verifier sealed in the login cookie; kept is a form to give
// back after sign-in (nil: none).
func (c *Console) startLogin(w http.ResponseWriter, r *http.Request, next, keptPath string, kept map[string]string) {
	ctx, cancel := callCtx(r)
	defer cancel()
	p, err := c.signer.discover(ctx)
	if err != nil {
		c.log.WarnContext(r.Context(), "console.issuer_unreachable", "issuer", c.signer.cfg.Issuer, "error", err)
		c.refuse(w, r, http.StatusServiceUnavailable, "The sign-in service at "+c.signer.cfg.Issuer+
			" does not answer, so nobody can sign in right now. People already signed in keep working.")
		return
	}
	l := login{State: randText(), Nonce: randText(), Verifier: oauth2.GenerateVerifier(), Next: localPath(next),
		KeptPath: keptPath, Kept: kept, Expires: c.sessions.now().Add(loginLifetime).Unix()}
	b, _ := json.Marshal(l)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: c.sessions.seal(loginCookie, b), Path: "/auth/",
		MaxAge: int(loginLifetime / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(l.Verifier), oidc.Nonce(l.Nonce)}
	if c.signer.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", c.signer.cfg.Resource))
	}
	http.Redirect(w, r, c.signer.oauth(p).AuthCodeURL(l.State, opts...), http.StatusSeeOther)
}

// signInPage starts a sign-in from a link (GET /auth/signin?next=/inbox).
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.startLogin(w, r, r.URL.Query().Get("next"), "", nil)
}

// callback ends a sign-in: the state must be the one this browser's login
// cookie holds (a replayed or foreign one signs nobody in), the code is
// exchanged with the PKCE verifier, and the ID token must verify and
// carry the nonce. The session then holds the person's access token.
func (c *Console) callback(w http.ResponseWriter, r *http.Request) {
	l := c.readLogin(r)
	// The login is used once, whatever happens next.
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/auth/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	if l == nil || q.Get("state") == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(l.State)) != 1 {
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "state")
		c.refuse(w, r, http.StatusBadRequest, "This sign-in was not started by this browser (its state is unknown, foreign or already used), so nobody was signed in. Sign in again from the console.")
		return
	}
	if e := q.Get("error"); e != "" {
		c.log.InfoContext(r.Context(), "console.signin_refused", "reason", "issuer", "error", truncate(e, 64))
		c.refuse(w, r, http.StatusForbidden, "The sign-in service refused the sign-in ("+truncate(e, 64)+": "+truncate(q.Get("error_description"), 200)+"). Nobody was signed in.")
		return
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	ctx = oidc.ClientContext(ctx, c.signer.http)
	p, err := c.signer.discover(ctx)
	if err != nil {
		c.refuse(w, r, http.StatusServiceUnavailable, "The sign-in service at "+c.signer.cfg.Issuer+" does not answer; nobody was signed in.")
		return
	}
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(l.Verifier)}
	if c.signer.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", c.signer.cfg.Resource))
	}
	tok, err := c.signer.oauth(p).Exchange(ctx, q.Get("code"), opts...)
	if err != nil {
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "exchange", "error", err)
		c.refuse(w, r, http.StatusForbidden, "The sign-in service did not accept this sign-in's code, so nobody was signed in. Sign in again from the console.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.Verifier(&oidc.Config{ClientID: c.signer.cfg.ClientID}).Verify(ctx, raw)
	if err == nil && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.Nonce)) != 1 {
		err = errors.New("the ID token's nonce is not this sign-in's")
	}
	var claims struct {
		Roles []string `json:"roles"`
	}
	if err == nil {
		err = idt.Claims(&claims)
	}
	if err == nil && tok.AccessToken == "" {
		err = errors.New("no access token")
	}
	if err != nil {
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "id_token", "error", err)
		c.refuse(w, r, http.StatusForbidden, "The sign-in service's answer did not verify, so nobody was signed in.")
		return
	}
	s := c.sessions.start(person{Subject: idt.Subject, Owner: slices.Contains(claims.Roles, mesh.RoleOwner), token: tok.AccessToken})
	if !tok.Expiry.IsZero() && tok.Expiry.Unix() < s.Expires {
		// The edge refuses the token once it expires: so ends the session.
		s.Expires = tok.Expiry.Unix()
	}
	c.sessions.write(w, r, s)
	c.log.InfoContext(r.Context(), "console.signed_in", "subject", idt.Subject, "owner", s.Person.Owner)
	if l.KeptPath != "" {
		c.giveBack(w, r, s, l.KeptPath, l.Kept)
		return
	}
	// A page, not a redirect: the navigation to it must start on the
	// console's own page for the browser to send the SameSite=Strict
	// session cookie (a redirect would still count as the issuer's).
	c.execute(w, r, http.StatusOK, "error", "signedin", struct{ Next, Subject string }{l.Next, idt.Subject})
}

// signOut ends the person's session; the issuer's own sign-in (its
// session) is the issuer's to end, linked from the page.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	c.edge.forget(s.Person)
	c.log.InfoContext(r.Context(), "console.signed_out", "subject", s.Person.Subject)
	end := ""
	if c.signer != nil {
		c.signer.mu.Lock()
		end = c.signer.endOIDC
		c.signer.mu.Unlock()
	}
	c.execute(w, r, http.StatusOK, "error", "signedout", struct{ EndSession string }{end})
}

// readLogin opens the login cookie: nil when absent, foreign or expired.
func (c *Console) readLogin(r *http.Request) *login {
	ck, err := r.Cookie(loginCookie)
	if err != nil {
		return nil
	}
	b := c.sessions.open(loginCookie, ck.Value)
	var l login
	if b == nil || json.Unmarshal(b, &l) != nil || l.State == "" || l.Verifier == "" || c.sessions.now().Unix() >= l.Expires {
		return nil
	}
	return &l
}

// needSignIn answers a request without a session in sign-in mode: a page
// the person navigated to sends them to the issuer; a script's request
// gets 401.
func (c *Console) needSignIn(w http.ResponseWriter, r *http.Request) {
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" && mode != "navigate" {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	c.startLogin(w, r, r.URL.RequestURI(), "", nil)
}

// localPath is next when it is a path of this console, else /inbox: a
// sign-in never sends the browser elsewhere.
func localPath(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		u.Scheme != "" || u.Host != "" || strings.HasPrefix(u.Path, "/auth/") {
		return "/inbox"
	}
	return next
}

// keptFields are the fields of a form worth giving back after a sign-in.
var keptFields = []string{"answer", "reason", "confirm", "wallet", "amount", "reference", "note"}

// keep is what of r's form survives a sign-in.
func keep(r *http.Request) map[string]string {
	out := map[string]string{}
	for _, f := range keptFields {
		if v := r.PostForm.Get(f); v != "" {
			out[f] = truncate(v, 1000)
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func randText() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// errNoSignIn is returned by New for a non-loopback console without OIDC.
var errNoSignIn = fmt.Errorf("console: a console on a non-loopback address needs sign-in: configure the issuer (OpenID Connect)")
