package main

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/oidctest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// signInMesh is an edge that trusts a test OpenID provider and a console
// that signs people in there, both in front of the services of the
// `toolmesh up` the console tests share.
type signInMesh struct {
	issuer  *oidctest.Provider
	edgeURL string
	// url is the console's, on localhost: another site than the issuer's
	// 127.0.0.1, as a real issuer is.
	url string
}

// consoleClientID is the console's registration at the test issuer.
const consoleClientID = "toolmesh-console"

// startSignIn starts the edge and the console of a signInMesh: olivia is
// an owner, ada an admin without the owner role; each is a registered
// agent and holds the grants file's owner_answer grant, so that what
// refuses ada is the owner service's rule, as for any MCP caller.
func startSignIn(t *testing.T, bin string, c *consoleMesh) *signInMesh {
	t.Helper()
	for _, who := range []string{"olivia", "ada"} {
		okData(t, callTool(t, c.agent, "agents_register", map[string]any{"agent_id": who, "display_name": who,
			"confirm": true, "reason": "a person who signs in to the console"}), &map[string]any{})
	}
	s := &signInMesh{issuer: oidctest.Start(t, consoleClientID)}
	dir := t.TempDir()
	jwks := writeFile(t, dir, "jwks.json", string(s.issuer.JWKS()))
	grants := writeFile(t, dir, "grants.yaml", `subjects:
  olivia:
    tools: [owner_answer, schedules_approve, schedules_deny, credits_grant]
  ada:
    tools: [owner_answer, credits_grant]
`)
	edgeAddr := porttest.Addr(t)
	args := []string{"edge", "--addr", edgeAddr, "--data", c.up.Data, "--metrics-addr", "off", "--issuer", s.issuer.URL, "--jwks-file", jwks, "--grants-file", grants}
	for _, d := range []string{"owner", "schedules", "tasks", "agents", "reputation", "audit", "credits"} {
		args = append(args, "--service", d+"="+c.up.Link(t, d))
	}
	startBin(t, bin, "http://"+edgeAddr+"/healthz", args...)
	s.edgeURL = "http://" + edgeAddr + "/mcp"
	consoleAddr := porttest.Addr(t)
	_, port, _ := strings.Cut(consoleAddr, ":")
	s.url = "http://localhost:" + port
	startBin(t, bin, "http://"+consoleAddr+"/healthz", "console", "--addr", consoleAddr, "--edge-url", s.edgeURL, "--data", dir,
		"--metrics-addr", "off", "--issuer", s.issuer.URL, "--client-id", consoleClientID, "--public-url", s.url, "--poll-interval", "200ms")
	return s
}

// signIn opens the console in a new tab as who (roles) and waits for the
// inbox: through the issuer and back, no form.
func (s *signInMesh) signIn(t *testing.T, c *consoleMesh, who string, roles ...string) *browsertest.Tab {
	t.Helper()
	s.issuer.SignInAs(who, "toolmesh:read toolmesh:write toolmesh:admin", roles...)
	tab := c.browser.Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(s.url+"/inbox"), chromedp.WaitVisible(chromedp.CSS("#inbox-count"))); err != nil {
		t.Fatalf("%s could not sign in: %v", who, err)
	}
	if got, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS("#who"))); err != nil || got != who {
		t.Fatalf("the console says it is %q (%v), want %s", got, err, who)
	}
	return tab
}

