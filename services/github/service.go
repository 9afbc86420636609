// Package github is the GitHub domain: repositories, pull requests, issues
// and users through the GitHub REST API (github.com, or a GitHub Enterprise
// Server at a configured base URL). Under the shared policy every call acts
// with the token the mesh is configured with, and without one answers
// capability_gap; under per_agent each call acts with its agent's own
// connection (the connections service), and a call whose agent has none
// asks the person to link one (VisitRequired) before anything is sent to
// GitHub; per_agent_or_shared falls back to the shared token. GitHub's
// refusals map to domain codes: 404 to not_found, 403 to permission_denied,
// its primary and secondary rate limits to rate_limited with the wait
// GitHub gives (retry_after_seconds).
package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	gh "github.com/google/go-github/v88/github"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	githubv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1/toolv1connect"
)

// Capability gaps the service names.
const (
	// GapToken: no GitHub token is configured.
	GapToken = "github.token"
	// GapCredentials: GitHub refused the configured token.
	GapCredentials = "github.credentials"
)

// Defaults.
const (
	// DefaultTimeout bounds one GitHub request.
	DefaultTimeout = 20 * time.Second
	// DefaultPerPage is the page size of list tools when none is asked.
	DefaultPerPage = 30
	// DefaultDiffBytes is how much of a diff GetPullDiff returns when the
	// request names no max_bytes.
	DefaultDiffBytes = 100000
	// maxText cuts pull request and issue bodies in results.
	maxText = 4000
	// maxResponse bounds one GitHub answer (a diff is read only as far as
	// asked).
	maxResponse = 8 << 20
)

// Config configures the service.
type Config struct {
	// Token authenticates the calls (a personal access token or an app
	// installation token). Empty leaves GitHub unconfigured.
	Token string
	// BaseURL is a GitHub Enterprise Server's API URL
	// ("https://github.example.com/api/v3/"); github.com's API when empty.
	BaseURL string
	// Egress guards GitHub's address (an Enterprise Server on a private
	// network must be allowed).
	Egress egress.Policy
	// Timeout bounds one GitHub request (DefaultTimeout).
	Timeout time.Duration
	// Log receives the service's events.
	Log *slog.Logger
	// Now is the clock (for the wait until a rate limit resets); time.Now
	// when nil.
	Now clock.Clock
	// Policy says whose token a call acts with (PolicyShared when empty).
	Policy Policy
	// Connections obtains each agent's own token; required by every
	// policy but PolicyShared.
	Connections Connections
	// Link, when set, is the link page this service serves (at
	// Link.URL, which then replaces Connections.LinkURL).
	Link *LinkConfig
}

// Service implements toolmesh.github.v1.GitHubService.
type Service struct {
	shared  *gh.Client // nil: no shared token configured
	http    *http.Client
	baseURL string
	policy  Policy
	conns   Connections
	link    *linkPage // nil: the link page is served elsewhere
	log     *slog.Logger
	now     clock.Clock
}

var _ githubv1connect.GitHubServiceHandler = (*Service)(nil)

// New returns the service. A malformed base URL is an error; a missing
// token is not (the tools then answer capability_gap).
func New(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyShared
	}
	if _, err := ParsePolicy(string(cfg.Policy)); err != nil {
		return nil, err
	}
	if cfg.Policy != PolicyShared && (cfg.Connections.Client == nil || cfg.Connections.LinkURL == "" || !cfg.Connections.Self.HasRole(mesh.RoleService)) {
		return nil, fmt.Errorf("policy %s needs the connections service, a link page URL and a service-role identity", cfg.Policy)
	}
	s := &Service{log: cfg.Log, now: cfg.Now, policy: cfg.Policy, conns: cfg.Connections,
		http: cfg.Egress.Client(egress.ClientOptions{Timeout: cfg.Timeout, MaxResponseBytes: maxResponse})}
	if cfg.BaseURL != "" {
		s.baseURL = strings.TrimRight(cfg.BaseURL, "/") + "/"
	}
	if cfg.Link != nil {
		if cfg.Policy == PolicyShared {
			return nil, errors.New("the link page serves the per_agent policies only")
		}
		if cfg.Link.WebURL == "" {
			cfg.Link.WebURL = cfg.BaseURL
		}
		p, err := newLinkPage(*cfg.Link)
		if err != nil {
			return nil, err
		}
		s.link = p
	}
	if cfg.Token == "" {
		return s, nil
	}
	c, err := s.newGitHubClient(cfg.Token)
	if err != nil {
		return nil, err
	}
	s.shared = c
	return s, nil
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	reg := server.Register(githubv1connect.GitHubServiceName, githubv1connect.GitHubServiceHandler(s), githubv1connect.NewGitHubServiceHandler, githubv1.RegisterGitHubServiceHandler)
	reg.Public = s.linkRoutes()
	return reg
}

