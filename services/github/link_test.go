package github_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/oidcsignin"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/oidctest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	githubv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1/toolv1connect"
	"github.com/toolmesh/toolmesh/services/github"
)

// The link page as browsers reach it: a name the test's browsers dial to
// the service's address.
const pageURL = "http://localhost/github/link"

// linkFixture is a github service serving its link page under per_agent,
// a fake GitHub, a test issuer and a fake connections service.
type linkFixture struct {
	gh     *githubtest.Fake
	issuer *oidctest.Provider
	conns  *fakeConnections
	client githubv1connect.GitHubServiceClient
	visits toolv1connect.VisitServiceClient
	addr   string
	logs   *logtest.Buffer

	mu  sync.Mutex
	now time.Time
}

func (f *linkFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *linkFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func newLinkFixture(t *testing.T, signIn bool) *linkFixture {
	t.Helper()
	f := &linkFixture{gh: githubtest.Start(t, "Iv1.linktest", "link-client-secret"), issuer: oidctest.Start(t, "toolmesh-link"),
		conns: &fakeConnections{}, logs: &logtest.Buffer{}, now: time.Now()}
	csrv := servertest.Start(t, server.Register(connectionsv1connect.ConnectionsServiceName, connectionsv1connect.ConnectionsServiceHandler(f.conns),
		connectionsv1connect.NewConnectionsServiceHandler, connectionsv1.RegisterConnectionsServiceHandler))
	cc := meshclient.New(meshclient.Config{HTTP: csrv.Client(), Signer: servertest.MeshSigner()}, connectionsv1connect.NewConnectionsServiceClient, csrv.URL)
	link := &github.LinkConfig{URL: pageURL, ClientID: f.gh.ClientID, ClientSecret: f.gh.ClientSecret, Key: make([]byte, 32)}
	if signIn {
		link.SignIn = &oidcsignin.Config{Issuer: f.issuer.URL, ClientID: f.issuer.ClientID}
	}
	s, err := github.New(github.Config{BaseURL: f.gh.URL, Egress: loopback, Policy: github.PolicyPerAgent, Log: logging.New(f.logs, slog.LevelInfo), Now: f.clock,
		Connections: github.Connections{Client: cc, Self: self, LinkURL: linkURL}, Link: link})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, s.Registration(), s.VisitRegistration())
	f.client = githubv1connect.NewGitHubServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	f.visits = toolv1connect.NewVisitServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	f.addr = srv.Addr
	return f
}

// link is the link agent's call made for person answers.
func (f *linkFixture) link(t *testing.T, person, agent string) string {
	t.Helper()
	return f.linkOfCall(t, person, agent, "")
}

// linkOfCall is the link agent's call with idempotency key made for person
// answers.
func (f *linkFixture) linkOfCall(t *testing.T, person, agent, key string) string {
	t.Helper()
	ctx := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: person, Agent: agent}, IdempotencyKey: key})
	_, err := f.client.GetRepo(ctx, &githubv1.GetRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	v, verr := mesh.VisitRequired(err)
	if verr != nil || v == nil {
		t.Fatalf("GetRepo as %s without a connection: %v, want VisitRequired", agent, err)
	}
	if !strings.HasPrefix(v.GetUrl(), pageURL+"?") {
		t.Fatalf("the link %s is not the page's", v.GetUrl())
	}
	return v.GetUrl()
}

// browser is a person's browser: a cookie jar, and the link page's name
// dialled to the service. With hold, it stops before GitHub's redirect
// back to the page and answers that URL.
type browser struct {
	c    *http.Client
	hold bool
}

