package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/oidctest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// linkBrowser is a person's browser: a cookie jar; with hold it stops
// before GitHub's redirect back to the link page's callback, and answers
// where it would have gone.
type linkBrowser struct {
	c    *http.Client
	hold bool
}

func newLinkBrowser(t *testing.T) *linkBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &linkBrowser{}
	b.c = &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if b.hold && req.URL.Path == "/link/callback" {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

// open GETs u: the status, the page's text, and the held callback.
func (b *linkBrowser) open(u string) (int, string, string, error) {
	res, err := b.c.Get(u)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body), res.Header.Get("Location"), nil
}

// tokenOf is the token the fake issued to login (the last one).
func tokenOf(gh *githubtest.Fake, login string) string {
	var tok string
	for k, v := range gh.Tokens() {
		if v == login {
			tok = k
		}
	}
	return tok
}

// linkPattern finds the link page's URL in a message.
var linkPattern = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/link\?[A-Za-z0-9_=&%.-]+`)

// TestGitHubLinkThroughTheEdge runs `toolmesh up` under per_agent with the
// github service serving its link page against a fake GitHub, and an edge
// that trusts a test issuer, where ann runs agent-a and bob agent-b. A
// form-only client gets the link in a capability_gap (-32021 at
// 2026-07-28); bob opening ann's
// link binds nothing; a callback after ann's client cancelled the call
// binds nothing; ann's 2025-11-25 client gets a URL elicitation, she
// follows it, approves at GitHub, and the call completes once with her
// token; a replayed callback and a callback for another agent bind
// nothing; bob links at 2026-07-28 (an input request). Every call carries
// its own agent's token, never the shared one. carol links agent-c with a
// token that expires within the refresh margin: 20 concurrent calls through
// two edges, each on its own github service process, refresh it exactly
// once and all carry the new token; GitHub then refusing it (401) makes
// the next call ask again and the connection broken. Unlinking ann's connection
// and retiring agent-b revoke their tokens at GitHub. No token nor the
// app's secret is in clear in any log, answer or file the mesh wrote (the
// SQLite files and the Temporal dev server's included).
func TestGitHubLinkThroughTheEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	secret := "cs_" + rand.Text()
	shared := "ghp_" + rand.Text()
	gh := githubtest.Start(t, "Iv1.linke2e", secret)
	iss := oidctest.Start(t, "toolmesh-link")
	dir := t.TempDir()
	githubEnv := []string{githubPolicyEnv + "=per_agent", githubTokenEnv + "=" + shared, githubURLEnv + "=" + gh.URL, githubEgressAllowEnv + "=127.0.0.0/8",
		"TOOLMESH_GITHUB_CLIENT_ID=" + gh.ClientID, "TOOLMESH_GITHUB_CLIENT_SECRET_FILE=" + writeFile(t, dir, "github-client-secret", secret),
		"TOOLMESH_GITHUB_LINK_ISSUER=" + iss.URL, "TOOLMESH_GITHUB_LINK_CLIENT_ID=" + iss.ClientID}
	m := startUp(t, bin, temporal, append(githubEnv,
		// The connections service revokes at GitHub what is unlinked.
		"TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID="+gh.ClientID, "TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE="+filepath.Join(dir, "github-client-secret"),
		"TOOLMESH_CONNECTIONS_GITHUB_URL="+gh.URL, "TOOLMESH_CONNECTIONS_EGRESS_ALLOW=127.0.0.0/8")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh's log:\n%s", tail(m.Stderr()))
		}
	})
	owner := mcpSessionTo(t, m.Link(t, linkMCP))
	for _, a := range []string{"agent-a", "agent-b"} {
		okData(t, callTool(t, owner, "agents_register", map[string]any{"agent_id": a, "display_name": a,
			"confirm": true, "reason": "an agent a person links to GitHub"}), &map[string]any{})
	}
	jwks := writeFile(t, dir, "jwks.json", string(iss.JWKS()))
	// startEdge starts an edge that trusts the test issuer, its GitHub
	// tools served by the github service at githubURL.
	startEdge := func(t *testing.T, githubURL string) (string, *binProcess) {
		addr := porttest.Addr(t)
		p := startBin(t, bin, "http://"+addr+"/healthz", "edge", "--addr", addr, "--data", m.Data, "--metrics-addr", "off",
			"--issuer", iss.URL, "--jwks-file", jwks, "--temporal", fmt.Sprintf("127.0.0.1:%d", temporalPort+m.Offset),
			"--service", "github="+githubURL, "--service", "connections="+m.Link(t, "connections"))
		return "http://" + addr + "/mcp", p
	}
	edgeURL, edgeProc := startEdge(t, m.Link(t, "github"))

	// session connects person's client for agent at version to the edge
	// (sessionAt: to the edge at edgeURL); url: it declares URL
	// elicitation, else forms only.
	var answers []string // every tool answer, for the grep at the end
	var sessionAt func(t *testing.T, edgeURL, person, agent, version string, url bool, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession
	session := func(t *testing.T, person, agent, version string, url bool, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
		t.Helper()
		return sessionAt(t, edgeURL, person, agent, version, url, elicit)
	}
	sessionAt = func(t *testing.T, edgeURL, person, agent, version string, url bool, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
		t.Helper()
		caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}}
		if url {
			caps.Elicitation.URL = &mcp.URLElicitationCapabilities{}
		}
		tok := iss.AccessToken(t, edgeURL, oidctest.Person{Subject: person, Agent: agent, Scope: "toolmesh:read toolmesh:write"})
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "link-e2e", Version: "1"}, &mcp.ClientOptions{Capabilities: caps, ElicitationHandler: elicit}).
			Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: edgeURL, HTTPClient: &http.Client{Transport: bearerTransport{tok}}},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connect as %s at %s: %v", person, version, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	getRepo := func(t *testing.T, cs *mcp.ClientSession) envelope {
		t.Helper()
		env, err := tryCallTool(cs, &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, env.Message+string(env.Data))
		return env
	}
	repoCalls := func() []githubtest.Call {
		var out []githubtest.Call
		for _, c := range gh.Calls() {
			if c.Path == "/api/v3/repos/octocat/hello" {
				out = append(out, c)
			}
		}
		return out
	}
	linkPrefix := m.Link(t, "github") + "/link?"

	var annLink string
	annForms := session(t, "ann", "agent-a", "2025-11-25", false, nil)
	t.Run("a form-only client gets the link in a capability_gap", func(t *testing.T) {
		env := getRepo(t, annForms)
		annLink = linkPattern.FindString(env.Message)
		if env.DomainCode != "capability_gap" || env.Gap != "client.elicitation.url" || !strings.HasPrefix(annLink, linkPrefix+"agent=agent-a") {
			t.Fatalf("github_get_repo from a form-only client = %+v, want a capability_gap carrying agent-a's link", env)
		}
		// At 2026-07-28 the refusal is -32021, carrying the link.
		modern := session(t, "ann", "agent-a", "2026-07-28", false, nil)
		_, err := modern.CallTool(t.Context(), &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != -32021 || !strings.Contains(rpcErr.Message, linkPrefix+"agent=agent-a") {
			t.Errorf("github_get_repo from a form-only 2026-07-28 client: %v, want -32021 carrying agent-a's link", err)
		}
		if n := len(gh.Calls()); n != 0 {
			t.Fatalf("GitHub got %d requests for an agent without a connection", n)
		}
	})

	t.Run("bob opening ann's link binds nothing", func(t *testing.T) {
		iss.SignInAs("bob", "openid")
		gh.Approve("octo-bob")
		code, body, _, err := newLinkBrowser(t).open(annLink)
		if err != nil || code != http.StatusForbidden || !strings.Contains(body, "signed in as bob") {
			t.Fatalf("bob at ann's link: %d %v %s", code, err, body)
		}
		if ex := gh.Exchanges(); len(ex) != 0 {
			t.Fatalf("GitHub's token endpoint was reached: %v", ex)
		}
	})

	t.Run("a callback after the call was cancelled changes nothing", func(t *testing.T) {
		// ann's client cancels the call (notifications/cancelled) while she
		// is at GitHub; she approves there afterwards.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var callback string
		ann := newLinkBrowser(t)
		cs := session(t, "ann", "agent-a", "2025-11-25", true, func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			iss.SignInAs("ann", "openid")
			gh.Approve("octo-ann-cancelled")
			ann.hold = true
			_, _, cb, err := ann.open(req.Params.URL)
			if err != nil || cb == "" {
				return nil, fmt.Errorf("ann at GitHub: %v (callback %q)", err, cb)
			}
			callback = cb
			cancel()
			return &mcp.ElicitResult{Action: "cancel"}, nil
		})
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
		if err == nil || callback == "" {
			t.Fatalf("the cancelled call answered %v (callback %q), want cancelled after ann reached GitHub", err, callback)
		}
		// The calls worker tells the github service the call ended.
		eventually(t, 30*time.Second, "the github service hears the call ended", func() bool {
			return strings.Contains(m.Stderr(), "github.link_call_ended")
		})
		code, body, _, err := ann.open(callback)
		if err != nil || code != http.StatusGone || !strings.Contains(body, "cancelled or has expired") {
			t.Fatalf("the callback after the call was cancelled: %d %v %s, want 410 saying so", code, err, body)
		}
		var list struct {
			Connections []struct{ Agent string } `json:"connections"`
		}
		okData(t, callTool(t, owner, "connections_list", map[string]any{"agent": "agent-a"}), &list)
		if len(list.Connections) != 0 {
			t.Errorf("agent-a's connections after the cancelled call's callback: %+v, want none", list.Connections)
		}
		if got := gh.Revoked(); len(got) != 1 || gh.Tokens()[got[0]] != "octo-ann-cancelled" {
			t.Errorf("GitHub revoked %d tokens, want the one the refused link got", len(got))
		}
		if calls := repoCalls(); len(calls) != 0 {
			t.Errorf("GitHub's repo calls %+v, want none", calls)
		}
	})

	annBrowser := newLinkBrowser(t)
	t.Run("2025-11-25: a URL elicitation, ann links, the call completes once with her token", func(t *testing.T) {
		var mu sync.Mutex
		var asked []*mcp.ElicitParams
		var replayed int
		cs := session(t, "ann", "agent-a", "2025-11-25", true, func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, req.Params)
			iss.SignInAs("ann", "openid")
			gh.Approve("octo-ann")
			annBrowser.hold = true
			_, _, callback, err := annBrowser.open(req.Params.URL)
			if err != nil || callback == "" {
				return nil, fmt.Errorf("ann at GitHub: %v (callback %q)", err, callback)
			}
			if code, body, _, err := annBrowser.open(callback); err != nil || code != http.StatusOK || !strings.Contains(body, "agent-a now acts on GitHub as octo-ann") {
				return nil, fmt.Errorf("ann's callback: %d %v %s", code, err, body)
			}
			replayed, _, _, _ = annBrowser.open(callback)
			return &mcp.ElicitResult{Action: "accept"}, nil
		})
		env := getRepo(t, cs)
		if env.Status != "ok" || !strings.Contains(string(env.Data), "octocat/hello") {
			t.Fatalf("github_get_repo after linking = %+v", env)
		}
		if len(asked) != 1 || asked[0].Mode != "url" || !strings.HasPrefix(asked[0].URL, linkPrefix+"agent=agent-a") || asked[0].ElicitationID == "" {
			t.Errorf("asked %+v, want one URL elicitation of agent-a's link with an elicitationId", asked)
		}
		if replayed != http.StatusBadRequest {
			t.Errorf("the replayed callback answered %d, want refused", replayed)
		}
		if calls := repoCalls(); len(calls) != 1 || calls[0].Login != "octo-ann" {
			t.Errorf("GitHub's repo calls %+v, want the one call, with octo-ann's token", calls)
		}
	})

	t.Run("2026-07-28: an input request, bob links; a callback for another agent binds nothing", func(t *testing.T) {
		var asked []*mcp.ElicitParams
		var foreign int
		cs := session(t, "bob", "agent-b", "2026-07-28", true, func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params)
			if len(asked) > 1 {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			iss.SignInAs("bob", "openid")
			gh.Approve("octo-bob")
			bob := newLinkBrowser(t)
			bob.hold = true
			_, _, callback, err := bob.open(req.Params.URL)
			if err != nil || callback == "" {
				return nil, fmt.Errorf("bob at GitHub: %v (callback %q)", err, callback)
			}
			// agent-b's callback in ann's browser (which started agent-a's).
			foreign, _, _, _ = annBrowser.open(callback)
			if code, body, _, err := bob.open(callback); err != nil || code != http.StatusOK || !strings.Contains(body, "agent-b now acts on GitHub as octo-bob") {
				return nil, fmt.Errorf("bob's callback: %d %v %s", code, err, body)
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		})
		env := getRepo(t, cs)
		if env.Status != "ok" {
			t.Fatalf("github_get_repo after linking = %+v", env)
		}
		if len(asked) != 1 || asked[0].Mode != "url" || !strings.HasPrefix(asked[0].URL, linkPrefix+"agent=agent-b") || asked[0].ElicitationID != "" {
			t.Errorf("asked %+v, want one URL input request of agent-b's link, without an elicitationId", asked)
		}
		if foreign != http.StatusBadRequest {
			t.Errorf("agent-b's callback in ann's browser answered %d, want refused", foreign)
		}
		if calls := repoCalls(); len(calls) != 2 || calls[1].Login != "octo-bob" {
			t.Errorf("GitHub's repo calls %+v, want bob's one call, with octo-bob's token", calls)
		}
	})

	t.Run("each agent's calls carry its own token", func(t *testing.T) {
		if env := getRepo(t, annForms); env.Status != "ok" {
			t.Fatalf("ann's form-only client once linked: %+v", env)
		}
		want := []string{"octo-ann", "octo-bob", "octo-ann"}
		calls := repoCalls()
		for i, c := range calls {
			if i >= len(want) || c.Login != want[i] || c.Token == shared {
				t.Errorf("repo call %d carried %s's token (shared: %v), want %v in order", i, c.Login, c.Token == shared, want)
			}
		}
		if len(calls) != len(want) {
			t.Errorf("%d repo calls, want %d", len(calls), len(want))
		}
		list := callTool(t, owner, "connections_list", nil)
		answers = append(answers, string(list.Data))
		if !strings.Contains(string(list.Data), `"octo-ann"`) || !strings.Contains(string(list.Data), `"octo-bob"`) || strings.Count(string(list.Data), `"account"`) != 2 {
			t.Errorf("connections_list = %s, want agent-a's and agent-b's, one each", list.Data)
		}
		if ex := gh.Exchanges(); len(ex) != 3 {
			t.Errorf("GitHub's token endpoint: %v, want three exchanges (ann's for the cancelled call, ann's, bob's)", ex)
		}
	})

	var github2 *childProcess
	t.Run("an expiring token is refreshed once under 20 concurrent calls across two github processes; a refused one asks again", func(t *testing.T) {
		okData(t, callTool(t, owner, "agents_register", map[string]any{"agent_id": "agent-c", "display_name": "agent-c",
			"confirm": true, "reason": "an agent whose token expires"}), &map[string]any{})
		// A second github service process, beside up's, on the same
		// connections service, behind an edge of its own.
		addr := porttest.Addr(t)
		github2 = startBinary(t, bin, "http://"+addr+"/healthz", append(githubEnv, githubLinkURLEnv+"=http://"+addr+"/link"),
			"serve", "github", "--addr", addr, "--data", t.TempDir(),
			"--mesh-key", filepath.Join(m.Data, cli.MeshKeyFile), "--mesh-public-key", filepath.Join(m.Data, cli.MeshPubKeyFile),
			"--service", "connections="+m.Link(t, "connections"), "--agents-url", m.Link(t, "agents"))
		edge2URL, _ := startEdge(t, "http://"+addr)

		// carol links agent-c; GitHub's token expires in a minute, within
		// the 5 minutes the connections service refreshes ahead.
		gh.ExpireIn(time.Minute)
		iss.SignInAs("carol", "openid")
		gh.Approve("octo-carol")
		carol := session(t, "carol", "agent-c", "2025-11-25", false, nil)
		link := linkPattern.FindString(getRepo(t, carol).Message)
		if code, body, _, err := newLinkBrowser(t).open(link); err != nil || code != http.StatusOK || !strings.Contains(body, "agent-c now acts on GitHub as octo-carol") {
			t.Fatalf("carol's link: %d %v %s", code, err, body)
		}
		linked := tokenOf(gh, "octo-carol")
		gh.ExpireIn(0)

		sessions := []*mcp.ClientSession{carol, sessionAt(t, edge2URL, "carol", "agent-c", "2025-11-25", false, nil)}
		before := len(repoCalls())
		var wg sync.WaitGroup
		envs := make([]envelope, 20)
		errs := make([]error, 20)
		for i := range envs {
			wg.Go(func() {
				envs[i], errs[i] = tryCallTool(sessions[i%2], &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
			})
		}
		wg.Wait()
		for i, env := range envs {
			answers = append(answers, env.Message+string(env.Data))
			if errs[i] != nil || env.Status != "ok" {
				t.Errorf("concurrent call %d: %+v %v, want ok", i, env, errs[i])
			}
		}
		if got := gh.Refreshes(); len(got) != 1 || got[0] != "issued" {
			t.Errorf("GitHub's refresh grants: %v, want exactly one", got)
		}
		refreshed := ""
		for _, c := range repoCalls()[before:] {
			if c.Login != "octo-carol" || c.Token == linked || refreshed != "" && c.Token != refreshed {
				t.Errorf("a repo call carried %s's token (the linked one: %v), want every call on the one refreshed token", c.Login, c.Token == linked)
			}
			refreshed = c.Token
		}
		if n := len(repoCalls()) - before; n != 20 {
			t.Errorf("GitHub got %d repo calls, want 20", n)
		}
		for name, logs := range map[string]string{"up's github": m.Stderr(), "the second github": github2.logs.String()} {
			if !regexp.MustCompile(`github\.connection_used.*agent-c`).MatchString(logs) {
				t.Errorf("%s served none of agent-c's calls", name)
			}
		}

		// carol revokes the app's access at GitHub: the next call asks
		// again, and the connection shows broken.
		gh.Refuse(refreshed)
		env := getRepo(t, carol)
		if env.DomainCode != "capability_gap" || !strings.Contains(env.Message, linkPrefix+"agent=agent-c") {
			t.Errorf("the call after GitHub refused the token = %+v, want asked to link again", env)
		}
		list := callTool(t, owner, "connections_list", map[string]any{"agent": "agent-c"})
		answers = append(answers, string(list.Data))
		if !strings.Contains(strings.ToLower(string(list.Data)), "broken") {
			t.Errorf("agent-c's connections after GitHub refused its token: %s, want broken", list.Data)
		}
	})

	t.Run("unlinking revokes the token at GitHub, and the next call asks again", func(t *testing.T) {
		var list struct {
			Connections []struct{ ID, Agent, Account, Status string } `json:"connections"`
		}
		okData(t, callTool(t, owner, "connections_list", map[string]any{"agent": "agent-a"}), &list)
		if len(list.Connections) != 1 || list.Connections[0].Account != "octo-ann" {
			t.Fatalf("agent-a's connections = %+v", list.Connections)
		}
		annToken := tokenOf(gh, "octo-ann")
		env := callTool(t, owner, "connections_delete", map[string]any{"id": list.Connections[0].ID, "confirm": true, "reason": "ann leaves the project"})
		answers = append(answers, string(env.Data))
		if env.Status != "ok" || !strings.Contains(string(env.Data), "REVOKED") && !strings.Contains(string(env.Data), "revoked") {
			t.Fatalf("connections_delete = %+v", env)
		}
		if got := gh.Revoked(); len(got) != 2 || got[1] != annToken {
			t.Errorf("GitHub revoked %d tokens, want the cancelled call's, then ann's", len(got))
		}
		before := len(repoCalls())
		if env := getRepo(t, annForms); env.DomainCode != "capability_gap" || !strings.Contains(env.Message, linkPrefix+"agent=agent-a") {
			t.Errorf("ann's call after unlinking = %+v, want asked to link again", env)
		}
		if len(repoCalls()) != before {
			t.Error("a call after unlinking reached GitHub")
		}
	})

	t.Run("retiring an agent revokes its connections", func(t *testing.T) {
		bobToken := tokenOf(gh, "octo-bob")
		if env := callTool(t, owner, "agents_set_status", map[string]any{"agent_id": "agent-b", "status": "AGENT_STATUS_RETIRED",
			"confirm": true, "reason": "bob's agent is done"}); env.Status != "ok" {
			t.Fatalf("agents_set_status retired = %+v", env)
		}
		if got := gh.Revoked(); len(got) != 3 || got[2] != bobToken {
			t.Errorf("GitHub revoked %d tokens, want the cancelled call's, ann's, then bob's", len(got))
		}
		list := callTool(t, owner, "connections_list", map[string]any{"agent": "agent-b"})
		answers = append(answers, string(list.Data))
		if !strings.Contains(string(list.Data), "REVOKED") && !strings.Contains(string(list.Data), "revoked") {
			t.Errorf("agent-b's connections after retiring it: %s, want revoked", list.Data)
		}
	})

	t.Run("no token nor the client secret in clear", func(t *testing.T) {
		secrets := map[string]string{"the client secret": secret, "the shared token": shared}
		for tok, login := range gh.Tokens() {
			secrets[fmt.Sprintf("%s's token #%d", login, len(secrets))] = tok
		}
		for _, rt := range gh.RefreshTokens() {
			secrets[fmt.Sprintf("refresh token #%d", len(secrets))] = rt
		}
		places := map[string]string{"the mesh's log": m.Stderr(), "the edge's log": edgeProc.logs.String(), "tool answers": strings.Join(answers, "\n")}
		if github2 != nil {
			places["the second github's log"] = github2.logs.String()
		}
		err := filepath.WalkDir(m.Data, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			places[path] = string(b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The grep reads what it should: the accounts are stored in clear.
		if !strings.Contains(places[filepath.Join(m.Data, cli.DBFile("connections"))]+places[filepath.Join(m.Data, cli.DBFile("connections"))+"-wal"], "octo-ann") {
			t.Fatalf("the connections database under %s does not name octo-ann: the grep reads the wrong files", m.Data)
		}
		total := 0
		for where, text := range places {
			total += len(text)
			for what, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%s is in clear in %s", what, where)
				}
			}
		}
		t.Logf("%d secrets looked for in %d places, %d bytes", len(secrets), len(places), total)
	})
}
