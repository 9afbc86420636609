package searchprovider

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/services/search"
)

// SearXNGConfig configures the SearXNG client.
type SearXNGConfig struct {
	// URL is the instance's base URL, e.g. "https://searx.example.org".
	// The instance must allow the json format (search.formats in its
	// settings.yml). Required.
	URL string
	// Egress guards the instance's address.
	Egress egress.Policy
	// Timeout bounds one search (10s when zero).
	Timeout time.Duration
}

// SearXNG searches with a SearXNG instance's JSON API.
type SearXNG struct {
	endpoint string
	client   *http.Client
}

// NewSearXNG returns the SearXNG provider.
func NewSearXNG(cfg SearXNGConfig) (*SearXNG, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("searxng: the instance URL must be an http or https URL")
	}
	return &SearXNG{endpoint: strings.TrimRight(cfg.URL, "/") + "/search", client: newClient(cfg.Egress, cfg.Timeout)}, nil
}

// Name implements search.Provider.
func (*SearXNG) Name() string { return "searxng" }

type searxAnswer struct {
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

// Search implements search.Provider. SearXNG returns one page of merged
// engine results (about 10 to 20); the first q.Count are kept.
func (s *SearXNG) Search(ctx context.Context, q search.Query) ([]search.Result, error) {
	v := url.Values{"q": {q.Text}, "format": {"json"}, "pageno": {"1"}}
	if q.Language != "" {
		v.Set("language", q.Language)
	}
	var ans searxAnswer
	if err := get(ctx, s.client, s.Name(), s.endpoint+"?"+v.Encode(), nil, &ans, func([]byte) string { return "" }); err != nil {
		var pe *search.ProviderError
		if errors.As(err, &pe) && pe.Status == http.StatusForbidden {
			pe.Message = "the instance does not serve the json format; enable it under search.formats in its settings.yml"
		}
		return nil, err
	}
	out := make([]search.Result, 0, min(len(ans.Results), q.Count))
	for _, r := range ans.Results {
		if len(out) == q.Count {
			break
		}
		out = append(out, search.Result{Title: plain(r.Title), URL: r.URL, Snippet: plain(r.Content), Source: host(r.URL)})
	}
	return out, nil
}