// sessionCookie is the console's session cookie in tab ("" when none).
func sessionCookie(t *testing.T, tab *browsertest.Tab, url string) string {
	t.Helper()
	res, err := browsertest.Run(tab, 10*time.Second, chromedp.Action[network.GetCookiesResult](func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range res.Cookies {
		if ck.Name == "toolmesh_console" {
			return ck.Value
		}
	}
	return ""
}

// testConsoleSignIn: with an issuer, an owner signs in and answers an
// ask, which records her as who answered; she signs out; a callback with
// a replayed or foreign state signs nobody in; forms sent from elsewhere
// (no CSRF token, a foreign Origin, another session's cookie) are refused;
// an admin without the owner
// role sees the edge refuse her answer, and nothing changes.
func testConsoleSignIn(t *testing.T, bin string, c *consoleMesh) {
	s := startSignIn(t, bin, c)

	// olivia, an owner, answers the development agent's ask.
	tab := s.signIn(t, c, "olivia", "owner")
	const question = "Rotate the signing keys this week?"
	type result struct {
		env envelope
		err error
	}
	answered := make(chan result, 2)
	go func() {
		env, err := tryCallTool(c.agent, &mcp.CallToolParams{Name: "owner_ask", Arguments: map[string]any{
			"question": question, "options": []string{"Rotate", "Next week"}, "wait_seconds": 60}})
		answered <- result{env, err}
	}()
	if err := tab.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#inbox-list li button.option[value="Rotate"]`))); err != nil {
		t.Fatalf("the ask did not appear in olivia's inbox: %v", err)
	}
	if err := tab.Do(30*time.Second, chromedp.Click(chromedp.CSS(`#inbox-list li button.option[value="Rotate"]`)), chromedp.WaitVisible(chromedp.CSS(`p.flash`))); err != nil {
		t.Fatalf("olivia's answer: %v", err)
	}
	var r result
	select {
	case r = <-answered:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent's owner_ask did not return within 60s of the answer")
	}
	var d askData
	if r.err != nil {
		t.Fatal(r.err)
	}
	okData(t, r.env, &d)
	if d.Ask.Answer != "Rotate" || d.Ask.AnsweredBy != "olivia" {
		t.Errorf("the agent got %+v, want Rotate answered by olivia", d.Ask)
	}

	// Forms that did not come from olivia's own console page are refused
	// before they reach the edge, and the ask stays pending: one without
	// the CSRF token, one from a foreign Origin, and one carrying another
	// session's cookie with her page's token.
	testFormsFromElsewhere(t, s, c, tab)

	// A callback this browser did not start — another's code and state —
	// signs nobody in; so does the callback of a finished sign-in again.
	if err := tab.Do(30*time.Second, chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signed-out"))); err != nil {
		t.Fatalf("sign-out: %v", err)
	}
	if ck := sessionCookie(t, tab, s.url); ck != "" {
		t.Fatal("the session cookie outlived the sign-out")
	}
	if err := tab.Do(30*time.Second, chromedp.Navigate(attackerCallback(t, s)), chromedp.WaitVisible(chromedp.CSS("p.error"))); err != nil {
		t.Fatalf("a foreign callback: %v", err)
	}
	msg, _ := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS("p.error")))
	if !strings.Contains(msg, "nobody was signed in") || sessionCookie(t, tab, s.url) != "" {
		t.Errorf("a foreign callback: the console says %q and holds a session %v", msg, sessionCookie(t, tab, s.url) != "")
	}
	if got := s.issuer.Exchanges(); len(got) != 2 {
		t.Errorf("the issuer exchanged codes %q, want only olivia's two sign-ins (her browser's and the other session's)", got)
	}

	// ada, an admin but no owner, sees her own ask; the edge refuses her
	// answer with the owner service's rule and the ask stays pending.
	ada := mcpSessionAs(t, s.edgeURL, s.issuer.AccessToken(t, s.edgeURL, oidctest.Person{Subject: "ada", Scope: "toolmesh:read toolmesh:write", Roles: []string{"admin"}}))
	var mine askData
	okData(t, callTool(t, ada, "owner_ask", map[string]any{"question": "May I answer my own ask?", "options": []string{"Yes", "No"}, "wait_seconds": 1}), &mine)
	tab = s.signIn(t, c, "ada", "admin")
	sel := `#` + mine.Ask.AskID + ` button.option[value="Yes"]`
	if err := tab.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)),
		chromedp.WaitVisible(chromedp.CSS(`#`+mine.Ask.AskID+` p.error`))); err != nil {
		t.Fatalf("ada's answer: %v", err)
	}
	msg, _ = browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS(`#`+mine.Ask.AskID+` p.error`)))
	if !strings.Contains(strings.ToLower(msg), "owner") {
		t.Errorf("ada's refused answer says %q, want the owner role named", msg)
	}
	if got := getAsk(t, ada, mine.Ask.AskID); got.Ask.Status != "ASK_STATUS_PENDING" || got.Ask.Answer != "" {
		t.Errorf("after ada's refused answer the ask is %+v, want it pending, unanswered", got.Ask)
	}
	// The schedules she may not list: the page says so, and does not also
	// say that none waits.
	section, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(section, "only the owner may list") || strings.Contains(section, "No schedule waits") {
		t.Errorf("ada's inbox, where the schedules cannot be read, says: %q; want the refusal and no count", section)
	}
	checkAccessible(t, tab, "the inbox of a signed-in admin")
	if err := tab.Screenshot(consoleShot(t, "console-refused.png")); err != nil {
		t.Fatal(err)
	}
	callTool(t, ada, "owner_cancel_ask", map[string]any{"ask_id": mine.Ask.AskID})
	// The refused answer's page comes with its status, 403, which the
	// browser logs; anything else is a problem.
	for _, p := range tab.Problems() {
		if !strings.Contains(p, "status of 403") || !strings.Contains(p, "/asks/"+mine.Ask.AskID+"/answer") {
			t.Errorf("the console's pages reported a problem: %q", p)
		}
	}
}

