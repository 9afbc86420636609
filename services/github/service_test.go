package github_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	githubv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
	"github.com/toolmesh/toolmesh/services/github"
)

const token = "ghp_test0123456789"

// call is one request the fake GitHub got.
type call struct {
	Method, Path, Query, Accept, Auth string
	Body                              map[string]any
}

// fakeGitHub implements the REST endpoints the service uses under
// /api/v3/ (a GitHub Enterprise Server's API path), answering with
// recorded-shape fixtures from testdata. refuse, when set, answers every
// request instead.
type fakeGitHub struct {
	srv *httptest.Server

	mu     sync.Mutex
	calls  []call
	refuse func(w http.ResponseWriter) bool
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newFake(t *testing.T) *fakeGitHub {
	f := &fakeGitHub{}
	reply := func(w http.ResponseWriter, status int, name string) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(fixture(t, name))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v3/repos/{owner}/{repo}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("owner") != "octocat" || r.PathValue("repo") != "Hello-World" {
			reply(w, http.StatusNotFound, "not_found.json")
			return
		}
		reply(w, http.StatusOK, "repo.json")
	})
	mux.HandleFunc("PUT /api/v3/user/starred/{owner}/{repo}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("DELETE /api/v3/user/starred/{owner}/{repo}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("PUT /api/v3/user/following/{user}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /api/v3/repos/{owner}/{repo}/forks", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusAccepted, "fork.json")
	})
	mux.HandleFunc("GET /api/v3/repos/{owner}/{repo}/pulls", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page") == "1" {
			w.Header().Set("Link", `<`+f.srv.URL+`/api/v3/repositories/1296269/pulls?page=2&per_page=2&state=all>; rel="next", <`+f.srv.URL+`/api/v3/repositories/1296269/pulls?page=5&per_page=2&state=all>; rel="last"`)
		}
		reply(w, http.StatusOK, "pulls.json")
	})
	mux.HandleFunc("POST /api/v3/repos/{owner}/{repo}/pulls", func(w http.ResponseWriter, r *http.Request) {
		if f.last().Body["head"] == "taken" {
			reply(w, http.StatusUnprocessableEntity, "validation_failed.json")
			return
		}
		reply(w, http.StatusCreated, "pull_created.json")
	})
	mux.HandleFunc("GET /api/v3/repos/{owner}/{repo}/pulls/{number}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(fixture(t, "pull.diff"))
	})
	mux.HandleFunc("POST /api/v3/repos/{owner}/{repo}/pulls/{number}/reviews", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("number") == "99" {
			reply(w, http.StatusForbidden, "forbidden.json")
			return
		}
		reply(w, http.StatusOK, "review.json")
	})
	mux.HandleFunc("POST /api/v3/repos/{owner}/{repo}/issues/{number}/comments", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusCreated, "comment.json")
	})
	mux.HandleFunc("POST /api/v3/repos/{owner}/{repo}/issues", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusCreated, "issue_created.json")
	})
	mux.HandleFunc("GET /api/v3/repos/{owner}/{repo}/issues", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, "issues.json")
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Accept: r.Header.Get("Accept"), Auth: r.Header.Get("Authorization")}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			_ = json.Unmarshal(b, &c.Body)
		}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		refuse := f.refuse
		f.mu.Unlock()
		if refuse != nil && refuse(w) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeGitHub) last() call {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return call{}
	}
	return f.calls[len(f.calls)-1]
}

func (f *fakeGitHub) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

var loopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// service returns a service reaching f as a GitHub Enterprise Server.
func service(t *testing.T, f *fakeGitHub) *github.Service {
	t.Helper()
	s, err := github.New(github.Config{Token: token, BaseURL: f.srv.URL, Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func client(t *testing.T, s *github.Service, opts ...connect.ClientOption) githubv1connect.GitHubServiceClient {
	srv := servertest.Start(t, s.Registration())
	return githubv1connect.NewGitHubServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(opts)...)
}

func as() context.Context { return servertest.As(context.Background(), "release-bot") }

func ts(s string) *timestamppb.Timestamp {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return timestamppb.New(t)
}

// diff fails the test when got differs from want.
func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}

// wantCall fails the test when the last request GitHub got is not want
// (Body compared when want has one).
func wantCall(t *testing.T, f *fakeGitHub, want call) {
	t.Helper()
	got := f.last()
	if got.Auth != "Bearer "+token {
		t.Errorf("GitHub got Authorization %q, want the configured token", got.Auth)
	}
	got.Auth = ""
	if want.Accept == "" {
		got.Accept = ""
	}
	if want.Body == nil {
		got.Body = nil
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request GitHub got (-want +got):\n%s", d)
	}
}

func TestReads(t *testing.T) {
	f := newFake(t)
	for _, p := range servertest.Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			c := client(t, service(t, f), p.Opts...)

			repo, err := c.GetRepo(as(), &githubv1.GetRepoRequest{Owner: "octocat", Repo: "Hello-World"})
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "github_get_repo", &githubv1.GetRepoResponse{Repo: &githubv1.Repo{
				FullName: "octocat/Hello-World", Description: "This your first repo!", HtmlUrl: "https://github.com/octocat/Hello-World",
				DefaultBranch: "main", StargazersCount: 80, ForksCount: 9, OpenIssuesCount: 2, Language: "Go",
				Topics: []string{"octocat", "atom", "electron", "api"}, License: "MIT", PushTime: ts("2011-01-26T19:06:43Z"),
			}}, repo)
			wantCall(t, f, call{Method: "GET", Path: "/api/v3/repos/octocat/Hello-World"})

			pulls, err := c.ListPulls(as(), &githubv1.ListPullsRequest{Owner: "octocat", Repo: "Hello-World", State: githubv1.State_STATE_ALL, Page: 1, PerPage: 2})
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "github_list_pulls", &githubv1.ListPullsResponse{NextPage: 2, Pulls: []*githubv1.Pull{
				{Number: 1347, Title: "Amazing new feature", State: "open", Author: "octocat", HtmlUrl: "https://github.com/octocat/Hello-World/pull/1347",
					Head: "new-topic", Base: "main", Body: "Please pull these awesome changes in!", CreateTime: ts("2011-01-26T19:01:12Z"), UpdateTime: ts("2011-01-26T19:01:12Z")},
				{Number: 1346, Title: "Fix typo from a fork", State: "open", Author: "hubot", HtmlUrl: "https://github.com/octocat/Hello-World/pull/1346",
					Head: "hubot:typo", Base: "main", Draft: true, CreateTime: ts("2011-01-25T10:00:00Z"), UpdateTime: ts("2011-01-25T11:00:00Z")},
			}}, pulls)
			wantCall(t, f, call{Method: "GET", Path: "/api/v3/repos/octocat/Hello-World/pulls", Query: "page=1&per_page=2&state=all"})

			issues, err := c.ListIssues(as(), &githubv1.ListIssuesRequest{Owner: "octocat", Repo: "Hello-World", Labels: []string{"bug", "p1"}})
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "github_list_issues (the pull request left out)", &githubv1.ListIssuesResponse{Issues: []*githubv1.Issue{
				{Number: 1350, Title: "Crash on start", State: "open", Author: "hubot", HtmlUrl: "https://github.com/octocat/Hello-World/issues/1350",
					Labels: []string{"bug", "p1"}, Comments: 3, Body: "It crashes.", CreateTime: ts("2026-02-27T08:00:00Z"), UpdateTime: ts("2026-02-28T09:00:00Z")},
			}}, issues)
			wantCall(t, f, call{Method: "GET", Path: "/api/v3/repos/octocat/Hello-World/issues", Query: "labels=bug%2Cp1&page=1&per_page=30&state=open"})

			whole := string(fixture(t, "pull.diff"))
			d, err := c.GetPullDiff(as(), &githubv1.GetPullDiffRequest{Owner: "octocat", Repo: "Hello-World", Number: 1347})
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "github_get_pull_diff", &githubv1.GetPullDiffResponse{Diff: whole}, d)
			wantCall(t, f, call{Method: "GET", Path: "/api/v3/repos/octocat/Hello-World/pulls/1347", Accept: "application/vnd.github.diff"})

			// Cut at max_bytes, at the last whole line.
			d, err = c.GetPullDiff(as(), &githubv1.GetPullDiffRequest{Owner: "octocat", Repo: "Hello-World", Number: 1347, MaxBytes: 100})
			if err != nil {
				t.Fatal(err)
			}
			if !d.GetTruncated() || len(d.GetDiff()) > 100 || !strings.HasSuffix(d.GetDiff(), "\n") || !strings.HasPrefix(whole, d.GetDiff()) {
				t.Errorf("diff cut at 100 bytes = %q (truncated %v), want a prefix of whole lines within 100 bytes", d.GetDiff(), d.GetTruncated())
			}
		})
	}
}

