package github

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	gh "github.com/google/go-github/v88/github"
	"golang.org/x/oauth2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/oidcsignin"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
)

// LinkConfig is the link page: where the person behind a call that has no
// GitHub connection signs in, is checked to be the person the call acts
// for, and is sent to GitHub to authorize the app (OAuth 2.0 authorization
// code with PKCE S256); GitHub's callback stores the connection through the
// connections service. The github service holds the app's client secret.
type LinkConfig struct {
	// URL is the page as browsers reach it (TOOLMESH_GITHUB_LINK_URL). The
	// service serves it at its path, the sign-in callback at URL+"/signin"
	// and GitHub's callback at URL+"/callback" (the app's callback URL).
	URL string
	// ClientID and ClientSecret are the GitHub App's (or OAuth app's).
	ClientID, ClientSecret string
	// WebURL is GitHub's web address: https://github.com when empty, or a
	// GitHub Enterprise Server's (https://github.example.com).
	WebURL string
	// Scopes are asked of an OAuth app ("repo"); a GitHub App ignores them.
	Scopes []string
	// SignIn signs people in with OpenID Connect at the issuer the edge
	// trusts; its RedirectURL is URL+"/signin". Nil is development mode: a
	// visitor on loopback is the local owner, and no one else is served.
	SignIn *oidcsignin.Config
	// SignInHTTP reaches the issuer (http.DefaultClient when nil).
	SignInHTTP *http.Client
	// Key seals the page's tickets, states and cookies (seal.KeySize
	// bytes); every replica has the same one (the mesh key's seed).
	Key []byte
}

// Lifetimes of what the page hands out.
const (
	// ticketLifetime bounds how long a link a call answered stays good: no
	// longer than the call waits for it (the edge's request state, and so
	// the round a call asks the visit in, lasts toolcall.DefaultStateTTL).
	ticketLifetime = toolcall.DefaultStateTTL
	// stepLifetime bounds a sign-in, and an authorization at GitHub.
	stepLifetime = 10 * time.Minute
)

// devPerson is the person of development mode: the edge's local owner,
// whose calls carry the subject "local".
const devPerson = "local"

// Cookies of the page; each holds one step, sealed, and is used once.
const (
	signinCookie = "toolmesh_link_signin"
	oauthCookie  = "toolmesh_link_oauth"
)

// linkPage serves LinkConfig.
type linkPage struct {
	cfg    LinkConfig
	path   string // URL's path
	sealer *seal.Sealer
	signIn *oidcsignin.Client // nil in development mode
	oauth  oauth2.Config

	mu   sync.Mutex
	used map[string]time.Time // states already called back, until they expire
}

// ticket is what a link carries, sealed: the call's agent and person, the
// visit it answers and the call that asked (its idempotency key).
type ticket struct {
	Agent   string `json:"a"`
	Person  string `json:"p"`
	Visit   string `json:"v"`
	Call    string `json:"c,omitempty"`
	Expires int64  `json:"e"`
}

// oauthState is what travels through GitHub as the OAuth state, sealed: one
// authorization, for one person, agent, visit and call.
type oauthState struct {
	ID      string `json:"i"`
	Agent   string `json:"a"`
	Person  string `json:"p"`
	Visit   string `json:"v"`
	Call    string `json:"c,omitempty"`
	Expires int64  `json:"e"`
}

// signinStep is the sign-in cookie: the OpenID Connect login in progress
// and the ticket it signs in for.
type signinStep struct {
	Login   oidcsignin.Login `json:"l"`
	Ticket  ticket           `json:"t"`
	Expires int64            `json:"e"`
}

// oauthStep is the authorization cookie: which state this browser was
// sent to GitHub with, and its PKCE verifier.
type oauthStep struct {
	State    string `json:"s"`
	Agent    string `json:"a"`
	Person   string `json:"p"`
	Verifier string `json:"v"`
	Expires  int64  `json:"e"`
}

func newLinkPage(cfg LinkConfig) (*linkPage, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Path == "" || u.Path == "/" {
		return nil, fmt.Errorf("the link page URL %q must be http(s)://host/path, without a query", cfg.URL)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("the link page needs the GitHub app's client ID and client secret")
	}
	sealer, err := seal.New(cfg.Key, "toolmesh.github.v1 link")
	if err != nil {
		return nil, err
	}
	web := strings.TrimRight(cfg.WebURL, "/")
	if web == "" {
		web = "https://github.com"
	}
	web = strings.TrimSuffix(web, "/api/v3")
	p := &linkPage{cfg: cfg, path: strings.TrimRight(u.Path, "/"), sealer: sealer, used: map[string]time.Time{},
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: strings.TrimRight(cfg.URL, "/") + "/callback", Scopes: cfg.Scopes,
			Endpoint: oauth2.Endpoint{AuthURL: web + "/login/oauth/authorize", TokenURL: web + "/login/oauth/access_token", AuthStyle: oauth2.AuthStyleInParams}}}
	if cfg.SignIn != nil {
		sc := *cfg.SignIn
		if sc.Issuer == "" || sc.ClientID == "" {
			return nil, errors.New("the link page's sign-in needs the issuer and the page's client ID there")
		}
		sc.RedirectURL = strings.TrimRight(cfg.URL, "/") + "/signin"
		p.signIn = oidcsignin.New(sc, cfg.SignInHTTP)
	}
	return p, nil
}

