package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/oidcsignin"
)

// OIDC signs people in with OpenID Connect (authorization code with PKCE)
// against the issuer the edge trusts. The console then calls the edge
// with each person's own access token, so the edge sees and judges that
// person exactly as it would an MCP client of theirs.
//
// Issuer is the edge's --issuer; ClientID and ClientSecret the console's
// registration there (no secret: a public client, protected by PKCE
// alone); RedirectURL the console's callback as browsers reach it
// (https://console.example.com/auth/callback); Resource the edge's
// canonical URI (its --resource), asked for as the access token's audience
// (RFC 8707); Scopes are asked for besides openid (the edge's toolmesh:…
// scopes).
type OIDC = oidcsignin.Config

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
	oidcsignin.Login
	// Next is the console path to show after sign-in.
	Next string `json:"nx"`
	// Kept is a form sent after the session ended: its path and fields,
	// given back after sign-in to send again.
	KeptPath string            `json:"kp,omitempty"`
	Kept     map[string]string `json:"kf,omitempty"`
	Expires  int64             `json:"exp"`
}

// startLogin sends the browser to the issuer, with a fresh state, nonce
// and PKCE verifier sealed in the login cookie; kept is a form to give
// back after sign-in (nil: none).
func (c *Console) startLogin(w http.ResponseWriter, r *http.Request, next, keptPath string, kept map[string]string) {
	ctx, cancel := callCtx(r)
	defer cancel()
	l := login{Login: oidcsignin.NewLogin(), Next: localPath(next), KeptPath: keptPath, Kept: kept, Expires: c.sessions.now().Add(loginLifetime).Unix()}
	to, err := c.signer.AuthURL(ctx, l.Login)
	if err != nil {
		c.log.WarnContext(r.Context(), "console.issuer_unreachable", "issuer", c.signer.Issuer(), "error", err)
		c.refuse(w, r, http.StatusServiceUnavailable, "The sign-in service at "+c.signer.Issuer()+
			" does not answer, so nobody can sign in right now. People already signed in keep working.")
		return
	}
	b, _ := json.Marshal(l)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: c.sessions.seal(loginCookie, b), Path: "/auth/",
		MaxAge: int(loginLifetime / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, to, http.StatusSeeOther)
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
	ctx, cancel := callCtx(r)
	defer cancel()
	var started *oidcsignin.Login
	if l != nil {
		started = &l.Login
	}
	who, err := c.signer.Finish(ctx, started, r.URL.Query())
	var refused *oidcsignin.IssuerError
	switch {
	case err == nil && who.AccessToken == "":
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "id_token", "error", "no access token")
		c.refuse(w, r, http.StatusForbidden, "The sign-in service's answer did not verify, so nobody was signed in.")
		return
	case err == nil:
	case errors.Is(err, oidcsignin.ErrState):
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "state")
		c.refuse(w, r, http.StatusBadRequest, "This sign-in was not started by this browser (its state is unknown, foreign or already used), so nobody was signed in. Sign in again from the console.")
		return
	case errors.As(err, &refused):
		c.log.InfoContext(r.Context(), "console.signin_refused", "reason", "issuer", "error", truncate(refused.Code, 64))
		c.refuse(w, r, http.StatusForbidden, "The sign-in service refused the sign-in ("+truncate(refused.Code, 64)+": "+truncate(refused.Description, 200)+"). Nobody was signed in.")
		return
	case errors.Is(err, oidcsignin.ErrUnreachable):
		c.refuse(w, r, http.StatusServiceUnavailable, "The sign-in service at "+c.signer.Issuer()+" does not answer; nobody was signed in.")
		return
	case errors.Is(err, oidcsignin.ErrExchange):
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "exchange", "error", err)
		c.refuse(w, r, http.StatusForbidden, "The sign-in service did not accept this sign-in's code, so nobody was signed in. Sign in again from the console.")
		return
	default:
		c.log.WarnContext(r.Context(), "console.signin_refused", "reason", "id_token", "error", err)
		c.refuse(w, r, http.StatusForbidden, "The sign-in service's answer did not verify, so nobody was signed in.")
		return
	}
	s := c.sessions.start(person{Subject: who.Subject, Owner: slices.Contains(who.Roles, mesh.RoleOwner), token: who.AccessToken})
	s.Refresh = who.RefreshToken
	if !who.Expiry.IsZero() {
		s.TokenExpires = who.Expiry.Unix()
		if s.Refresh == "" && s.TokenExpires < s.Expires {
			// The edge refuses the token once it expires and nothing
			// renews it: so ends the session.
			s.Expires = s.TokenExpires
		}
	}
	c.sessions.write(w, r, s)
	c.log.InfoContext(r.Context(), "console.signed_in", "subject", who.Subject, "owner", s.Person.Owner)
	if l.KeptPath != "" {
		c.giveBack(w, r, s, l.KeptPath, l.Kept)
		return
	}
	// A page, not a redirect: the navigation to it must start on the
	// console's own page for the browser to send the SameSite=Strict
	// session cookie (a redirect would still count as the issuer's).
	c.execute(w, r, http.StatusOK, "error", "signedin", struct{ Next, Subject string }{l.Next, who.Subject})
}

// refreshMargin is how long before its access token expires a session
// renews it: a page's calls to the edge must not meet an expired token.
const refreshMargin = time.Minute

// fresh is s with an access token the edge still takes: within
// refreshMargin of its expiry it is renewed with the session's refresh
// token and the cookie rewritten. It is nil when the token expired and
// could not be renewed (the person signs in again); a failed renewal of a
// token still valid keeps it.
func (c *Console) fresh(w http.ResponseWriter, r *http.Request, s *session) *session {
	if s == nil || c.signer == nil || s.TokenExpires == 0 || c.sessions.now().Add(refreshMargin).Unix() < s.TokenExpires {
		return s
	}
	expired := c.sessions.now().Unix() >= s.TokenExpires
	if s.Refresh == "" {
		if expired {
			return nil
		}
		return s
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	tok, err := c.signer.Refresh(ctx, s.Refresh)
	if err != nil {
		c.log.WarnContext(r.Context(), "console.token_refresh_failed", "subject", s.Subject, "expired", expired, "error", err)
		if expired {
			return nil
		}
		return s
	}
	s.Token, s.Person.token, s.Refresh = tok.AccessToken, tok.AccessToken, tok.RefreshToken
	s.TokenExpires = 0
	if !tok.Expiry.IsZero() {
		s.TokenExpires = tok.Expiry.Unix()
	}
	c.sessions.write(w, r, s)
	c.log.InfoContext(r.Context(), "console.token_refreshed", "subject", s.Subject)
	return s
}

// signOut ends the person's session; the issuer's own sign-in (its
// session) is the issuer's to end, linked from the page.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	c.edge.forget(s.Person)
	c.log.InfoContext(r.Context(), "console.signed_out", "subject", s.Person.Subject)
	end := ""
	if c.signer != nil {
		end = c.signer.EndSession()
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
	if b == nil || json.Unmarshal(b, &l) != nil || !l.Valid() || c.sessions.now().Unix() >= l.Expires {
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

// errNoSignIn is returned by New for a non-loopback console without OIDC.
var errNoSignIn = fmt.Errorf("console: a console on a non-loopback address needs sign-in: configure the issuer (OpenID Connect)")