func TestWrites(t *testing.T) {
	f := newFake(t)
	c := client(t, service(t, f))
	ctx := as()

	star, err := c.StarRepo(ctx, &githubv1.StarRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	if err != nil || !star.GetStarred() || star.GetFullName() != "octocat/Hello-World" {
		t.Fatalf("github_star_repo = %v, %v", star, err)
	}
	wantCall(t, f, call{Method: "PUT", Path: "/api/v3/user/starred/octocat/Hello-World"})

	unstar, err := c.UnstarRepo(ctx, &githubv1.UnstarRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	if err != nil || unstar.GetStarred() {
		t.Fatalf("github_unstar_repo = %v, %v", unstar, err)
	}
	wantCall(t, f, call{Method: "DELETE", Path: "/api/v3/user/starred/octocat/Hello-World"})

	fork, err := c.ForkRepo(ctx, &githubv1.ForkRepoRequest{Owner: "octocat", Repo: "Hello-World", DefaultBranchOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "github_fork_repo (GitHub answers 202 Accepted)", &githubv1.ForkRepoResponse{Repo: &githubv1.Repo{
		FullName: "mesh-bot/Hello-World", Description: "This your first repo!", HtmlUrl: "https://github.com/mesh-bot/Hello-World",
		DefaultBranch: "main", Fork: true, Language: "Go", Topics: []string{}, PushTime: ts("2011-01-26T19:06:43Z"),
	}}, fork)
	wantCall(t, f, call{Method: "POST", Path: "/api/v3/repos/octocat/Hello-World/forks", Body: map[string]any{"default_branch_only": true}})

	pr, err := c.CreatePull(ctx, &githubv1.CreatePullRequest{Owner: "octocat", Repo: "Hello-World", Title: "Add the release notes",
		Head: "release-notes", Base: "main", Body: "Written by the mesh.", Draft: true})
	if err != nil {
		t.Fatal(err)
	}
	if pr.GetPull().GetNumber() != 1348 || pr.GetPull().GetHead() != "release-notes" || !pr.GetPull().GetDraft() {
		t.Errorf("github_create_pull = %v, want draft #1348 from release-notes", pr)
	}
	wantCall(t, f, call{Method: "POST", Path: "/api/v3/repos/octocat/Hello-World/pulls",
		Body: map[string]any{"title": "Add the release notes", "head": "release-notes", "base": "main", "body": "Written by the mesh.", "draft": true}})

	rv, err := c.ReviewPull(ctx, &githubv1.ReviewPullRequest{Owner: "octocat", Repo: "Hello-World", Number: 1347, Event: githubv1.ReviewEvent_REVIEW_EVENT_APPROVE})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "github_review_pull", &githubv1.ReviewPullResponse{ReviewId: 80, State: "APPROVED",
		HtmlUrl: "https://github.com/octocat/Hello-World/pull/1347#pullrequestreview-80"}, rv)
	wantCall(t, f, call{Method: "POST", Path: "/api/v3/repos/octocat/Hello-World/pulls/1347/reviews", Body: map[string]any{"event": "APPROVE"}})

	cm, err := c.CommentPull(ctx, &githubv1.CommentPullRequest{Owner: "octocat", Repo: "Hello-World", Number: 1347, Body: "Me too"})
	if err != nil || cm.GetCommentId() != 1 || cm.GetHtmlUrl() != "https://github.com/octocat/Hello-World/pull/1347#issuecomment-1" {
		t.Fatalf("github_comment_pull = %v, %v", cm, err)
	}
	wantCall(t, f, call{Method: "POST", Path: "/api/v3/repos/octocat/Hello-World/issues/1347/comments", Body: map[string]any{"body": "Me too"}})

	is, err := c.CreateIssue(ctx, &githubv1.CreateIssueRequest{Owner: "octocat", Repo: "Hello-World", Title: "Found a bug",
		Body: "I'm having a problem with this.", Labels: []string{"bug"}, Assignees: []string{"octocat"}})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "github_create_issue", &githubv1.CreateIssueResponse{Issue: &githubv1.Issue{Number: 1349, Title: "Found a bug", State: "open",
		Author: "mesh-bot", HtmlUrl: "https://github.com/octocat/Hello-World/issues/1349", Labels: []string{"bug"}, Assignees: []string{"octocat"},
		Body: "I'm having a problem with this.", CreateTime: ts("2026-03-01T12:00:00Z"), UpdateTime: ts("2026-03-01T12:00:00Z")}}, is)
	wantCall(t, f, call{Method: "POST", Path: "/api/v3/repos/octocat/Hello-World/issues",
		Body: map[string]any{"title": "Found a bug", "body": "I'm having a problem with this.", "labels": []any{"bug"}, "assignees": []any{"octocat"}}})

	fu, err := c.FollowUser(ctx, &githubv1.FollowUserRequest{Username: "octocat"})
	if err != nil || !fu.GetFollowing() {
		t.Fatalf("github_follow_user = %v, %v", fu, err)
	}
	wantCall(t, f, call{Method: "PUT", Path: "/api/v3/user/following/octocat"})
}

func TestReviewBodyRule(t *testing.T) {
	f := newFake(t)
	c := client(t, service(t, f))
	_, err := c.ReviewPull(as(), &githubv1.ReviewPullRequest{Owner: "octocat", Repo: "Hello-World", Number: 1, Event: githubv1.ReviewEvent_REVIEW_EVENT_REQUEST_CHANGES})
	if vs := servertest.Violations(t, err); len(vs[""]) != 1 || vs[""][0] != "review_body" {
		t.Errorf("violations = %v, want review_body", vs)
	}
	if f.count() != 0 {
		t.Errorf("GitHub got %d requests for a refused review", f.count())
	}
}

// envelope is what an MCP client sees for err.
func envelope(err error) *toolcall.Envelope {
	return toolcall.FromError(context.Background(), logging.Discard(), "github_tool", err)
}

func TestBlankTextIsRefused(t *testing.T) {
	f := newFake(t)
	c := client(t, service(t, f))
	const blank = " \n\t "
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"pull request title", func() error {
			_, err := c.CreatePull(as(), &githubv1.CreatePullRequest{Owner: "octocat", Repo: "Hello-World", Title: blank, Head: "feature", Base: "main"})
			return err
		}, "title"},
		{"pull request comment", func() error {
			_, err := c.CommentPull(as(), &githubv1.CommentPullRequest{Owner: "octocat", Repo: "Hello-World", Number: 1, Body: blank})
			return err
		}, "body"},
		{"issue title", func() error {
			_, err := c.CreateIssue(as(), &githubv1.CreateIssueRequest{Owner: "octocat", Repo: "Hello-World", Title: blank})
			return err
		}, "title"},
		{"issue label", func() error {
			_, err := c.CreateIssue(as(), &githubv1.CreateIssueRequest{Owner: "octocat", Repo: "Hello-World", Title: "Bug", Labels: []string{"bug", blank}})
			return err
		}, "labels"},
		{"issue label filter", func() error {
			_, err := c.ListIssues(as(), &githubv1.ListIssuesRequest{Owner: "octocat", Repo: "Hello-World", Labels: []string{blank}})
			return err
		}, "labels"},
	} {
		if vs := servertest.Violations(t, tc.call()); !slices.Equal(vs[tc.field], []string{"string.non_blank"}) {
			t.Errorf("blank %s: violations %v, want %s: string.non_blank", tc.name, vs, tc.field)
		}
	}
	if f.count() != 0 {
		t.Errorf("GitHub got %d requests for refused blank text", f.count())
	}
}

