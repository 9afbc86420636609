// Package search is web search: a query goes to the one search provider
// the mesh is configured with and comes back as ranked, typed results;
// deep research runs several queries at once and merges their results
// (research.go).
// Providers live in searchprovider (the Brave Search API and SearXNG's JSON
// API); without one, every call answers capability_gap naming what to
// configure.
package search

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/upstream"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1/searchv1connect"
)

// Capability gaps the service names.
const (
	// GapProvider: no search provider is configured.
	GapProvider = "search.provider"
	// GapCredentials: the provider refused the configured credentials.
	GapCredentials = "search.credentials"
)

// DefaultCount is how many results a query returns when it names no count.
const DefaultCount = 10

// Query is one search as providers see it.
type Query struct {
	// Text is what to search for.
	Text string
	// Count is how many results to return (1 to 20).
	Count int
	// Language is an ISO 639-1 code, or "" for any.
	Language string
}

// Result is one search result, as a provider found it.
type Result struct {
	Title   string
	URL     string
	Snippet string
	Source  string
}

// Provider is a web search API.
type Provider interface {
	// Name names the provider in results ("brave", "searxng").
	Name() string
	// Search returns at most q.Count results, best first. A refusal by the
	// provider is a *ProviderError.
	Search(ctx context.Context, q Query) ([]Result, error)
}

// ProviderError is a search provider's refusal: its HTTP status and, for
// rate limits, when to try again.
type ProviderError struct {
	Provider   string
	Status     int
	RetryAfter time.Duration
	Message    string
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("%s answered %d %s: %s", e.Provider, e.Status, http.StatusText(e.Status), e.Message)
}

// Config configures the service.
type Config struct {
	// Provider answers the queries; nil leaves search unconfigured.
	Provider Provider
	// Policy says whose API key a call searches with (PolicyShared when
	// empty): per_agent and per_agent_or_shared need a KeyedProvider and
	// Keys.
	Policy upstream.Policy
	// Shared reports whether Provider holds a key of its own, which
	// per_agent_or_shared falls back to.
	Shared bool
	// Keys obtains each agent's own key (per_agent policies).
	Keys Keys
	// Log receives the service's events.
	Log *slog.Logger
}

// Service implements toolmesh.search.v1.SearchService.
type Service struct {
	provider Provider
	policy   upstream.Policy
	shared   bool
	keyed    KeyedProvider // per_agent policies
	keys     Keys
	log      *slog.Logger
}

var _ searchv1connect.SearchServiceHandler = (*Service)(nil)

// New returns the service. Under the per_agent policies the provider
// must be a KeyedProvider and Keys configured (the command checks).
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Policy == "" {
		cfg.Policy = upstream.PolicyShared
	}
	k, _ := cfg.Provider.(KeyedProvider)
	return &Service{provider: cfg.Provider, policy: cfg.Policy, shared: cfg.Shared, keyed: k, keys: cfg.Keys, log: cfg.Log}
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	return server.Register(searchv1connect.SearchServiceName, searchv1connect.SearchServiceHandler(s), searchv1connect.NewSearchServiceHandler, searchv1.RegisterSearchServiceHandler)
}

// Web implements SearchService.Web.
func (s *Service) Web(ctx context.Context, req *searchv1.WebRequest) (*searchv1.WebResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	p, err := s.providerFor(ctx)
	if err != nil {
		return nil, err
	}
	count := int(req.GetCount())
	if count == 0 {
		count = DefaultCount
	}
	found, err := p.Search(ctx, Query{Text: req.GetQuery(), Count: count, Language: req.GetLanguage()})
	if err != nil {
		return nil, s.providerError(ctx, err)
	}
	out := &searchv1.WebResponse{Provider: p.Name()}
	for i, r := range found {
		if i == count {
			break
		}
		out.Results = append(out.Results, &searchv1.WebResult{Rank: int32(i + 1), Title: r.Title, Url: r.URL, Snippet: r.Snippet, Source: r.Source})
	}
	return out, nil
}

// providerError maps a provider's failure to what the caller can act on.
func (s *Service) providerError(ctx context.Context, err error) error {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe) && (pe.Status == http.StatusTooManyRequests):
		return toolcall.RateLimited(fmt.Errorf("the search provider's rate limit is reached: %s", pe.Message), pe.RetryAfter)
	case errors.As(err, &pe) && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden):
		s.log.WarnContext(ctx, "search.credentials_refused", "provider", pe.Provider, "status", pe.Status)
		return mesh.NewCapabilityGapError(GapCredentials, fmt.Errorf("the search provider refuses this mesh's requests (%d: %s); check the search service's API key or instance settings", pe.Status, pe.Message))
	case errors.As(err, &pe) && pe.Status >= 500:
		return toolcall.WithRetryAfter(connect.NewError(connect.CodeUnavailable, fmt.Errorf("the search provider failed: %s", pe.Message)), pe.RetryAfter)
	case errors.As(err, &pe):
		s.log.ErrorContext(ctx, "search.provider_refused", "provider", pe.Provider, "status", pe.Status, "message", pe.Message)
		return connect.NewError(connect.CodeInternal, fmt.Errorf("the search provider refused the query (%d): %s", pe.Status, pe.Message))
	case errors.Is(err, egress.ErrRefused):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the search provider's address is refused: %s", egress.DescribeError(err)))
	case egress.IsTimeout(err) || errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the search provider did not answer in time"))
	}
	s.log.WarnContext(ctx, "search.provider_failed", "error", egress.DescribeError(err))
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the search provider could not be reached: %s", egress.DescribeError(err)))
}