// routes are the page's, served without a mesh token.
func (s *Service) linkRoutes() map[string]http.Handler {
	if s.link == nil {
		return nil
	}
	p := s.link.path
	return map[string]http.Handler{
		"GET " + p:               http.HandlerFunc(s.linkStart),
		"GET " + p + "/signin":   http.HandlerFunc(s.linkSignedIn),
		"GET " + p + "/callback": http.HandlerFunc(s.linkCallback),
	}
}

// linkURL is the link for agent's call (idempotency key call) made for
// person: the page, with a sealed ticket naming them and the visit.
func (s *Service) linkURL(agent, person, visit, call string) string {
	q := url.Values{"agent": {agent}, "provider": {"github"}}
	if s.link != nil {
		q.Set("t", s.link.seal("ticket", ticket{Agent: agent, Person: person, Visit: visit, Call: call, Expires: s.now().Add(ticketLifetime).Unix()}))
		return s.link.cfg.URL + "?" + q.Encode()
	}
	return s.conns.LinkURL + "?" + q.Encode()
}

func (p *linkPage) seal(what string, v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(p.sealer.Seal(b, []byte(what)))
}

// open opens what seal sealed as what into v; false when it does not open.
func (p *linkPage) open(what, s string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 8192 {
		return false
	}
	b, err := p.sealer.Open(raw, []byte(what))
	return err == nil && json.Unmarshal(b, v) == nil
}