// VisitRegistration describes the service's toolmesh.tool.v1.VisitService
// (EndVisit), served beside it.
func (s *Service) VisitRegistration() server.Service {
	return server.Register(toolv1connect.VisitServiceName, toolv1connect.VisitServiceHandler(s), toolv1connect.NewVisitServiceHandler, nil)
}

// GetRepo implements GitHubService.GetRepo.
func (s *Service) GetRepo(ctx context.Context, req *githubv1.GetRepoRequest) (*githubv1.GetRepoResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	r, _, err := c.gh.Repositories.Get(ctx, req.GetOwner(), req.GetRepo())
	if err != nil {
		return nil, s.fail(ctx, c, err, repoName(req.GetOwner(), req.GetRepo()))
	}
	return &githubv1.GetRepoResponse{Repo: repo(r)}, nil
}

// StarRepo implements GitHubService.StarRepo.
func (s *Service) StarRepo(ctx context.Context, req *githubv1.StarRepoRequest) (*githubv1.StarRepoResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	name := repoName(req.GetOwner(), req.GetRepo())
	if _, err := c.gh.Activity.Star(ctx, req.GetOwner(), req.GetRepo()); err != nil {
		return nil, s.fail(ctx, c, err, name)
	}
	s.wrote(ctx, "star", name)
	return &githubv1.StarRepoResponse{FullName: req.GetOwner() + "/" + req.GetRepo(), Starred: true}, nil
}

// UnstarRepo implements GitHubService.UnstarRepo.
func (s *Service) UnstarRepo(ctx context.Context, req *githubv1.UnstarRepoRequest) (*githubv1.UnstarRepoResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	name := repoName(req.GetOwner(), req.GetRepo())
	if _, err := c.gh.Activity.Unstar(ctx, req.GetOwner(), req.GetRepo()); err != nil {
		return nil, s.fail(ctx, c, err, name)
	}
	s.wrote(ctx, "unstar", name)
	return &githubv1.UnstarRepoResponse{FullName: req.GetOwner() + "/" + req.GetRepo(), Starred: false}, nil
}

// ForkRepo implements GitHubService.ForkRepo. GitHub answers 202 Accepted
// with the new repository: the fork is made in the background.
func (s *Service) ForkRepo(ctx context.Context, req *githubv1.ForkRepoRequest) (*githubv1.ForkRepoResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	name := repoName(req.GetOwner(), req.GetRepo())
	r, _, err := c.gh.Repositories.CreateFork(ctx, req.GetOwner(), req.GetRepo(), &gh.RepositoryCreateForkOptions{
		Organization: req.GetOrganization(), Name: req.GetName(), DefaultBranchOnly: req.GetDefaultBranchOnly(),
	})
	if accepted, ok := errors.AsType[*gh.AcceptedError](err); ok {
		r, err = new(gh.Repository), nil
		if uerr := json.Unmarshal(accepted.Raw, r); uerr != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read the fork GitHub made: %w", uerr))
		}
	}
	if err != nil {
		return nil, s.fail(ctx, c, err, name)
	}
	s.wrote(ctx, "fork", name)
	return &githubv1.ForkRepoResponse{Repo: repo(r)}, nil
}

// ListPulls implements GitHubService.ListPulls.
func (s *Service) ListPulls(ctx context.Context, req *githubv1.ListPullsRequest) (*githubv1.ListPullsResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	list, resp, err := c.gh.PullRequests.List(ctx, req.GetOwner(), req.GetRepo(), &gh.PullRequestListOptions{
		State: state(req.GetState()), ListOptions: page(req.GetPage(), req.GetPerPage()),
	})
	if err != nil {
		return nil, s.fail(ctx, c, err, repoName(req.GetOwner(), req.GetRepo()))
	}
	out := &githubv1.ListPullsResponse{NextPage: int32(resp.NextPage)}
	for _, p := range list {
		out.Pulls = append(out.Pulls, pull(p))
	}
	return out, nil
}

