//go:build faults

package faults

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// linkURL finds the link page's URL in a capability_gap's message.
var linkURL = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/link\?[A-Za-z0-9_=&%.-]+`)

// heldBrowser is the local owner's browser: a cookie jar that stops before
// GitHub's redirect back to the link page's callback.
type heldBrowser struct{ c *http.Client }

func newHeldBrowser(t *testing.T) *heldBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &heldBrowser{c: &http.Client{Jar: jar, Timeout: 60 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if req.URL.Path == "/link/callback" {
			return http.ErrUseLastResponse
		}
		return nil
	}}}
}

// open GETs u: the status, the page's text, and the held callback URL.
func (b *heldBrowser) open(t *testing.T, u string) (int, string, string) {
	t.Helper()
	res, err := b.c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body), res.Header.Get("Location")
}

// TestConnectionsKilledMidLink runs `toolmesh up` under per_agent against a
// fake GitHub, the link page in development mode (the local owner on
// loopback). The connections service is killed with SIGKILL after the link
// page sent the browser to GitHub and before GitHub's callback: a callback
// while it is down answers an error page and stores nothing, the same
// callback once it is back is refused (state and code are one-use), and
// opening the link again links. A second link of the same agent, killed
// the same way but called back after the restart, succeeds. Throughout,
// the agent has at most one connection, and after the retry exactly one;
// the waiting call then completes with the linked token.
func TestConnectionsKilledMidLink(t *testing.T) {
	secret := "cs_" + rand.Text()
	gh := githubtest.Start(t, "Iv1.faultslink", secret)
	dir := filepath.Join(suite.dir, "link")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "github-client-secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	offset, err := porttest.Offset(append(porttest.Range(meshPortsLow, meshPortsHigh), temporalUIPort)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := startMesh(dir, offset,
		"TOOLMESH_GITHUB_POLICY=per_agent", "TOOLMESH_GITHUB_URL="+gh.URL, "TOOLMESH_GITHUB_EGRESS_ALLOW=127.0.0.0/8",
		"TOOLMESH_GITHUB_CLIENT_ID="+gh.ClientID, "TOOLMESH_GITHUB_CLIENT_SECRET_FILE="+secretFile,
		"TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID="+gh.ClientID, "TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE="+secretFile,
		"TOOLMESH_CONNECTIONS_GITHUB_URL="+gh.URL, "TOOLMESH_CONNECTIONS_EGRESS_ALLOW=127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	m.waitReady(t, 2*time.Minute)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the mesh's log:\n%s", tail(m.logs.String()))
		}
	})
	// A 2025-11-25 client without URL elicitation: the link comes in a
	// capability_gap.
	cs := connectMCP(t, m.mcpURL, "2025-11-25", nil)
	getRepo := func() outcome {
		return callTool(cs, "github_get_repo", map[string]any{"owner": "octocat", "repo": "hello"}, "")
	}
	connections := func() []string {
		t.Helper()
		o := callTool(cs, "connections_list", map[string]any{"agent": "local"}, "")
		var list struct {
			Connections []struct{ Account, Status string } `json:"connections"`
		}
		if !o.ok() || json.Unmarshal(o.env.Data, &list) != nil {
			t.Fatalf("connections_list: %+v %v", o.env, o.err)
		}
		var out []string
		for _, c := range list.Connections {
			out = append(out, c.Account+":"+c.Status)
		}
		return out
	}
	askLink := func() string {
		t.Helper()
		o := getRepo()
		link := linkURL.FindString(o.env.Message)
		if o.code() != "capability_gap" || link == "" {
			t.Fatalf("github_get_repo without a connection = %s %+v, want a capability_gap carrying the link", o.code(), o.env)
		}
		return link
	}
	// toGitHub follows a fresh link through the page and GitHub's approval,
	// up to the callback.
	toGitHub := func(b *heldBrowser, link string) string {
		t.Helper()
		_, body, callback := b.open(t, link)
		if !strings.Contains(callback, "/link/callback?") {
			t.Fatalf("the link page did not reach GitHub's callback: %s", body)
		}
		return callback
	}
	gh.Approve("octo-local")

	// 1. The callback lands while connections is down.
	b := newHeldBrowser(t)
	callback := toGitHub(b, askLink())
	pid := m.process(t, "connections").PID
	m.kill(t, "connections", syscall.SIGKILL)
	downCode, downBody, _ := b.open(t, callback)
	m.waitRestarted(t, "connections", pid, 2*time.Minute)
	downLinked := len(connections())
	replayCode, _, _ := b.open(t, callback)
	afterReplay := len(connections())
	// The person opens the link again (a new one: the call asks again).
	retry, retryLink := newHeldBrowser(t), askLink()
	retryCode, retryBody, _ := retry.open(t, toGitHub(retry, retryLink))
	afterRetry := connections()
	figure(t, "callback while connections is down (HTTP status, connections stored)", []int{downCode, downLinked}, "[503 0]",
		downCode == http.StatusServiceUnavailable && downLinked == 0 && strings.Contains(downBody, "Nothing was linked"))
	figure(t, "the same callback after the restart (HTTP status, connections stored)", []int{replayCode, afterReplay}, "[400 0]",
		replayCode == http.StatusBadRequest && afterReplay == 0)
	figure(t, "retry through the link (HTTP status, connections stored)", []any{retryCode, afterRetry}, "[200 [octo-local:STATUS_ACTIVE]]",
		retryCode == http.StatusOK && len(afterRetry) == 1 && strings.HasPrefix(afterRetry[0], "octo-local:"))
	if retryCode != http.StatusOK {
		t.Fatalf("retry: %s", retryBody)
	}
	if o := getRepo(); !o.ok() {
		t.Fatalf("github_get_repo once linked = %s %+v", o.code(), o.env)
	}

	// 2. The same link opened again (a link lasts an hour) while the agent
	// is linked, killed the same way, called back after the restart: it
	// links again, replacing rather than adding.
	again := newHeldBrowser(t)
	callback = toGitHub(again, retryLink)
	pid = m.process(t, "connections").PID
	m.kill(t, "connections", syscall.SIGKILL)
	m.waitRestarted(t, "connections", pid, 2*time.Minute)
	lateCode, _, _ := again.open(t, callback)
	afterLate := connections()
	figure(t, "callback after the restart (HTTP status, connections stored)", []any{lateCode, afterLate}, "[200 [octo-local:STATUS_ACTIVE]]",
		lateCode == http.StatusOK && len(afterLate) == 1)
	if o := getRepo(); !o.ok() {
		t.Fatalf("github_get_repo after relinking = %s %+v", o.code(), o.env)
	}

	// What GitHub saw: one code exchange per callback that reached it. A
	// token exchanged while connections was down is revoked by the github
	// service, the one a relink replaced by the connections service: the
	// only token still granted at GitHub is the one the connection holds.
	held := len(afterLate)
	live := len(gh.Tokens()) - len(gh.Revoked())
	figure(t, "GitHub code exchanges / tokens issued / revoked / still granted that no connection holds",
		[]int{len(gh.Exchanges()), len(gh.Tokens()), len(gh.Revoked()), live - held}, "[3 3 2 0]", live == held)
}