// linkStart opens a link: the ticket must open and be current; the person
// then signs in (development mode: the local owner on loopback).
func (s *Service) linkStart(w http.ResponseWriter, r *http.Request) {
	var t ticket
	if !s.link.open("ticket", r.URL.Query().Get("t"), &t) || s.now().Unix() >= t.Expires || t.Agent != r.URL.Query().Get("agent") {
		s.linkRefuse(w, r, http.StatusBadRequest, "ticket", "", "This link is not one the mesh gave, or it has expired. Call the tool again for a new link; nothing was linked.")
		return
	}
	if s.link.signIn == nil {
		if !loopbackVisitor(r) {
			s.linkRefuse(w, r, http.StatusForbidden, "not_loopback", t.Agent, "Without sign-in configured, only the local owner, on this machine, can link an account. Nothing was linked.")
			return
		}
		s.linkAs(w, r, t, devPerson)
		return
	}
	step := signinStep{Login: oidcsignin.NewLogin(), Ticket: t, Expires: s.now().Add(stepLifetime).Unix()}
	to, err := s.link.signIn.AuthURL(r.Context(), step.Login)
	if err != nil {
		s.log.WarnContext(r.Context(), "github.link_issuer_unreachable", "issuer", s.link.signIn.Issuer(), "error", err.Error())
		s.linkRefuse(w, r, http.StatusServiceUnavailable, "issuer", t.Agent, "The sign-in service does not answer, so nobody can link an account right now. Try the link again later.")
		return
	}
	s.link.setCookie(w, r, signinCookie, s.link.seal(signinCookie, step))
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// linkSignedIn ends the sign-in the link started, then goes on as the
// person who signed in.
func (s *Service) linkSignedIn(w http.ResponseWriter, r *http.Request) {
	var step signinStep
	ok := s.link.readCookie(w, r, signinCookie, &step) && s.now().Unix() < step.Expires
	var login *oidcsignin.Login
	if ok {
		login = &step.Login
	}
	who, err := s.link.signIn.Finish(r.Context(), login, r.URL.Query())
	if err != nil {
		s.log.WarnContext(r.Context(), "github.link_refused", "reason", "signin", "agent", step.Ticket.Agent, "error", err.Error())
		s.linkRefuse(w, r, http.StatusForbidden, "", "", "The sign-in did not complete (it was not started by this browser, is already used, or the sign-in service refused it). Open the link again; nothing was linked.")
		return
	}
	s.linkAs(w, r, step.Ticket, who.Subject)
}

// linkAs goes on with the link t as person: only the person t's call acts
// for is sent to GitHub, with a fresh state and PKCE verifier.
func (s *Service) linkAs(w http.ResponseWriter, r *http.Request, t ticket, person string) {
	if t.Person == "" || subtle.ConstantTimeCompare([]byte(person), []byte(t.Person)) != 1 {
		s.log.WarnContext(r.Context(), "github.link_refused", "reason", "person", "agent", t.Agent, "signed_in", person)
		s.linkRefuse(w, r, http.StatusForbidden, "", "", "You are signed in as "+person+", but this link is for the person agent "+t.Agent+
			"'s call acts for. Only that person can link the agent's GitHub account; nothing was linked.")
		return
	}
	st := oauthState{ID: oidcsignin.RandText(), Agent: t.Agent, Person: person, Visit: t.Visit, Call: t.Call, Expires: min(s.now().Add(stepLifetime).Unix(), t.Expires)}
	step := oauthStep{State: st.ID, Agent: st.Agent, Person: person, Verifier: oauth2.GenerateVerifier(), Expires: st.Expires}
	s.link.setCookie(w, r, oauthCookie, s.link.seal(oauthCookie, step))
	http.Redirect(w, r, s.link.oauth.AuthCodeURL(s.link.seal("state", st), oauth2.S256ChallengeOption(step.Verifier)), http.StatusSeeOther)
}

// linkCallback is GitHub's answer: the state must open, be current, never
// used, and be the one this browser was sent with (for the same person
// and agent); the code is then exchanged with the PKCE verifier and the
// connection stored. Anything else stores nothing.
func (s *Service) linkCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var st oauthState
	var step oauthStep
	hasStep := s.link.readCookie(w, r, oauthCookie, &step)
	switch {
	case !s.link.open("state", q.Get("state"), &st):
		s.linkRefuse(w, r, http.StatusBadRequest, "state", "", "This answer from GitHub carries no state the mesh gave; nothing was linked.")
		return
	case s.now().Unix() >= st.Expires:
		s.linkRefuse(w, r, http.StatusBadRequest, "expired", st.Agent, "This authorization took too long and expired; open the link again. Nothing was linked.")
		return
	case !hasStep || s.now().Unix() >= step.Expires || subtle.ConstantTimeCompare([]byte(step.State), []byte(st.ID)) != 1 ||
		step.Agent != st.Agent || step.Person != st.Person:
		s.linkRefuse(w, r, http.StatusBadRequest, "foreign", st.Agent, "This answer from GitHub was not for a link this browser started (or it was already used); nothing was linked.")
		return
	case !s.link.use(st.ID, time.Unix(st.Expires, 0), s.now()):
		s.linkRefuse(w, r, http.StatusBadRequest, "replayed", st.Agent, "This answer from GitHub was already used; nothing more was linked.")
		return
	case q.Get("error") != "":
		s.linkRefuse(w, r, http.StatusForbidden, "github", st.Agent, "GitHub did not authorize the app ("+truncate(q.Get("error"), 64)+"); nothing was linked.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	tok, err := s.link.oauth.Exchange(context.WithValue(ctx, oauth2.HTTPClient, s.http), q.Get("code"), oauth2.VerifierOption(step.Verifier))
	if err != nil {
		// Never the error's body: it may echo what was sent.
		reason := "exchange"
		if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok {
			reason = "exchange " + truncate(re.ErrorCode, 64)
		}
		s.linkRefuse(w, r, http.StatusBadGateway, reason, st.Agent, "GitHub did not exchange the authorization code; open the link again. Nothing was linked.")
		return
	}
	gc, err := s.newGitHubClient(tok.AccessToken)
	var login string
	if err == nil {
		user, _, uerr := gc.Users.Get(ctx, "")
		err = uerr
		login = user.GetLogin()
	}
	if err != nil || login == "" {
		s.revokeUnlinked(ctx, st.Agent, tok.AccessToken)
		s.linkRefuse(w, r, http.StatusBadGateway, "account", st.Agent, "GitHub did not say which account was authorized; open the link again. Nothing was linked.")
		return
	}
	req := &connectionsv1.StoreConnectionRequest{Agent: st.Agent, Provider: connectionsv1.Provider_PROVIDER_GITHUB, Account: login,
		Scopes: grantedScopes(tok), AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, CallKey: st.Call}
	if !tok.Expiry.IsZero() {
		req.ExpireTime = timestamppb.New(tok.Expiry)
	}
	res, err := s.conns.Client.StoreConnection(mesh.WithCall(ctx, mesh.Call{Caller: s.conns.Self}), req)
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		// The call that asked for this link is over: nothing binds to it.
		s.revokeUnlinked(ctx, st.Agent, tok.AccessToken)
		s.linkRefuse(w, r, http.StatusGone, "call_ended", st.Agent, "The request that asked for this link was cancelled or has expired, so nothing was linked. "+
			"Call the tool again from your client if agent "+st.Agent+" should act on GitHub.")
		return
	}
	if err != nil {
		s.log.ErrorContext(ctx, "github.link_store", "agent", st.Agent, "error", err.Error())
		s.revokeUnlinked(ctx, st.Agent, tok.AccessToken)
		s.linkRefuse(w, r, http.StatusServiceUnavailable, "store", st.Agent, "The mesh could not store the link right now; open the link again. Nothing was linked.")
		return
	}
	s.log.InfoContext(ctx, "github.linked", "agent", st.Agent, "person", st.Person, "account", login, "connection", res.GetConnection().GetId(), "visit", st.Visit)
	writePage(w, http.StatusOK, "Linked", "Agent "+st.Agent+" now acts on GitHub as "+login+". Return to your client: the call that asked goes on.")
}

// revokeUnlinked revokes at GitHub a token the callback obtained but no
// connection holds (the link failed after the code was exchanged), so no
// live token is left behind that nothing can revoke later. Best effort: a
// GitHub that does not answer leaves it, logged.
func (s *Service) revokeUnlinked(ctx context.Context, agent, token string) {
	// Revoking is the app's call: its client ID and secret, not the token.
	tr := &gh.BasicAuthTransport{Username: s.link.oauth.ClientID, Password: s.link.oauth.ClientSecret, Transport: s.http.Transport}
	c, err := s.githubClientOn(&http.Client{Transport: tr, Timeout: s.http.Timeout})
	if err == nil {
		_, err = c.Authorizations.Revoke(ctx, s.link.oauth.ClientID, token)
	}
	if err != nil {
		s.log.WarnContext(ctx, "github.link_revoke_failed", "agent", agent, "error", err.Error())
		return
	}
	s.log.InfoContext(ctx, "github.link_token_revoked", "agent", agent)
}

// grantedScopes are the scopes GitHub granted ("repo,gist"; none for a
// GitHub App).
func grantedScopes(tok *oauth2.Token) []string {
	s, _ := tok.Extra("scope").(string)
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// use marks state id used until exp; false when it already was.
func (p *linkPage) use(id string, exp, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.used {
		if !now.Before(e) {
			delete(p.used, k)
		}
	}
	if _, ok := p.used[id]; ok {
		return false
	}
	p.used[id] = exp
	return true
}

// setCookie sets a step cookie: HttpOnly, SameSite=Lax (the way back from
// the issuer and from GitHub is a cross-site navigation), under the page's
// path.
func (p *linkPage) setCookie(w http.ResponseWriter, r *http.Request, name, value string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: p.path, MaxAge: int(stepLifetime / time.Second),
		HttpOnly: true, Secure: r.TLS != nil || strings.HasPrefix(p.cfg.URL, "https:"), SameSite: http.SameSiteLaxMode})
}