// CreatePull implements GitHubService.CreatePull.
func (s *Service) CreatePull(ctx context.Context, req *githubv1.CreatePullRequest) (*githubv1.CreatePullResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	name := repoName(req.GetOwner(), req.GetRepo())
	p, _, err := c.gh.PullRequests.Create(ctx, req.GetOwner(), req.GetRepo(), &gh.NewPullRequest{
		Title: gh.Ptr(req.GetTitle()), Head: gh.Ptr(req.GetHead()), Base: gh.Ptr(req.GetBase()),
		Body: optional(req.GetBody()), Draft: gh.Ptr(req.GetDraft()),
	})
	if err != nil {
		return nil, s.fail(ctx, c, err, name)
	}
	s.wrote(ctx, "create_pull", name, "number", p.GetNumber())
	return &githubv1.CreatePullResponse{Pull: pull(p)}, nil
}

// reviewEvents are the review events as GitHub names them.
var reviewEvents = map[githubv1.ReviewEvent]string{
	githubv1.ReviewEvent_REVIEW_EVENT_APPROVE:         "APPROVE",
	githubv1.ReviewEvent_REVIEW_EVENT_REQUEST_CHANGES: "REQUEST_CHANGES",
	githubv1.ReviewEvent_REVIEW_EVENT_COMMENT:         "COMMENT",
}

// ReviewPull implements GitHubService.ReviewPull.
func (s *Service) ReviewPull(ctx context.Context, req *githubv1.ReviewPullRequest) (*githubv1.ReviewPullResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	what := pullName(req.GetOwner(), req.GetRepo(), req.GetNumber())
	r, _, err := c.gh.PullRequests.CreateReview(ctx, req.GetOwner(), req.GetRepo(), int(req.GetNumber()), &gh.PullRequestReviewRequest{
		Event: gh.Ptr(reviewEvents[req.GetEvent()]), Body: optional(req.GetBody()),
	})
	if err != nil {
		return nil, s.fail(ctx, c, err, what)
	}
	s.wrote(ctx, "review_pull", what, "event", reviewEvents[req.GetEvent()])
	return &githubv1.ReviewPullResponse{ReviewId: r.GetID(), State: r.GetState(), HtmlUrl: r.GetHTMLURL()}, nil
}

// GetPullDiff implements GitHubService.GetPullDiff. The diff is read only
// as far as max_bytes, however large it is.
func (s *Service) GetPullDiff(ctx context.Context, req *githubv1.GetPullDiffRequest) (*githubv1.GetPullDiffResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	what := pullName(req.GetOwner(), req.GetRepo(), req.GetNumber())
	limit := int(req.GetMaxBytes())
	if limit == 0 {
		limit = DefaultDiffBytes
	}
	hreq, err := c.gh.NewRequest(ctx, http.MethodGet, fmt.Sprintf("repos/%s/%s/pulls/%d", req.GetOwner(), req.GetRepo(), req.GetNumber()), nil)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("build the diff request: %w", err))
	}
	hreq.Header.Set("Accept", "application/vnd.github.diff")
	resp, err := c.gh.BareDo(hreq)
	if err != nil {
		return nil, s.fail(ctx, c, err, what)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, s.fail(ctx, c, err, what)
	}
	out := &githubv1.GetPullDiffResponse{Diff: string(b)}
	if len(b) > limit {
		out.Truncated = true
		cut := b[:limit]
		if i := strings.LastIndexByte(string(cut), '\n'); i >= 0 {
			cut = cut[:i+1]
		}
		for len(cut) > 0 && !utf8.Valid(cut) {
			cut = cut[:len(cut)-1]
		}
		out.Diff = string(cut)
	}
	return out, nil
}

// CommentPull implements GitHubService.CommentPull: a comment on the pull
// request's conversation, which GitHub keeps as an issue comment.
func (s *Service) CommentPull(ctx context.Context, req *githubv1.CommentPullRequest) (*githubv1.CommentPullResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	what := pullName(req.GetOwner(), req.GetRepo(), req.GetNumber())
	comment, _, err := c.gh.Issues.CreateComment(ctx, req.GetOwner(), req.GetRepo(), int(req.GetNumber()), &gh.IssueComment{Body: gh.Ptr(req.GetBody())})
	if err != nil {
		return nil, s.fail(ctx, c, err, what)
	}
	s.wrote(ctx, "comment_pull", what)
	return &githubv1.CommentPullResponse{CommentId: comment.GetID(), HtmlUrl: comment.GetHTMLURL()}, nil
}