func TestGitHubRefusalsMapToDomainCodes(t *testing.T) {
	f := newFake(t)
	c := client(t, service(t, f))

	_, err := c.GetRepo(as(), &githubv1.GetRepoRequest{Owner: "octocat", Repo: "missing"})
	if env := envelope(err); env.DomainCode != toolcall.CodeNotFound || !strings.Contains(env.Message, "octocat/missing") {
		t.Errorf("missing repository: %+v, want not_found naming it", env)
	}
	_, err = c.ReviewPull(as(), &githubv1.ReviewPullRequest{Owner: "octocat", Repo: "Hello-World", Number: 99, Event: githubv1.ReviewEvent_REVIEW_EVENT_APPROVE})
	if env := envelope(err); env.DomainCode != toolcall.CodePermissionDenied || !strings.Contains(env.Message, "not accessible by personal access token") {
		t.Errorf("403: %+v, want permission_denied with GitHub's message", env)
	}
	_, err = c.CreatePull(as(), &githubv1.CreatePullRequest{Owner: "octocat", Repo: "Hello-World", Title: "again", Head: "taken", Base: "main"})
	if env := envelope(err); env.DomainCode != toolcall.CodeInvalidArgument || !strings.Contains(env.Message, "A pull request already exists") {
		t.Errorf("422: %+v, want invalid_argument with GitHub's reason", env)
	}
}

func TestRateLimitsCarryRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refuse   func(w http.ResponseWriter, body []byte)
		fixture  string
		min, max int
		says     string
	}{
		{"primary", func(w http.ResponseWriter, body []byte) {
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(120*time.Second).Unix(), 10))
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(body)
		}, "rate_limited.json", 100, 121, "5000 requests an hour"},
		{"secondary", func(w http.ResponseWriter, body []byte) {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(body)
		}, "secondary_rate_limited.json", 60, 60, "secondary rate limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			body := fixture(t, tc.fixture)
			f.refuse = func(w http.ResponseWriter) bool { tc.refuse(w, body); return true }
			c := client(t, service(t, f))
			_, err := c.StarRepo(as(), &githubv1.StarRepoRequest{Owner: "octocat", Repo: "Hello-World"})
			env := envelope(err)
			if env.DomainCode != toolcall.CodeRateLimited || env.RetryAfterSeconds < tc.min || env.RetryAfterSeconds > tc.max || !strings.Contains(env.Message, tc.says) {
				t.Errorf("envelope = %+v, want rate_limited, retry_after_seconds in [%d, %d], saying %q", env, tc.min, tc.max, tc.says)
			}
		})
	}
}

func TestUnconfiguredAndRefusedTokensAreCapabilityGaps(t *testing.T) {
	s, err := github.New(github.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, s)
	_, err = c.GetRepo(as(), &githubv1.GetRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	if gap, ok := mesh.CapabilityGap(err); !ok || gap != github.GapToken || !strings.Contains(err.Error(), "TOOLMESH_GITHUB_TOKEN") {
		t.Errorf("no token: %v, want capability gap %s naming TOOLMESH_GITHUB_TOKEN", err, github.GapToken)
	}

	f := newFake(t)
	body := fixture(t, "bad_credentials.json")
	f.refuse = func(w http.ResponseWriter) bool {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(body)
		return true
	}
	_, err = client(t, service(t, f)).FollowUser(as(), &githubv1.FollowUserRequest{Username: "octocat"})
	if env := envelope(err); env.DomainCode != toolcall.CodeCapabilityGap || env.Gap != github.GapCredentials || !strings.Contains(env.Message, "Bad credentials") {
		t.Errorf("bad token: %+v, want capability gap %s", env, github.GapCredentials)
	}
}

func TestGitHubAddressPassesTheEgressGuard(t *testing.T) {
	f := newFake(t)
	s, err := github.New(github.Config{Token: token, BaseURL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client(t, s).GetRepo(as(), &githubv1.GetRepoRequest{Owner: "octocat", Repo: "Hello-World"})
	if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "TOOLMESH_GITHUB_EGRESS_ALLOW") {
		t.Errorf("error = %v, want failed_precondition naming the allow setting", err)
	}
	if f.count() != 0 {
		t.Errorf("GitHub got %d requests through a refused address", f.count())
	}
}