// testFormsFromElsewhere sends the answer form of a pending ask as olivia
// (signed in in tab) from outside her console page, three ways, with a
// plain HTTP client: each is refused with 403 and the ask stays pending.
func testFormsFromElsewhere(t *testing.T, s *signInMesh, c *consoleMesh, tab *browsertest.Tab) {
	t.Helper()
	var pending askData
	okData(t, callTool(t, c.agent, "owner_ask", map[string]any{"question": "Rebuild the search index now?", "options": []string{"Rebuild", "Wait"}, "wait_seconds": 0}), &pending)
	id := pending.Ask.AskID
	if err := tab.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#`+id+` button.option`))); err != nil {
		t.Fatalf("the ask did not appear in olivia's inbox: %v", err)
	}
	token, err := browsertest.Run(tab, 10*time.Second, chromedp.Value(chromedp.CSS(`#`+id+` input[name="csrf"]`)))
	if err != nil || token == "" {
		t.Fatalf("olivia's page has no CSRF token: %v", err)
	}
	mine := sessionCookie(t, tab, s.url)
	// Another session: a second sign-in by a client of its own.
	jar, _ := cookiejar.New(nil)
	other := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next := s.url + "/auth/signin"
	for range 3 { // the console to the issuer, the issuer back, the callback
		res, err := other.Get(next)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		next = res.Header.Get("Location")
	}
	consoleURL, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	var theirs string
	for _, ck := range jar.Cookies(consoleURL) {
		if ck.Name == "toolmesh_console" {
			theirs = ck.Value
		}
	}
	if theirs == "" || theirs == mine {
		t.Fatalf("the second sign-in holds no session of its own")
	}
	for _, f := range []struct {
		name, cookie, csrf, origin string
	}{
		{"without the CSRF token", mine, "", s.url},
		{"from a foreign Origin", mine, token, "http://evil.example"},
		{"with another session's cookie", theirs, token, s.url},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/asks/"+id+"/answer", strings.NewReader(url.Values{"csrf": {f.csrf}, "answer": {"Rebuild"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", f.origin)
		req.AddCookie(&http.Cookie{Name: "toolmesh_console", Value: f.cookie})
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("a form %s = %d, want 403", f.name, res.StatusCode)
		}
	}
	if got := getAsk(t, c.agent, id); got.Ask.Status != "ASK_STATUS_PENDING" || got.Ask.Answer != "" {
		t.Errorf("after the refused forms the ask is %+v, want it pending, unanswered", got.Ask)
	}
	callTool(t, c.agent, "owner_cancel_ask", map[string]any{"ask_id": id})
}

// attackerCallback is a callback URL of a sign-in another browser started
// (its code and state): what a login CSRF would make a victim open.
func attackerCallback(t *testing.T, s *signInMesh) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := b.Get(s.url + "/auth/signin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res, err = b.Get(res.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back := res.Header.Get("Location")
	if !strings.Contains(back, "code=") {
		t.Fatalf("the attacker's sign-in got no code: %s", back)
	}
	return back
}