// CreateIssue implements GitHubService.CreateIssue.
func (s *Service) CreateIssue(ctx context.Context, req *githubv1.CreateIssueRequest) (*githubv1.CreateIssueResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	name := repoName(req.GetOwner(), req.GetRepo())
	ir := &gh.IssueRequest{Title: gh.Ptr(req.GetTitle()), Body: optional(req.GetBody())}
	if l := req.GetLabels(); len(l) > 0 {
		ir.Labels = &l
	}
	if a := req.GetAssignees(); len(a) > 0 {
		ir.Assignees = &a
	}
	i, _, err := c.gh.Issues.Create(ctx, req.GetOwner(), req.GetRepo(), ir)
	if err != nil {
		return nil, s.fail(ctx, c, err, name)
	}
	s.wrote(ctx, "create_issue", name, "number", i.GetNumber())
	return &githubv1.CreateIssueResponse{Issue: issue(i)}, nil
}

// ListIssues implements GitHubService.ListIssues. GitHub lists pull
// requests among issues; they are left out.
func (s *Service) ListIssues(ctx context.Context, req *githubv1.ListIssuesRequest) (*githubv1.ListIssuesResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	list, resp, err := c.gh.Issues.ListByRepo(ctx, req.GetOwner(), req.GetRepo(), &gh.IssueListByRepoOptions{
		State: state(req.GetState()), Labels: req.GetLabels(), ListOptions: page(req.GetPage(), req.GetPerPage()),
	})
	if err != nil {
		return nil, s.fail(ctx, c, err, repoName(req.GetOwner(), req.GetRepo()))
	}
	out := &githubv1.ListIssuesResponse{NextPage: int32(resp.NextPage)}
	for _, i := range list {
		if i.IsPullRequest() {
			continue
		}
		out.Issues = append(out.Issues, issue(i))
	}
	return out, nil
}

// FollowUser implements GitHubService.FollowUser.
func (s *Service) FollowUser(ctx context.Context, req *githubv1.FollowUserRequest) (*githubv1.FollowUserResponse, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	what := "user " + req.GetUsername()
	if _, err := c.gh.Users.Follow(ctx, req.GetUsername()); err != nil {
		return nil, s.fail(ctx, c, err, what)
	}
	s.wrote(ctx, "follow_user", what)
	return &githubv1.FollowUserResponse{Username: req.GetUsername(), Following: true}, nil
}

// wrote logs a change made on GitHub, with the agent that asked for it.
func (s *Service) wrote(ctx context.Context, action, what string, attrs ...any) {
	s.log.InfoContext(ctx, "github.write", append([]any{"action", action, "target", what, "agent", mesh.FromContext(ctx).Caller.Agent}, attrs...)...)
}

// fail maps a GitHub client error to what the caller can act on; what
// names the object the call was about ("repository golang/go").
func (s *Service) fail(ctx context.Context, c *ghClient, err error, what string) error {
	if rl, ok := errors.AsType[*gh.RateLimitError](err); ok {
		wait := rl.Rate.Reset.Sub(s.now())
		return toolcall.RateLimited(fmt.Errorf("GitHub's rate limit for this mesh's token is used up (%d requests an hour); it resets at %s",
			rl.Rate.Limit, rl.Rate.Reset.UTC().Format(time.RFC3339)), wait)
	}
	if ab, ok := errors.AsType[*gh.AbuseRateLimitError](err); ok {
		return toolcall.RateLimited(fmt.Errorf("GitHub's secondary rate limit is hit (too many requests, or content created too fast): %s", ab.Message), ab.GetRetryAfter())
	}
	if _, ok := errors.AsType[*gh.TwoFactorAuthError](err); ok {
		return mesh.NewCapabilityGapError(GapCredentials, errors.New("GitHub wants a one-time password for this mesh's token; use a token that needs none (a fine-grained or app token)"))
	}
	if er, ok := errors.AsType[*gh.ErrorResponse](err); ok && er.Response != nil {
		msg := er.Message
		for _, e := range er.Errors {
			if d := errorDetail(e); d != "" {
				msg += "; " + d
			}
		}
		switch st := er.Response.StatusCode; {
		case st == http.StatusNotFound:
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found on GitHub (or not visible to this mesh's token)", what))
		case st == http.StatusUnauthorized:
			if ask := s.refused(ctx, c); ask != nil {
				return ask
			}
			s.log.WarnContext(ctx, "github.credentials_refused", "status", st)
			return mesh.NewCapabilityGapError(GapCredentials, fmt.Errorf("GitHub refused this mesh's token (%s): replace TOOLMESH_GITHUB_TOKEN", msg))
		case st == http.StatusForbidden:
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("GitHub refused it for this mesh's token: %s", msg))
		case st == http.StatusUnprocessableEntity:
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("GitHub refused it: %s", msg))
		case st == http.StatusConflict || st == http.StatusGone:
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("GitHub refused it (%d): %s", st, msg))
		case st >= 500:
			return toolcall.WithRetryAfter(connect.NewError(connect.CodeUnavailable, fmt.Errorf("GitHub failed (%d): %s", st, msg)),
				egress.RetryAfter(er.Response.Header, s.now()))
		}
		s.log.ErrorContext(ctx, "github.refused", "status", er.Response.StatusCode, "message", msg)
		return connect.NewError(connect.CodeInternal, fmt.Errorf("GitHub refused it (%d): %s", er.Response.StatusCode, msg))
	}
	switch {
	case errors.Is(err, egress.ErrRefused):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("GitHub's address is refused: %s (allow it with TOOLMESH_GITHUB_EGRESS_ALLOW)", egress.DescribeError(err)))
	case egress.IsTimeout(err) || errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("GitHub did not answer in time"))
	}
	s.log.WarnContext(ctx, "github.unreachable", "error", egress.DescribeError(err))
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("GitHub could not be reached: %s", egress.DescribeError(err)))
}

