package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/console"
	"github.com/toolmesh/toolmesh/internal/testsupport/oidctest"
)

// bearers records the Authorization headers the edge receives.
type bearers struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *bearers) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen[r.Header.Get("Authorization")] = true
		b.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (b *bearers) saw(h string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[h]
}

// signInConsole serves a console that signs people in at p, in front of
// a fake edge whose received credentials it returns.
func signInConsole(t *testing.T, p *oidctest.Provider, edge *fakeEdge) (string, *bearers) {
	t.Helper()
	seen := &bearers{seen: map[string]bool{}}
	edgeURL := edge.serve(t)
	u, _ := url.Parse(edgeURL)
	proxy := httptest.NewServer(seen.wrap(&httpProxy{target: u}))
	t.Cleanup(proxy.Close)
	lis := httptest.NewUnstartedServer(nil)
	base := "http://" + lis.Listener.Addr().String()
	c, err := console.New(console.Config{Addr: lis.Listener.Addr().String(), EdgeURL: proxy.URL + "/mcp",
		SessionKey: []byte(strings.Repeat("k", 32)), PollInterval: 5 * time.Millisecond,
		OIDC: &console.OIDC{Issuer: p.URL, ClientID: p.ClientID, RedirectURL: base + "/auth/callback", Resource: "http://edge.test/mcp",
			Scopes: []string{"toolmesh:read"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	lis.Config.Handler = c.Handler()
	lis.Start()
	t.Cleanup(lis.Close)
	return base, seen
}

// httpProxy passes requests on to target unchanged.
type httpProxy struct{ target *url.URL }

func (h *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.RequestURI = h.target.Scheme, h.target.Host, ""
	res, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// toIssuer follows the console's redirect to the issuer and returns the
// callback URL the issuer sends the browser back to.
func toIssuer(t *testing.T, b *http.Client, base, path string, tamper func(q url.Values)) string {
	t.Helper()
	status, _, h := get(t, b, base+path)
	if status != http.StatusSeeOther {
		t.Fatalf("GET %s without a session = %d, want a redirect to the issuer", path, status)
	}
	auth, _ := url.Parse(h.Get("Location"))
	q := auth.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Fatalf("the authorization request %s lacks PKCE S256, a nonce or a state", auth)
	}
	if tamper != nil {
		tamper(q)
		auth.RawQuery = q.Encode()
	}
	status, _, h = get(t, b, auth.String())
	if status != http.StatusFound {
		t.Fatalf("the issuer answered %d", status)
	}
	return h.Get("Location")
}

func hasSession(b *http.Client, base string) bool {
	for _, c := range b.Jar.Cookies(mustURL(base)) {
		if c.Name == "toolmesh_console" {
			return true
		}
	}
	return false
}

func TestSignInWithOpenIDConnect(t *testing.T) {
	p := oidctest.Start(t, "console")
	p.SignInAs("olivia", "toolmesh:read toolmesh:write", "owner")
	edge := &fakeEdge{}
	edge.add(askID, "Ship the release?", "Ship it", "Hold")
	base, seen := signInConsole(t, p, edge)
	b := browser(t)

	back := toIssuer(t, b, base, "/inbox", nil)
	status, page, _ := get(t, b, back)
	if status != http.StatusOK || !strings.Contains(page, "Signed in as olivia") || !strings.Contains(page, `url=/inbox`) {
		t.Fatalf("the callback = %d:\n%s", status, page)
	}
	status, page, _ = get(t, b, base+"/inbox")
	if status != http.StatusOK || !strings.Contains(page, `id="who">olivia</strong> (owner)`) || !strings.Contains(page, "Ship the release?") {
		t.Fatalf("the inbox after sign-in = %d:\n%s", status, page)
	}
	if strings.Contains(page, "eyJ") {
		t.Error("the page shows a token")
	}
	var token string
	for h := range seen.seen {
		if strings.HasPrefix(h, "Bearer ") {
			token = h
		}
	}
	if token == "" || seen.saw("") {
		t.Fatalf("the edge got credentials %v, want only olivia's bearer token", seen.seen)
	}

	// The callback again (a replayed state) signs nobody in.
	fresh := browser(t)
	if status, page, _ := get(t, b, back); status != http.StatusBadRequest || !strings.Contains(page, "nobody was signed in") {
		t.Errorf("a replayed callback = %d:\n%s", status, page)
	}
	// A callback this browser did not start (a foreign state) neither.
	other := toIssuer(t, b, base, "/auth/signin?next=/inbox", nil)
	if status, page, _ := get(t, fresh, other); status != http.StatusBadRequest || !strings.Contains(page, "nobody was signed in") || hasSession(fresh, base) {
		t.Errorf("a foreign callback = %d (session %v):\n%s", status, hasSession(fresh, base), page)
	}
	if got := p.Exchanges(); len(got) != 1 {
		t.Errorf("the token endpoint was asked %q, want one exchange (the refused callbacks spend no code)", got)
	}

	// Sign-out ends the session: the inbox sends the browser to the issuer.
	_, page, _ = get(t, b, base+"/inbox")
	status, page, _ = post(t, b, base+"/auth/signout", url.Values{"csrf": {csrfOf(t, page)}}, base)
	if status != http.StatusOK || !strings.Contains(page, "signed out") || hasSession(b, base) {
		t.Errorf("sign-out = %d (session %v):\n%s", status, hasSession(b, base), page)
	}
	if status, _, _ := get(t, b, base+"/inbox"); status != http.StatusSeeOther {
		t.Errorf("the inbox after sign-out = %d, want a redirect to the issuer", status)
	}
}

// A sign-in outlives its access token: near its expiry (within a minute)
// the console renews it with the issuer's refresh token, and the person's
// pages go on with the new one. When the issuer refuses the refresh, a
// token still valid is kept.
func TestASessionOutlivesItsAccessToken(t *testing.T) {
	p := oidctest.Start(t, "console")
	p.SignInAs("olivia", "toolmesh:read toolmesh:write", "owner")
	p.SetAccessLifetime(30 * time.Second) // inside the console's margin: every page renews it
	edge := &fakeEdge{}
	edge.add(askID, "Ship the release?", "Ship it", "Hold")
	base, seen := signInConsole(t, p, edge)
	b := browser(t)
	if status, page, _ := get(t, b, toIssuer(t, b, base, "/inbox", nil)); status != http.StatusOK {
		t.Fatalf("the callback = %d:\n%s", status, page)
	}
	bearers := func() int {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		n := 0
		for h := range seen.seen {
			if strings.HasPrefix(h, "Bearer ") {
				n++
			}
		}
		return n
	}
	for range 2 {
		if status, page, _ := get(t, b, base+"/inbox"); status != http.StatusOK || !strings.Contains(page, "Ship the release?") {
			t.Fatalf("the inbox = %d:\n%s", status, page)
		}
	}
	if got := p.Exchanges(); !slices.Equal(got, []string{"issued", "refreshed", "refreshed"}) {
		t.Fatalf("the token endpoint answered %q, want the sign-in's code and one refresh per page", got)
	}
	if n := bearers(); n != 2 {
		t.Errorf("the edge saw %d access tokens, want the two renewed ones (one per page)", n)
	}

	p.RevokeRefreshTokens()
	if status, page, _ := get(t, b, base+"/inbox"); status != http.StatusOK || !strings.Contains(page, "Ship the release?") {
		t.Fatalf("the inbox with the refresh refused and the token still valid = %d:\n%s", status, page)
	}
	if got := p.Exchanges(); got[len(got)-1] != "invalid_grant" || bearers() != 2 {
		t.Errorf("after the refused refresh the token endpoint answered %q and the edge saw %d tokens, want invalid_grant and the last token kept", got, bearers())
	}
}

// TestPKCEIsBound: an authorization request without the console's PKCE
// challenge, or with another, signs nobody in.
func TestPKCEIsBound(t *testing.T) {
	p := oidctest.Start(t, "console")
	p.SignInAs("mallory", "toolmesh:read", "owner")
	base, _ := signInConsole(t, p, &fakeEdge{})
	for name, tamper := range map[string]func(url.Values){
		"no challenge":      func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") },
		"another challenge": func(q url.Values) { q.Set("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") },
	} {
		b := browser(t)
		back := toIssuer(t, b, base, "/inbox", tamper)
		status, page, _ := get(t, b, back)
		if status < 400 || !strings.Contains(page, "obody was signed in") || hasSession(b, base) {
			t.Errorf("%s: the callback = %d (session %v):\n%s", name, status, hasSession(b, base), page)
		}
	}
	if got := p.Exchanges(); len(got) != 1 || got[0] != "invalid_grant" {
		t.Errorf("the token endpoint answered %q, want one refused exchange (the other never got a code)", got)
	}
}

// TestAnExpiredSignInKeepsTheForm: an answer sent after the session ended
// goes through the issuer and comes back typed, not sent.
func TestAnExpiredSignInKeepsTheForm(t *testing.T) {
	p := oidctest.Start(t, "console")
	p.SignInAs("olivia", "toolmesh:read toolmesh:write", "owner")
	edge := &fakeEdge{}
	edge.add(askID, "Why the delay?")
	base, _ := signInConsole(t, p, edge)
	b := browser(t)
	req, _ := http.NewRequest(http.MethodPost, base+"/asks/"+askID+"/answer", strings.NewReader(url.Values{"csrf": {"x"}, "answer": {"The vendor is late"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("an answer without a session = %d, want a redirect to the issuer", res.StatusCode)
	}
	status, _, h := get(t, b, res.Header.Get("Location"))
	if status != http.StatusFound {
		t.Fatalf("the issuer answered %d", status)
	}
	status, page, _ := get(t, b, h.Get("Location"))
	if status != http.StatusUnauthorized || !strings.Contains(page, "The vendor is late") || !strings.Contains(page, "nothing was sent") {
		t.Errorf("after signing in again = %d:\n%s", status, page)
	}
	if got := edge.answered(); len(got) != 0 {
		t.Errorf("the edge got answers %q, want none", got)
	}
}

func TestANonLoopbackConsoleNeedsAnIssuer(t *testing.T) {
	cfg := console.Config{Addr: "0.0.0.0:7180", EdgeURL: "http://edge:7100/mcp", AllowedHosts: []string{"console.example.com"}, SessionKey: []byte(strings.Repeat("k", 32))}
	if _, err := console.New(cfg); err == nil || !strings.Contains(err.Error(), "issuer") {
		t.Errorf("New without an issuer on 0.0.0.0 = %v, want a refusal naming the issuer", err)
	}
	cfg.OIDC = &console.OIDC{Issuer: "https://id.example.com", ClientID: "console", RedirectURL: "https://console.example.com/auth/callback"}
	c, err := console.New(cfg)
	if err != nil {
		t.Fatalf("New with an issuer on 0.0.0.0: %v", err)
	}
	c.Close()
}
