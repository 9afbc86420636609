// Package console is the web console of the people who answer for the
// agents: the owner's inbox of pending asks, and later the operator's
// pages. It is a stateless process and a client of the edge: every read
// and every change is a tool call through the edge's one pipeline, made
// with the signed-in person's own credentials, so grants, the admin
// confirmation, limits and the audit record apply exactly as they do to
// any MCP caller. It holds no mesh key and reads no store.
//
// Pages are HTML rendered on the server from embedded templates; every
// action is a plain form (POST, a CSRF token, a redirect after), so the
// console works without JavaScript. One small script only keeps the inbox
// live: the console polls the pending asks once per process and tells the
// browsers over server-sent events when they changed; each browser then
// fetches its own view.
//
//	c, err := console.New(console.Config{Addr: "127.0.0.1:7180", EdgeURL: "http://127.0.0.1:7100/mcp", SessionKey: key})
//	...
//	http.Serve(lis, c.Handler())
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/internal/oidcsignin"
)

// Defaults of Config.
const (
	DefaultSessionTTL   = 12 * time.Hour
	DefaultPollInterval = time.Second
	// DefaultPageSize is how many asks an inbox page shows.
	DefaultPageSize = 20
)

// Config is what a console needs.
type Config struct {
	// Addr is the address the console listens on: a loopback address
	// serves the local owner without sign-in (development mode).
	Addr string
	// EdgeURL is the edge's MCP endpoint, e.g. http://127.0.0.1:7100/mcp.
	EdgeURL string
	// AllowedHosts are Host header values the console answers to besides
	// loopback names on loopback (the DNS-rebinding guard of the edge).
	AllowedHosts []string
	// SessionKey signs and seals the session cookies (at least 32 bytes);
	// every replica of the console holds the same.
	SessionKey []byte
	// SessionTTL is how long a sign-in lasts (DefaultSessionTTL when 0).
	SessionTTL time.Duration
	// PollInterval is how often the console reads the pending asks while
	// a browser listens for changes (DefaultPollInterval when 0).
	PollInterval time.Duration
	// MeshStatusURL is the status page of the mesh's supervisor (up's
	// /status.json) the mesh page shows; none when empty.
	MeshStatusURL string
	// TemporalUIURL is the Temporal Web UI's address
	// (http://127.0.0.1:8233); the runs pages link each run to its workflow
	// there. No links when empty.
	TemporalUIURL string
	// PageSize is how many asks an inbox page shows (DefaultPageSize when 0).
	PageSize int
	// HTTPClient reaches the edge (http.DefaultClient when nil).
	HTTPClient *http.Client
	// OIDC signs people in against the issuer the edge trusts; without it
	// the console serves only the local owner and only on loopback
	// (development mode).
	OIDC *OIDC
	// Log receives the console's events.
	Log *slog.Logger
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the console's pages.
type Console struct {
	cfg      Config
	log      *slog.Logger
	guard    *httpguard.Guard
	edge     *edgeClient
	sessions *sessions
	signer   *oidcsignin.Client // nil in development mode
	live     *hub
	pages    map[string]*template.Template
	// formsURL is where the edge serves the owner's forms.
	formsURL string
}

// New checks cfg and builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.SessionTTL < 0 || cfg.PollInterval < 0 || cfg.PageSize < 0 || cfg.PageSize > 200 {
		return nil, errors.New("console: session lifetime and poll interval must be positive, the page size 1 to 200")
	}
	if t := cfg.TemporalUIURL; t != "" {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("console: Temporal UI URL %q is not http(s)://host", t)
		}
	}
	u, err := url.Parse(cfg.EdgeURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("console: edge URL %q is not http(s)://host/path", cfg.EdgeURL)
	}
	g, err := httpguard.New(httpguard.Config{Addr: cfg.Addr, AllowedHosts: cfg.AllowedHosts, Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("console: %s", strings.TrimPrefix(err.Error(), "edge: "))
	}
	if !g.BindLoopback() && cfg.OIDC == nil {
		return nil, errNoSignIn
	}
	s, err := newSessions(cfg.SessionKey, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Log, guard: g, sessions: s, edge: newEdgeClient(cfg.EdgeURL, cfg.HTTPClient),
		formsURL: u.Scheme + "://" + u.Host + ownerFormsPath}
	if o := cfg.OIDC; o != nil {
		if o.Issuer == "" || o.ClientID == "" {
			return nil, errors.New("console: sign-in needs the issuer and the console's client id")
		}
		if u, err := url.Parse(o.RedirectURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != callbackPath {
			return nil, fmt.Errorf("console: the sign-in redirect URL %q must be http(s)://<the console's host>%s", o.RedirectURL, callbackPath)
		}
		c.signer = oidcsignin.New(*o, cfg.HTTPClient)
	}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.live = newHub(cfg.PollInterval, c.pendingDigest, cfg.Log)
	return c, nil
}

// Close ends the console's edge sessions.
func (c *Console) Close() { c.edge.close() }

// Handler serves the console: its pages, /static/, /events and /healthz.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", httpguard.Healthz)
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	// No icon: an empty answer, not a 404 a browser logs as an error.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.Handle("GET /{$}", http.RedirectHandler("/inbox", http.StatusSeeOther))
	mux.Handle("GET /inbox", c.page(c.inbox))
	mux.Handle("GET /inbox/list", c.page(c.inboxList))
	mux.Handle("POST /asks/{id}/answer", c.change(c.answer))
	mux.Handle("POST /schedules/{id}/{decision}", c.change(c.decideSchedule))
	mux.Handle("GET /events", c.page(c.events))
	mux.Handle("GET /agents", c.page(c.agents))
	mux.Handle("GET /credits", c.page(c.credits))
	mux.Handle("POST /credits/grant", c.change(c.grant))
	mux.Handle("GET /connections", c.page(c.connections))
	mux.Handle("POST /connections/link", c.change(c.linkToken))
	mux.Handle("POST /connections/{id}/unlink", c.change(c.unlink))
	mux.Handle("GET /audit", c.page(c.audit))
	mux.Handle("GET /mesh", c.page(c.mesh))
	mux.Handle("GET /runs", c.page(c.runs))
	mux.Handle("GET /runs/{id}", c.page(c.runPage))
	mux.Handle("POST /runs/{id}/cancel", c.change(c.cancelRun))
	mux.Handle("GET /invocations", c.page(c.invocations))
	if c.signer != nil {
		mux.HandleFunc("GET "+signInPath, c.signInPage)
		mux.HandleFunc("GET "+callbackPath, c.callback)
		mux.Handle("POST "+signOutPath, c.change(c.signOut))
	}
	return httpguard.RecoverPanics(c.log, c.guarded(mux))
}