// readCookie opens the step cookie name into v and deletes it: a step is
// used once, whatever happens next.
func (p *linkPage) readCookie(w http.ResponseWriter, r *http.Request, name string, v any) bool {
	ck, err := r.Cookie(name)
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: p.path, MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil || strings.HasPrefix(p.cfg.URL, "https:"), SameSite: http.SameSiteLaxMode})
	return err == nil && p.open(name, ck.Value, v)
}

// loopbackVisitor reports whether r comes from this machine, to a loopback
// host name (not a name that merely resolves there: DNS rebinding).
func loopbackVisitor(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	name := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		name = h
	}
	hostIP := net.ParseIP(name)
	return ip != nil && ip.IsLoopback() && (name == "localhost" || hostIP != nil && hostIP.IsLoopback())
}

// linkRefuse answers a link step that binds nothing: a plain page saying
// why, and a log line (reason "" when the caller logged already).
func (s *Service) linkRefuse(w http.ResponseWriter, r *http.Request, status int, reason, agent, text string) {
	if reason != "" {
		s.log.WarnContext(r.Context(), "github.link_refused", "reason", reason, "agent", agent)
	}
	writePage(w, status, "Nothing was linked", text)
}

// writePage answers a plain page: no script, no framing, not cached.
func writePage(w http.ResponseWriter, status int, title, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = linkPages.ExecuteTemplate(w, "page", pageData{Title: title, Text: text})
}

type pageData struct{ Title, Text string }

// linkPages is the page's one template: plain HTML, no script.
var linkPages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>{{.Title}} · toolmesh</title></head>
<body><main><h1>{{.Title}}</h1><p id="message">{{.Text}}</p></main></body></html>
`))

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