func (f *linkFixture) browser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "localhost:80" {
			addr = f.addr
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	b := &browser{}
	b.c = &http.Client{Jar: jar, Transport: tr, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if b.hold && strings.HasPrefix(req.URL.String(), pageURL+"/callback") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

// open GETs u and answers the status, the final page's text, and (when
// held) the callback GitHub sent the browser to.
func (b *browser) open(t *testing.T, u string) (int, string, string) {
	t.Helper()
	res, err := b.c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body), res.Header.Get("Location")
}

// as signs person in at the issuer from now on.
func (f *linkFixture) as(person string) { f.issuer.SignInAs(person, "openid") }

func (f *linkFixture) wantStored(t *testing.T, want ...string) {
	t.Helper()
	if got := f.conns.storedFor(); !slices.Equal(got, want) {
		t.Fatalf("connections stored: %v, want %v", got, want)
	}
}

// TestLinkPageBindsThePersonAgentAndCall: the person a call acts for signs
// in, approves at GitHub, and the callback stores the agent's connection,
// with which the agent's next call acts. A replayed state, another
// person, a state for another agent and an expired one store nothing.
func TestLinkPageBindsThePersonAgentAndCall(t *testing.T) {
	f := newLinkFixture(t, true)

	// ann is the person agent-a's call acts for; bob signs in on her link.
	annLink := f.link(t, "ann", "agent-a")
	f.as("bob")
	if code, body, _ := f.browser(t).open(t, annLink); code != http.StatusForbidden || !strings.Contains(body, "You are signed in as bob") {
		t.Fatalf("bob opening ann's link: %d %s", code, body)
	}
	if len(f.gh.Exchanges()) != 0 {
		t.Fatal("bob's visit reached GitHub's token endpoint")
	}
	f.wantStored(t)

	// ann, held before GitHub's answer reaches the page.
	f.as("ann")
	f.gh.Approve("octo-ann")
	ann := f.browser(t)
	ann.hold = true
	if code, body, cb := ann.open(t, annLink); code != http.StatusFound || cb == "" {
		t.Fatalf("ann at GitHub: %d %s (callback %q)", code, body, cb)
	}

	// bob's own link for agent-b, held too: a state for another agent.
	bobLink := f.link(t, "bob", "agent-b")
	f.as("bob")
	f.gh.Approve("octo-bob")
	bob := f.browser(t)
	bob.hold = true
	_, _, bobCallback := bob.open(t, bobLink)
	if code, body, _ := ann.open(t, bobCallback); code != http.StatusBadRequest {
		t.Fatalf("agent-b's callback in ann's browser: %d %s, want refused", code, body)
	}
	f.wantStored(t)

	// The state for agent-b was ann's browser's to refuse; bob's own
	// browser completes it.
	if code, body, _ := bob.open(t, bobCallback); code != http.StatusOK || !strings.Contains(body, "agent-b now acts on GitHub as octo-bob") {
		t.Fatalf("bob's callback: %d %s", code, body)
	}
	f.wantStored(t, "agent-b=octo-bob")

	// ann again, this time all the way.
	ann = f.browser(t)
	f.as("ann")
	f.gh.Approve("octo-ann")
	ann.hold = true
	_, _, annCallback := ann.open(t, annLink)
	cookies := ann.c.Jar.Cookies(&url.URL{Scheme: "http", Host: "localhost", Path: "/github/link/callback"})
	if code, body, _ := ann.open(t, annCallback); code != http.StatusOK || !strings.Contains(body, "agent-a now acts on GitHub as octo-ann") {
		t.Fatalf("ann's callback: %d %s", code, body)
	}
	f.wantStored(t, "agent-b=octo-bob", "agent-a=octo-ann")

	// Replayed: in the same browser (its step is used), and with the step's
	// cookie put back (the state is used).
	if code, _, _ := ann.open(t, annCallback); code != http.StatusBadRequest {
		t.Errorf("the replayed callback answered %d, want refused", code)
	}
	again := f.browser(t)
	again.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: "localhost", Path: "/github/link/callback"}, cookies)
	if code, body, _ := again.open(t, annCallback); code != http.StatusBadRequest || !strings.Contains(body, "already used") {
		t.Errorf("the replayed callback with its cookie answered %d %s, want refused as used", code, body)
	}
	f.wantStored(t, "agent-b=octo-bob", "agent-a=octo-ann")

	// The agents' calls now carry their own tokens.
	for _, who := range []struct{ agent, login string }{{"agent-a", "octo-ann"}, {"agent-b", "octo-bob"}} {
		if err := getRepo(f.client, who.agent); err != nil {
			t.Fatalf("GetRepo as %s: %v", who.agent, err)
		}
		calls := f.gh.Calls()
		if last := calls[len(calls)-1]; last.Login != who.login {
			t.Errorf("%s's call carried %s's token, want %s's", who.agent, last.Login, who.login)
		}
	}
	for _, c := range f.conns.storer {
		if !c.HasRole(mesh.RoleService) {
			t.Errorf("StoreConnection was called as %+v, want the service role", c)
		}
	}

	// Expired: a state older than its lifetime stores nothing.
	carolLink := f.link(t, "carol", "agent-c")
	f.as("carol")
	f.gh.Approve("octo-carol")
	carol := f.browser(t)
	carol.hold = true
	_, _, carolCallback := carol.open(t, carolLink)
	f.advance(11 * time.Minute)
	if code, body, _ := carol.open(t, carolCallback); code != http.StatusBadRequest || !strings.Contains(body, "expired") {
		t.Errorf("the expired callback answered %d %s, want refused", code, body)
	}
	// And the link itself expires with the call's request state.
	f.advance(time.Hour)
	if code, _, _ := f.browser(t).open(t, carolLink); code != http.StatusBadRequest {
		t.Errorf("an expired link answered %d, want refused", code)
	}
	f.wantStored(t, "agent-b=octo-bob", "agent-a=octo-ann")

	// A ticket altered by hand does not open.
	if code, _, _ := f.browser(t).open(t, strings.Replace(annLink, "agent=agent-a", "agent=agent-b", 1)); code != http.StatusBadRequest {
		t.Errorf("a link for another agent than its ticket's answered %d, want refused", code)
	}

	all := f.logs.String()
	for tok := range f.gh.Tokens() {
		if strings.Contains(all, tok) {
			t.Error("a GitHub token is in the logs")
		}
	}
	if strings.Contains(all, f.gh.ClientSecret) {
		t.Error("the client secret is in the logs")
	}
}

