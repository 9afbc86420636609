package main

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
)

// consoleGitHubEnv runs the console's mesh under per_agent against gh:
// the github service asks each agent's connection for its token, and the
// connections service checks the tokens the owner links with gh.
func consoleGitHubEnv(gh *githubtest.Fake) []string {
	return []string{githubPolicyEnv + "=per_agent", githubURLEnv + "=" + gh.URL, githubEgressAllowEnv + "=127.0.0.0/8",
		"TOOLMESH_CONNECTIONS_GITHUB_URL=" + gh.URL, "TOOLMESH_CONNECTIONS_EGRESS_ALLOW=127.0.0.0/8"}
}

// askedForLink reports whether a github_get_repo of the development agent
// asked for a link (the link page's URL in the refusal or the envelope),
// and what it answered.
func askedForLink(t *testing.T, s *mcp.ClientSession) (bool, string) {
	t.Helper()
	env, err := tryCallTool(s, &mcp.CallToolParams{Name: "github_get_repo", Arguments: map[string]any{"owner": "octocat", "repo": "hello"}})
	said := env.Status + " " + env.Message
	if err != nil {
		said = err.Error()
	}
	return strings.Contains(said, "/link?agent=local&provider=github"), said
}

// testConsoleLinksAToken: the owner links a personal access token for the
// development agent in the console's form, as a person would; a token
// GitHub refuses is refused with a message and stores nothing; the
// agent's github_get_repo then reaches GitHub with that token; Unlink
// removes it and the next call asks for a link again. The token is in no
// page, log line or database file in clear, and no tool takes it.
func testConsoleLinksAToken(t *testing.T, c *consoleMesh) {
	pageURL := strings.TrimSuffix(c.url, "/") + "/connections"
	repoCalls := func() []githubtest.Call {
		var out []githubtest.Call
		for _, call := range c.gh.Calls() {
			if strings.HasPrefix(call.Path, "/api/v3/repos/") {
				out = append(out, call)
			}
		}
		return out
	}
	if asked, said := askedForLink(t, c.agent); !asked {
		t.Fatalf("github_get_repo before any link answered %q, want the link page", said)
	}
	if n := len(repoCalls()); n != 0 {
		t.Fatalf("GitHub got %d repository calls for an agent without a connection", n)
	}

	// No tool takes a token: the connections tools are the list and the
	// unlink only; LinkToken is not one.
	tools, err := c.agent.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var conns []string
	for _, tl := range tools.Tools {
		if strings.HasPrefix(tl.Name, "connections_") {
			conns = append(conns, tl.Name)
		}
	}
	if slices.Sort(conns); !slices.Equal(conns, []string{"connections_delete", "connections_list"}) {
		t.Errorf("the connections tools are %v, want connections_delete and connections_list only", conns)
	}

	tab := c.browser.Tab(t)
	link := func(token string) error {
		return tab.Do(30*time.Second,
			chromedp.Navigate(pageURL),
			chromedp.WaitVisible(chromedp.CSS("#link")),
			chromedp.SendKeys(chromedp.CSS("#link-agent"), "local"),
			chromedp.SetValue(chromedp.CSS("#link-provider"), "PROVIDER_GITHUB"),
			chromedp.SendKeys(chromedp.CSS("#link-token"), token),
			chromedp.Click(chromedp.CSS("#link-send")),
			chromedp.WaitVisible(chromedp.CSS("#linked, #connection-error")),
		)
	}
	html := func() string {
		t.Helper()
		h, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	// A token GitHub does not know: refused with a message, nothing stored.
	bad := "ghp_" + strings.ReplaceAll(rand.Text(), "-", "")
	if err := link(bad); err != nil {
		t.Fatalf("link a bad token: %v", err)
	}
	msg, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS("#connection-error")))
	if err != nil || !strings.Contains(msg, "GitHub refused the token") || !strings.Contains(msg, "Nothing was linked") {
		t.Errorf("a bad token shows %q (%v), want GitHub's refusal and that nothing was linked", msg, err)
	}
	if page := html(); strings.Contains(page, bad) || !strings.Contains(page, "No connection yet.") {
		t.Errorf("after a refused token the page shows the token or a connection:\n%s", page)
	}

	// A personal access token GitHub knows as octo-console.
	pat := c.gh.Issue("octo-console")
	if err := link(pat); err != nil {
		t.Fatalf("link a token: %v", err)
	}
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Flash   string `json:"flash"`
		Account string `json:"account"`
		Status  string `json:"status"`
	}](`(() => { const r = document.querySelector('#connections tbody tr[data-agent="local"]');
		return {flash: (document.querySelector("#linked") || {}).textContent || "",
			account: r ? r.querySelector(".account").textContent : "", status: r ? r.querySelector(".status").textContent : ""}; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Account != "octo-console" || got.Status != "active" || !strings.Contains(got.Flash, "local acts as octo-console") {
		t.Errorf("after linking the page shows %+v, want local active as octo-console (GitHub's login)", got)
	}
	if strings.Contains(html(), pat) {
		t.Error("the page shows the token after linking")
	}
	if err := tab.Screenshot(consoleShot(t, "console-connections.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "the connections page")

	// The agent's call reaches GitHub with that token.
	if env := callTool(t, c.agent, "github_get_repo", map[string]any{"owner": "octocat", "repo": "hello"}); env.Status != "ok" {
		t.Fatalf("github_get_repo after linking = %+v", env)
	}
	if calls := repoCalls(); len(calls) != 1 || calls[0].Token != pat {
		t.Errorf("GitHub got %+v, want one call with the linked token", calls)
	}
	// The use is in the audit trail: agent, tool, provider and account,
	// never the token.
	trail := callTool(t, c.agent, "audit_list", map[string]any{"tool": "github_get_repo"})
	var uses struct {
		Records []struct {
			Actor, Tool, Reason string
		} `json:"records"`
	}
	if err := json.Unmarshal(trail.Data, &uses); err != nil || trail.Status != "ok" {
		t.Fatalf("audit_list: %+v (%v)", trail, err)
	}
	if len(uses.Records) != 1 || uses.Records[0].Actor != "local" || !strings.Contains(uses.Records[0].Reason, "github connection") ||
		!strings.Contains(uses.Records[0].Reason, "as octo-console") {
		t.Errorf("the audit trail's github_get_repo records are %+v, want one use by local of its github connection as octo-console", uses.Records)
	}
	if strings.Contains(string(trail.Data), pat) {
		t.Error("the audit trail shows the token")
	}

	// Unlink: the next call asks for a link again.
	if err := tab.Do(30*time.Second,
		chromedp.Click(chromedp.CSS(`#connections tbody tr[data-agent="local"][data-status="STATUS_ACTIVE"] button.unlink`)),
		chromedp.WaitVisible(chromedp.CSS("#unlinked")),
	); err != nil {
		t.Fatalf("unlink: %v", err)
	}
	if st, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS(`#connections tbody tr[data-agent="local"] .status`))); err != nil || st != "revoked" {
		t.Errorf("after Unlink the connection is %q (%v), want revoked", st, err)
	}
	if asked, said := askedForLink(t, c.agent); !asked {
		t.Errorf("github_get_repo after unlinking answered %q, want the link page", said)
	}
	if n := len(repoCalls()); n != 1 {
		t.Errorf("GitHub got %d repository calls, want only the one made while linked", n)
	}
	for _, p := range tab.Problems() {
		// The refused token's answer is a 400.
		if !strings.Contains(p, "status of 400") || !strings.Contains(p, "/connections/link") {
			t.Errorf("the connections page reported a problem: %q", p)
		}
	}

	// The owner's form is the console's server's: a browser page's request
	// is refused by the edge.
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(c.up.Link(t, linkMCP), "/mcp")+"/owner/toolmesh.connections.v1.ConnectionsService/LinkToken",
		strings.NewReader(`{"agent":"local","provider":"PROVIDER_GITHUB","token":"`+pat+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://127.0.0.1:9")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("a browser page's owner form answered %v (%v), want 403", res, err)
	} else {
		res.Body.Close()
	}

	// Neither token in clear in any log of the run or the database file.
	all := c.up.Stderr() + dbFiles(t, filepath.Join(c.up.Data, cli.DBFile("connections")))
	for name, tok := range map[string]string{"the linked token": pat, "the refused token": bad} {
		if strings.Contains(all, tok) {
			t.Errorf("%s is in clear in the mesh's log or the connections database", name)
		}
	}
}