// errorDetail is one validation error of a GitHub 422 answer, in words.
func errorDetail(e gh.Error) string {
	switch {
	case e.Message != "":
		return e.Message
	case e.Field != "":
		return fmt.Sprintf("%s %s is %s", e.Resource, e.Field, strings.ReplaceAll(e.Code, "_", " "))
	}
	return e.Code
}

func repoName(owner, repo string) string { return "repository " + owner + "/" + repo }

func pullName(owner, repo string, n int32) string {
	return fmt.Sprintf("pull request %s/%s#%d", owner, repo, n)
}

// state is a State as GitHub's list filters name it ("open" when unset).
func state(st githubv1.State) string {
	if st == githubv1.State_STATE_UNSPECIFIED {
		return "open"
	}
	return protoenum.Word(st)
}

func page(p, perPage int32) gh.ListOptions {
	if perPage == 0 {
		perPage = DefaultPerPage
	}
	return gh.ListOptions{Page: int(max(p, 1)), PerPage: int(perPage)}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func ts(t gh.Timestamp) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t.Time)
}

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func repo(r *gh.Repository) *githubv1.Repo {
	out := &githubv1.Repo{
		FullName:        r.GetFullName(),
		Description:     r.GetDescription(),
		HtmlUrl:         r.GetHTMLURL(),
		DefaultBranch:   r.GetDefaultBranch(),
		Private:         r.GetPrivate(),
		Fork:            r.GetFork(),
		Archived:        r.GetArchived(),
		StargazersCount: int32(r.GetStargazersCount()),
		ForksCount:      int32(r.GetForksCount()),
		OpenIssuesCount: int32(r.GetOpenIssuesCount()),
		Language:        r.GetLanguage(),
		Topics:          r.Topics,
		License:         r.GetLicense().GetSPDXID(),
		PushTime:        ts(r.GetPushedAt()),
	}
	return out
}

func pull(p *gh.PullRequest) *githubv1.Pull {
	head := p.GetHead().GetRef()
	if hr, br := p.GetHead().GetRepo().GetFullName(), p.GetBase().GetRepo().GetFullName(); hr != "" && br != "" && hr != br {
		head = p.GetHead().GetLabel()
	}
	return &githubv1.Pull{
		Number:     int32(p.GetNumber()),
		Title:      p.GetTitle(),
		State:      p.GetState(),
		Author:     p.GetUser().GetLogin(),
		HtmlUrl:    p.GetHTMLURL(),
		Head:       head,
		Base:       p.GetBase().GetRef(),
		Draft:      p.GetDraft(),
		Merged:     p.GetMerged() || !p.GetMergedAt().IsZero(),
		Body:       clip(p.GetBody(), maxText),
		CreateTime: ts(p.GetCreatedAt()),
		UpdateTime: ts(p.GetUpdatedAt()),
	}
}

func issue(i *gh.Issue) *githubv1.Issue {
	out := &githubv1.Issue{
		Number:     int32(i.GetNumber()),
		Title:      i.GetTitle(),
		State:      i.GetState(),
		Author:     i.GetUser().GetLogin(),
		HtmlUrl:    i.GetHTMLURL(),
		Comments:   int32(i.GetComments()),
		Body:       clip(i.GetBody(), maxText),
		CreateTime: ts(i.GetCreatedAt()),
		UpdateTime: ts(i.GetUpdatedAt()),
	}
	for _, l := range i.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	for _, a := range i.Assignees {
		out.Assignees = append(out.Assignees, a.GetLogin())
	}
	return out
}