// TestLinkPageForACallThatEnded: a call that asked for a link and ended
// without it (the calls worker says so through VisitService.EndVisit, as
// the call's caller and under its key) binds nothing afterwards: the
// callback says the request was cancelled or expired, stores nothing and
// revokes the token GitHub issued. Another call of the same agent still
// links; ending a call whose link is stored changes nothing.
func TestLinkPageForACallThatEnded(t *testing.T) {
	f := newLinkFixture(t, true)
	f.as("ann")
	f.gh.Approve("octo-ann")
	cancelled := f.linkOfCall(t, "ann", "agent-a", "mcp-cancelled")
	ann := f.browser(t)
	ann.hold = true
	_, _, callback := ann.open(t, cancelled)
	if callback == "" {
		t.Fatal("ann did not get back from GitHub")
	}

	end := func(agent, key, visit string) error {
		ctx := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "ann", Agent: agent}, IdempotencyKey: key})
		_, err := f.visits.EndVisit(ctx, &toolv1.EndVisitRequest{VisitId: visit})
		return err
	}
	if err := end("agent-a", "", "github:agent-a"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("EndVisit without the call's key: %v, want invalid_argument", err)
	}
	if err := end("agent-a", "mcp-cancelled", "github:agent-a"); err != nil {
		t.Fatalf("EndVisit: %v", err)
	}
	code, body, _ := ann.open(t, callback)
	if code != http.StatusGone || !strings.Contains(body, "cancelled or has expired") {
		t.Fatalf("the callback after the call ended: %d %s, want 410 saying so", code, body)
	}
	f.wantStored(t)
	if got := f.gh.Revoked(); len(got) != 1 {
		t.Errorf("GitHub revoked %d tokens, want the one the refused link got", len(got))
	}

	// Another call of agent-a links, and ending it afterwards changes
	// nothing that is stored.
	ann = f.browser(t)
	ann.hold = true
	_, _, callback = ann.open(t, f.linkOfCall(t, "ann", "agent-a", "mcp-wanted"))
	if code, body, _ := ann.open(t, callback); code != http.StatusOK {
		t.Fatalf("the wanted call's callback: %d %s", code, body)
	}
	f.wantStored(t, "agent-a=octo-ann")
	if got := f.conns.stored[0].GetCallKey(); got != "mcp-wanted" {
		t.Errorf("StoreConnection named the call %q, want mcp-wanted", got)
	}
}

// Without sign-in (development mode) a visitor on loopback is the local
// owner, and only the local owner's calls can be linked; a page reached
// through another name is refused.
func TestLinkPageWithoutSignInIsTheLocalOwners(t *testing.T) {
	f := newLinkFixture(t, false)
	f.gh.Approve("octo-local")
	link := f.link(t, "local", "agent-a")
	b := f.browser(t)
	req, err := http.NewRequest(http.MethodGet, link, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "mesh.example"
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("the link through another host name answered %d, want refused", res.StatusCode)
	}
	if code, body, _ := b.open(t, f.link(t, "ann", "agent-b")); code != http.StatusForbidden {
		t.Errorf("ann's link opened by the local owner: %d %s, want refused", code, body)
	}
	f.wantStored(t)
	if code, body, _ := b.open(t, link); code != http.StatusOK || !strings.Contains(body, "agent-a now acts on GitHub as octo-local") {
		t.Fatalf("the local owner's link: %d %s", code, body)
	}
	f.wantStored(t, "agent-a=octo-local")
}
