package search_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1/searchv1connect"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
)

// loopback lets the providers reach the in-test servers.
var loopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// fixture reads a recorded-shape answer from searchprovider/testdata.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("searchprovider", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// api is an in-test search API: it records each request and answers with
// the status, headers and body the test set.
type api struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []*http.Request
	status   int
	header   http.Header
	body     []byte
}

func newAPI(t *testing.T, body []byte) *api {
	a := &api{status: http.StatusOK, header: http.Header{}, body: body}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.requests = append(a.requests, r.Clone(context.Background()))
		for k, v := range a.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *api) answer(status int, header http.Header, body []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status, a.header, a.body = status, header, body
}

func (a *api) last(t *testing.T) *http.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.requests) == 0 {
		t.Fatal("the search API got no request")
	}
	return a.requests[len(a.requests)-1]
}

func brave(t *testing.T, a *api) search.Provider {
	t.Helper()
	p, err := searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: "test-key", URL: a.srv.URL + "/res/v1/web/search", Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func searxng(t *testing.T, a *api) search.Provider {
	t.Helper()
	p, err := searchprovider.NewSearXNG(searchprovider.SearXNGConfig{URL: a.srv.URL + "/", Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eachProtocol runs fn against the service over provider p (nil: none),
// once over Connect and once over gRPC.
func eachProtocol(t *testing.T, p search.Provider, fn func(t *testing.T, c searchv1connect.SearchServiceClient)) {
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		return servertest.Start(t, search.New(search.Config{Provider: p}).Registration())
	}, searchv1connect.NewSearchServiceClient, fn)
}

func as() context.Context { return servertest.As(context.Background(), "researcher") }

func TestBraveResultsAreTypedAndRanked(t *testing.T) {
	a := newAPI(t, fixture(t, "brave_web.json"))
	eachProtocol(t, brave(t, a), func(t *testing.T, c searchv1connect.SearchServiceClient) {
		res, err := c.Web(as(), &searchv1.WebRequest{Query: "temporal workflow versioning", Count: 5, Language: "en"})
		if err != nil {
			t.Fatal(err)
		}
		want := &searchv1.WebResponse{Provider: "brave", Results: []*searchv1.WebResult{
			{Rank: 1, Title: "Versioning - Go SDK | Temporal Platform Documentation", Url: "https://docs.temporal.io/develop/go/versioning",
				Snippet: "The Temporal Platform requires that Workflow code is deterministic. Use versioning & patching to change it safely.", Source: "Temporal"},
			{Rank: 2, Title: "Worker Versioning: how to roll out workflow changes", Url: "https://temporal.io/blog/worker-versioning",
				Snippet: "A walk through pinned and auto-upgrade workflows…", Source: "temporal.io"},
			{Rank: 3, Title: "workflow.GetVersion - go.temporal.io/sdk", Url: "https://pkg.go.dev/go.temporal.io/sdk/workflow#GetVersion",
				Snippet: "GetVersion is used to safely perform backwards incompatible changes to workflow definitions.", Source: "Go Packages"},
		}}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
		r := a.last(t)
		q := r.URL.Query()
		if r.URL.Path != "/res/v1/web/search" || q.Get("q") != "temporal workflow versioning" || q.Get("count") != "5" || q.Get("search_lang") != "en" ||
			r.Header.Get("X-Subscription-Token") != "test-key" || r.Header.Get("Accept") != "application/json" {
			t.Errorf("Brave got %s %s with token %q, Accept %q; want the query, count 5, search_lang en, the key and JSON",
				r.URL.Path, r.URL.RawQuery, r.Header.Get("X-Subscription-Token"), r.Header.Get("Accept"))
		}
	})
}

func TestCountBoundsTheResults(t *testing.T) {
	a := newAPI(t, fixture(t, "brave_web.json"))
	eachProtocol(t, brave(t, a), func(t *testing.T, c searchv1connect.SearchServiceClient) {
		// The provider answers with more than asked for: only count are kept.
		res, err := c.Web(as(), &searchv1.WebRequest{Query: "versioning", Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetResults()) != 2 || res.GetResults()[1].GetRank() != 2 {
			t.Errorf("got %d results, want the first 2", len(res.GetResults()))
		}
		if got := a.last(t).URL.Query().Get("count"); got != "2" {
			t.Errorf("asked Brave for count %q, want 2", got)
		}
		// Without a count, the default.
		if _, err := c.Web(as(), &searchv1.WebRequest{Query: "versioning"}); err != nil {
			t.Fatal(err)
		}
		if q := a.last(t).URL.Query(); q.Get("count") != "10" || q.Has("search_lang") {
			t.Errorf("default query = %s, want count 10 and no language", a.last(t).URL.RawQuery)
		}
	})
}

func TestSearXNGResults(t *testing.T) {
	a := newAPI(t, fixture(t, "searxng.json"))
	eachProtocol(t, searxng(t, a), func(t *testing.T, c searchv1connect.SearchServiceClient) {
		res, err := c.Web(as(), &searchv1.WebRequest{Query: "temporal workflow versioning", Language: "de"})
		if err != nil {
			t.Fatal(err)
		}
		want := &searchv1.WebResponse{Provider: "searxng", Results: []*searchv1.WebResult{
			{Rank: 1, Title: "Versioning - Go SDK | Temporal Platform Documentation", Url: "https://docs.temporal.io/develop/go/versioning",
				Snippet: "The Temporal Platform requires that Workflow code is deterministic & safe to replay.", Source: "docs.temporal.io"},
			{Rank: 2, Title: "workflow package - go.temporal.io/sdk/workflow", Url: "https://pkg.go.dev/go.temporal.io/sdk/workflow",
				Snippet: "Package workflow contains functions and types used to implement Temporal workflows.", Source: "pkg.go.dev"},
		}}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
		r := a.last(t)
		if q := r.URL.Query(); r.URL.Path != "/search" || q.Get("format") != "json" || q.Get("q") != "temporal workflow versioning" || q.Get("language") != "de" {
			t.Errorf("SearXNG got %s?%s, want /search with format=json, the query and language de", r.URL.Path, r.URL.RawQuery)
		}
	})
}

func TestUnconfiguredIsACapabilityGap(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c searchv1connect.SearchServiceClient) {
		_, err := c.Web(as(), &searchv1.WebRequest{Query: "anything"})
		gap, ok := mesh.CapabilityGap(err)
		if !ok || gap != search.GapProvider || !strings.Contains(err.Error(), "TOOLMESH_SEARCH_PROVIDER") {
			t.Errorf("error = %v, want capability gap %s naming what to configure", err, search.GapProvider)
		}
		env := toolcall.FromError(context.Background(), logging.Discard(), "search_web", err)
		if env.DomainCode != toolcall.CodeCapabilityGap || env.Gap != search.GapProvider {
			t.Errorf("envelope = %+v, want capability_gap %s", env, search.GapProvider)
		}
	})
}

func TestBlankQueryIsRefused(t *testing.T) {
	a := newAPI(t, fixture(t, "brave_web.json"))
	eachProtocol(t, brave(t, a), func(t *testing.T, c searchv1connect.SearchServiceClient) {
		_, err := c.Web(as(), &searchv1.WebRequest{Query: " \t "})
		if vs := servertest.Violations(t, err); !slices.Equal(vs["query"], []string{"string.non_blank"}) {
			t.Errorf("a blank query: violations %v, want query: string.non_blank", vs)
		}
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.requests) != 0 {
		t.Errorf("the search API got %d requests for blank queries", len(a.requests))
	}
}

func TestProviderRefusalsMapToDomainCodes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		provider   func(*testing.T, *api) search.Provider
		status     int
		header     http.Header
		body       []byte
		code       string
		retryAfter int
		says       string
	}{
		{"brave rate limit with Retry-After", brave, http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}},
			fixture(t, "brave_rate_limited.json"), toolcall.CodeRateLimited, 7, "Request rate limit exceeded"},
		{"brave rate limit with X-RateLimit-Reset", brave, http.StatusTooManyRequests, http.Header{"X-Ratelimit-Reset": {"1, 1419704"}},
			fixture(t, "brave_rate_limited.json"), toolcall.CodeRateLimited, 1, "RATE_LIMITED"},
		{"brave refuses the key", brave, http.StatusUnauthorized, nil, fixture(t, "brave_unauthorized.json"),
			toolcall.CodeCapabilityGap, 0, "subscription token is invalid"},
		{"searxng without the json format", searxng, http.StatusForbidden, nil, []byte("Forbidden"),
			toolcall.CodeCapabilityGap, 0, "settings.yml"},
		{"provider down", brave, http.StatusBadGateway, nil, []byte("bad gateway"), toolcall.CodeUnavailable, 0, "failed"},
		{"provider answers what is not JSON", brave, http.StatusOK, nil, []byte("<html>"), toolcall.CodeUnavailable, 0, "not the JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, nil)
			a.answer(tc.status, tc.header, tc.body)
			srv := servertest.Start(t, search.New(search.Config{Provider: tc.provider(t, a)}).Registration())
			c := searchv1connect.NewSearchServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
			_, err := c.Web(as(), &searchv1.WebRequest{Query: "q"})
			env := toolcall.FromError(context.Background(), logging.Discard(), "search_web", err)
			if env.DomainCode != tc.code || env.RetryAfterSeconds != tc.retryAfter || !strings.Contains(env.Message, tc.says) {
				t.Errorf("envelope = %+v, want %s with retry_after_seconds %d saying %q", env, tc.code, tc.retryAfter, tc.says)
			}
		})
	}
}

func TestProviderAddressesPassTheEgressGuard(t *testing.T) {
	a := newAPI(t, fixture(t, "brave_web.json"))
	p, err := searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: "k", URL: a.srv.URL, Egress: egress.Policy{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, search.New(search.Config{Provider: p}).Registration())
	c := searchv1connect.NewSearchServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	_, err = c.Web(as(), &searchv1.WebRequest{Query: "q"})
	if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("error = %v, want failed_precondition naming the refused loopback address", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.requests) != 0 {
		t.Errorf("the provider got %d requests through a refused address", len(a.requests))
	}
}

func TestOversizedAnswersAreCut(t *testing.T) {
	a := newAPI(t, nil)
	a.answer(http.StatusOK, nil, []byte(`{"web":{"results":[{"title":"`+strings.Repeat("x", 3<<20)+`"}]}}`))
	srv := servertest.Start(t, search.New(search.Config{Provider: brave(t, a)}).Registration())
	c := searchv1connect.NewSearchServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	_, err := c.Web(as(), &searchv1.WebRequest{Query: "q"})
	if servertest.Code(t, err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "larger") {
		t.Errorf("error = %v, want unavailable saying the answer is too large", err)
	}
}
