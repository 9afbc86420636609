package search

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
)

// DefaultMaxQueries is how many searches deep research runs when the
// request names no maximum.
const DefaultMaxQueries = 5

// toolDeepResearch names the tool in the envelopes of failed queries.
const toolDeepResearch = "search_deep_research"

// DeepResearch implements SearchService.DeepResearch: the queries run at
// once against the provider, and their results are merged by normalised
// URL. A query that fails is reported beside the others' results; only
// when every query fails does the call fail, with the first failure.
func (s *Service) DeepResearch(ctx context.Context, req *searchv1.DeepResearchRequest) (*searchv1.DeepResearchResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	p, err := s.providerFor(ctx)
	if err != nil {
		return nil, err
	}
	queries := req.GetQueries()
	if len(queries) == 0 {
		queries = DeriveQueries(req.GetQuestion())
	}
	n := int(req.GetMaxQueries())
	if n == 0 {
		n = DefaultMaxQueries
	}
	queries = queries[:min(n, len(queries))]
	count := int(req.GetCountPerQuery())
	if count == 0 {
		count = DefaultCount
	}

	found := make([][]Result, len(queries))
	failed := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() {
			res, err := p.Search(ctx, Query{Text: q, Count: count, Language: req.GetLanguage()})
			if err != nil {
				failed[i] = s.providerError(ctx, err)
				return
			}
			found[i] = res[:min(count, len(res))]
		})
	}
	wg.Wait()

	out := &searchv1.DeepResearchResponse{Provider: p.Name()}
	var first error
	nfailed := 0
	for i, q := range queries {
		o := &searchv1.QueryOutcome{Query: q, ResultCount: int32(len(found[i]))}
		if err := failed[i]; err != nil {
			first = cmp.Or(first, err)
			nfailed++
			o.DomainCode, o.Message = s.queryFailure(ctx, err)
		}
		out.Queries = append(out.Queries, o)
	}
	if nfailed == len(queries) {
		return nil, first
	}
	out.Results = Merge(queries, found)
	s.log.InfoContext(ctx, "search.deep_research", "queries", len(queries), "failed_queries", nfailed, "results", len(out.Results))
	return out, nil
}

// queryFailure is the domain code and message of a query that failed with
// err, one of providerError's errors, as a caller of search_web would read
// them: the service chose the message, so it is passed on.
func (s *Service) queryFailure(ctx context.Context, err error) (code, message string) {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		wire := connect.NewWireError(ce.Code(), errors.New(ce.Message()))
		for _, d := range ce.Details() {
			wire.AddDetail(d)
		}
		err = wire
	}
	env := toolcall.FromError(ctx, s.log, toolDeepResearch, err)
	return env.DomainCode, env.Message
}

// gap is the capability gap of a service without a provider.
func (s *Service) gap() error {
	return mesh.NewCapabilityGapError(GapProvider, errors.New("web search is not configured on this mesh: "+
		"set TOOLMESH_SEARCH_PROVIDER=brave and TOOLMESH_SEARCH_BRAVE_API_KEY, or TOOLMESH_SEARCH_PROVIDER=searxng and TOOLMESH_SEARCH_SEARXNG_URL, for the search service"))
}

// Merge merges the results of queries (found[i] are the results of
// queries[i], best first) into one list, one result per normalised URL
// (NormalizeURL), best first: found by more queries, then with a better
// best rank, then found earlier. Each result keeps what the first query
// that found it said of it, and names every query that found it.
func Merge(queries []string, found [][]Result) []*searchv1.ResearchResult {
	type merged struct {
		r     *searchv1.ResearchResult
		order int
	}
	byURL := map[string]*merged{}
	var all []*merged
	for i, results := range found {
		for rank, r := range results {
			key := NormalizeURL(r.URL)
			m, ok := byURL[key]
			if !ok {
				m = &merged{r: &searchv1.ResearchResult{Title: r.Title, Url: r.URL, Snippet: r.Snippet, Source: r.Source, BestRank: int32(rank + 1)}, order: len(all)}
				byURL[key] = m
				all = append(all, m)
			}
			if !slices.Contains(m.r.Queries, queries[i]) {
				m.r.Queries = append(m.r.Queries, queries[i])
			}
			m.r.BestRank = min(m.r.BestRank, int32(rank+1))
		}
	}
	sort.SliceStable(all, func(a, b int) bool {
		x, y := all[a], all[b]
		if len(x.r.Queries) != len(y.r.Queries) {
			return len(x.r.Queries) > len(y.r.Queries)
		}
		if x.r.BestRank != y.r.BestRank {
			return x.r.BestRank < y.r.BestRank
		}
		return x.order < y.order
	})
	out := make([]*searchv1.ResearchResult, len(all))
	for i, m := range all {
		m.r.Rank = int32(i + 1)
		out[i] = m.r
	}
	return out
}

// tracking reports whether a query parameter says where a click came
// from rather than which page it is.
func tracking(param string) bool {
	p := strings.ToLower(param)
	return strings.HasPrefix(p, "utm_") || slices.Contains([]string{"gclid", "fbclid", "msclkid", "mc_cid", "mc_eid", "ref_src"}, p)
}

// NormalizeURL is the key two results share when they are the same page:
// the host in lower case without "www." and a default port, the path
// without a trailing slash, and the query parameters sorted, without
// tracking parameters; the scheme and the fragment do not count. A URL
// that does not parse is its own key.
func NormalizeURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return raw
	}
	host := strings.TrimPrefix(strings.ToLower(u.Hostname()), "www.")
	if p := u.Port(); p != "" && p != "80" && p != "443" {
		host += ":" + p
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	q := u.Query()
	for k := range q {
		if tracking(k) {
			q.Del(k)
		}
	}
	key := host + path
	if enc := q.Encode(); enc != "" { // Encode sorts by key
		key += "?" + enc
	}
	return key
}

var (
	wordRE     = regexp.MustCompile(`[\p{L}\p{N}][\p{L}\p{N}+#.'-]*`)
	splitterRE = regexp.MustCompile(`(?i)\s+(?:vs\.?|versus|and|or)\s+|[,;]\s*`)
)

// DeriveQueries turns a question into searches: the question itself, its
// key words (without question words and other stop words) when they
// differ from it, and, for a question that compares or lists things
// ("X vs Y", "X, Y and Z"), each part's key words. Duplicates are dropped;
// the order is the order above.
func DeriveQueries(question string) []string {
	q := strings.Join(strings.Fields(question), " ")
	out := []string{q}
	add := func(s string) {
		if s != "" && !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, s) }) {
			out = append(out, s)
		}
	}
	add(keyWords(q))
	if parts := splitterRE.Split(q, -1); len(parts) > 1 {
		for _, p := range parts {
			add(keyWords(p))
		}
	}
	return out
}

// keyWords is s without stop words and punctuation around words.
func keyWords(s string) string {
	var kept []string
	for _, w := range wordRE.FindAllString(s, -1) {
		w = strings.TrimRight(w, ".'-")
		if !isStopWord(strings.ToLower(w)) {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, " ")
}

func isStopWord(w string) bool {
	switch w {
	case "a", "an", "the", "is", "are", "was", "were", "be", "been", "do", "does", "did", "can", "could", "should", "would",
		"will", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "of", "in", "on", "at", "to", "for",
		"from", "by", "with", "about", "into", "than", "then", "it", "its", "this", "that", "these", "those", "there",
		"i", "we", "you", "my", "our", "your", "me", "us", "and", "or", "vs", "versus", "any", "some", "best", "between":
		return true
	}
	return false
}