// person is who a request acts for: the signed-in person, whose
// credentials the edge sees.
type person struct {
	// Subject names the person as the edge does ("local" for the local
	// owner of development mode).
	Subject string
	// Owner reports whether the person has the owner role.
	Owner bool
	// token is the person's access token for the edge ("" in development
	// mode, where the edge takes loopback callers as the local owner).
	token string
}

// localOwner is the person of development mode.
var localOwner = person{Subject: "local", Owner: true}

// guarded applies the checks every request passes: the Host allowlist
// (DNS rebinding), a same-origin Origin, and the security headers.
func (c *Console) guarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: under no-referrer a browser sends
		// "Origin: null" with the console's own forms.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !c.guard.HostAllowed(r) {
			c.log.WarnContext(r.Context(), "console.request_rejected", "reason", "host", "host", httpguard.Truncate(r.Host, 200))
			c.refuse(w, r, http.StatusForbidden, "This console does not answer to the host "+httpguard.Truncate(r.Host, 200)+".")
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
			c.log.WarnContext(r.Context(), "console.request_rejected", "reason", "origin", "origin", httpguard.Truncate(o, 200))
			c.refuse(w, r, http.StatusForbidden, "A page of another site ("+httpguard.Truncate(o, 200)+") may not use this console.")
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); r.Method != http.MethodGet && site != "" && site != "same-origin" && site != "none" {
			c.log.WarnContext(r.Context(), "console.request_rejected", "reason", "fetch_site", "site", httpguard.Truncate(site, 40))
			c.refuse(w, r, http.StatusForbidden, "A change must come from a page of this console.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy lets a page load only the console's own script and
// style, connect only to the console, and be framed by nobody.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// sameOrigin reports whether origin is the console's own: the scheme and
// Host of the request. A page of any other origin — another port on the
// same machine included — is foreign.
func sameOrigin(origin string, r *http.Request) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(origin, scheme+"://"+r.Host)
}

// page serves a read: the request's person from its session (signing the
// local owner in when there is none).
func (c *Console) page(h func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := c.fresh(w, r, c.sessions.read(r))
		if s == nil && c.signer != nil {
			c.needSignIn(w, r)
			return
		}
		if s == nil {
			s = c.signIn(w, r)
		}
		h(w, r, s)
	})
}

// change serves a form submission: it needs a live session and its CSRF
// token. When the session expired meanwhile, the person is signed in
// again and gets the form back with what they typed, to send again.
func (c *Console) change(h func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		s := c.fresh(w, r, c.sessions.read(r))
		if s == nil && c.signer != nil {
			// Signed in again at the issuer, the person gets the form
			// back with what they typed.
			c.startLogin(w, r, "/inbox", r.URL.Path, keep(r))
			return
		}
		if s == nil {
			s = c.signIn(w, r)
			c.log.InfoContext(r.Context(), "console.session_renewed", "path", r.URL.Path)
			c.giveBack(w, r, s, r.URL.Path, keep(r))
			return
		}
		if !c.sessions.csrfValid(s, r.PostForm.Get("csrf")) {
			c.log.WarnContext(r.Context(), "console.request_rejected", "reason", "csrf", "path", r.URL.Path)
			c.refuse(w, r, http.StatusForbidden, "The form was not sent from this console's page (its CSRF token is missing or foreign). Nothing changed.")
			return
		}
		h(w, r, s)
	})
}

// signIn starts a session for the local owner (development mode).
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) *session {
	s := c.sessions.start(localOwner)
	c.sessions.write(w, r, s)
	return s
}

// callCtx bounds one call to the edge made for a request.
func callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
