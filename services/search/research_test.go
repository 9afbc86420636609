package search_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1/searchv1connect"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
)

// engine is an in-test SearXNG instance that answers each query with its
// own results, fails the queries it is told to, and holds every answer
// until `together` queries have arrived, so a test sees whether the
// queries ran at the same time.
type engine struct {
	srv *httptest.Server

	mu       sync.Mutex
	results  map[string][]string // query -> result URLs, best first
	fail     map[string]int      // query -> HTTP status
	seen     []string
	together int
	arrived  chan struct{}
}

func newEngine(t *testing.T, together int) *engine {
	e := &engine{results: map[string][]string{}, fail: map[string]int{}, together: together, arrived: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("q")
		e.mu.Lock()
		e.seen = append(e.seen, q)
		if len(e.seen) == e.together {
			close(e.arrived)
		}
		urls, status := e.results[q], e.fail[q]
		e.mu.Unlock()
		select {
		case <-e.arrived:
		case <-time.After(30 * time.Second):
			http.Error(w, "the other queries never came", http.StatusGatewayTimeout)
			return
		}
		if status != 0 {
			http.Error(w, "engine trouble", status)
			return
		}
		type result struct {
			URL     string `json:"url"`
			Title   string `json:"title"`
			Content string `json:"content"`
		}
		var out struct {
			Results []result `json:"results"`
		}
		for _, u := range urls {
			out.Results = append(out.Results, result{URL: u, Title: "title of " + u + " for " + q, Content: "about " + q})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) provider(t *testing.T) search.Provider {
	t.Helper()
	p, err := searchprovider.NewSearXNG(searchprovider.SearXNGConfig{URL: e.srv.URL + "/", Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// research runs fn against the service over a new engine (made ready by
// setup, holding answers until together queries arrived), once over
// Connect and once over gRPC.
func research(t *testing.T, together int, setup func(e *engine), fn func(t *testing.T, c searchv1connect.SearchServiceClient, e *engine)) {
	var e *engine
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		e = newEngine(t, together)
		setup(e)
		return servertest.Start(t, search.New(search.Config{Provider: e.provider(t)}).Registration())
	}, searchv1connect.NewSearchServiceClient, func(t *testing.T, c searchv1connect.SearchServiceClient) { fn(t, c, e) })
}

func TestDeepResearchMergesConcurrentQueries(t *testing.T) {
	// The engine answers none of the three queries until all three have
	// arrived: the research runs them at once, or fails.
	research(t, 3, func(e *engine) {
		e.results["temporal versioning"] = []string{"https://docs.temporal.io/develop/go/versioning", "https://example.com/a?utm_source=x"}
		e.results["workflow patching"] = []string{"http://www.docs.temporal.io/develop/go/versioning/#patching", "https://example.com/b"}
		e.fail["temporal worker deployments"] = http.StatusBadGateway
	}, func(t *testing.T, c searchv1connect.SearchServiceClient, _ *engine) {
		res, err := c.DeepResearch(as(), &searchv1.DeepResearchRequest{
			Question: "how do I change a running Temporal workflow?",
			Queries:  []string{"temporal versioning", "workflow patching", "temporal worker deployments"},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := &searchv1.DeepResearchResponse{
			Provider: "searxng",
			Results: []*searchv1.ResearchResult{
				{Rank: 1, Url: "https://docs.temporal.io/develop/go/versioning", Title: "title of https://docs.temporal.io/develop/go/versioning for temporal versioning",
					Snippet: "about temporal versioning", Source: "docs.temporal.io", Queries: []string{"temporal versioning", "workflow patching"}, BestRank: 1},
				{Rank: 2, Url: "https://example.com/a?utm_source=x", Title: "title of https://example.com/a?utm_source=x for temporal versioning",
					Snippet: "about temporal versioning", Source: "example.com", Queries: []string{"temporal versioning"}, BestRank: 2},
				{Rank: 3, Url: "https://example.com/b", Title: "title of https://example.com/b for workflow patching",
					Snippet: "about workflow patching", Source: "example.com", Queries: []string{"workflow patching"}, BestRank: 2},
			},
			Queries: []*searchv1.QueryOutcome{
				{Query: "temporal versioning", ResultCount: 2},
				{Query: "workflow patching", ResultCount: 2},
				{Query: "temporal worker deployments", DomainCode: "unavailable", Message: "the search provider failed: engine trouble"},
			},
		}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("research (-want +got):\n%s", diff)
		}
	})
}

func TestDeepResearchDerivesQueriesFromTheQuestion(t *testing.T) {
	got := search.DeriveQueries("  Which is faster:  Temporal vs Cadence for durable workflows? ")
	want := []string{
		"Which is faster: Temporal vs Cadence for durable workflows?",
		"faster Temporal Cadence durable workflows",
		"faster Temporal",
		"Cadence durable workflows",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DeriveQueries (-want +got):\n%s", diff)
	}

	research(t, 2, func(e *engine) {
		e.results["What is MCP?"] = []string{"https://modelcontextprotocol.io/"}
		e.results["MCP"] = []string{"https://modelcontextprotocol.io", "https://github.com/modelcontextprotocol"}
	}, func(t *testing.T, c searchv1connect.SearchServiceClient, _ *engine) {
		res, err := c.DeepResearch(as(), &searchv1.DeepResearchRequest{Question: "What is MCP?"})
		if err != nil {
			t.Fatal(err)
		}
		var queries []string
		for _, q := range res.GetQueries() {
			queries = append(queries, q.GetQuery())
		}
		if !slices.Equal(queries, []string{"What is MCP?", "MCP"}) {
			t.Errorf("queries run = %q, want the question and its key word", queries)
		}
		if len(res.GetResults()) != 2 || !slices.Equal(res.GetResults()[0].GetQueries(), []string{"What is MCP?", "MCP"}) {
			t.Errorf("results = %v, want the page both found first, then the other", res.GetResults())
		}
	})
}

func TestDeepResearchStopsAtMaxQueries(t *testing.T) {
	research(t, 2, func(*engine) {}, func(t *testing.T, c searchv1connect.SearchServiceClient, e *engine) {
		res, err := c.DeepResearch(as(), &searchv1.DeepResearchRequest{Question: "q", Queries: []string{"one", "two", "three"}, MaxQueries: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetQueries()) != 2 {
			t.Errorf("ran %d queries, want 2", len(res.GetQueries()))
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if slices.Contains(e.seen, "three") {
			t.Errorf("the engine got %q, want no query past max_queries", e.seen)
		}
	})
}

func TestDeepResearchFailsWhenEveryQueryFails(t *testing.T) {
	research(t, 2, func(e *engine) {
		e.fail["one"], e.fail["two"] = http.StatusTooManyRequests, http.StatusBadGateway
	}, func(t *testing.T, c searchv1connect.SearchServiceClient, _ *engine) {
		_, err := c.DeepResearch(as(), &searchv1.DeepResearchRequest{Question: "q", Queries: []string{"one", "two"}})
		if err == nil || !strings.Contains(err.Error(), "rate limit") {
			t.Errorf("error = %v, want the first query's failure (the provider's rate limit)", err)
		}
	})
}

func TestDeepResearchUnconfiguredIsACapabilityGap(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c searchv1connect.SearchServiceClient) {
		_, err := c.DeepResearch(as(), &searchv1.DeepResearchRequest{Question: "anything"})
		if gap, ok := mesh.CapabilityGap(err); !ok || gap != search.GapProvider {
			t.Errorf("error = %v, want capability gap %s", err, search.GapProvider)
		}
	})
}

func TestNormalizeURL(t *testing.T) {
	same := [][]string{
		{"https://docs.temporal.io/a/b", "http://www.DOCS.temporal.io/a/b/", "https://docs.temporal.io:443/a/b#frag", "https://docs.temporal.io/a/b?utm_source=news&fbclid=1"},
		{"https://example.com/s?b=2&a=1", "https://example.com/s?a=1&b=2&gclid=x"},
	}
	for _, urls := range same {
		for _, u := range urls[1:] {
			if search.NormalizeURL(u) != search.NormalizeURL(urls[0]) {
				t.Errorf("NormalizeURL(%q) = %q, want the key of %q, %q", u, search.NormalizeURL(u), urls[0], search.NormalizeURL(urls[0]))
			}
		}
	}
	different := []string{"https://example.com/s?a=1", "https://example.com/s?a=2", "https://example.com/t", "https://example.com:8443/s?a=1", "https://example.org/s?a=1"}
	for i, a := range different {
		for _, b := range different[i+1:] {
			if search.NormalizeURL(a) == search.NormalizeURL(b) {
				t.Errorf("NormalizeURL(%q) = NormalizeURL(%q) = %q, want different pages kept apart", a, b, search.NormalizeURL(a))
			}
		}
	}
}
