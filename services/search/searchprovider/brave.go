package searchprovider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/services/search"
)

// BraveURL is the Brave Search API's web search endpoint.
const BraveURL = "https://api.search.brave.com/res/v1/web/search"

// BraveConfig configures the Brave Search API client.
type BraveConfig struct {
	// APIKey is the subscription token (X-Subscription-Token). Required.
	APIKey string
	// URL is the web search endpoint (BraveURL when empty).
	URL string
	// Egress guards the endpoint's address.
	Egress egress.Policy
	// Timeout bounds one search (10s when zero).
	Timeout time.Duration
	// KeysPerAgent: each call brings its agent's own key (WithKey), so
	// APIKey may be empty (no shared key).
	KeysPerAgent bool
}

// Brave searches with the Brave Search API.
type Brave struct {
	key    string
	url    string
	client *http.Client
}

// NewBrave returns the Brave provider.
func NewBrave(cfg BraveConfig) (*Brave, error) {
	if cfg.APIKey == "" && !cfg.KeysPerAgent {
		return nil, errors.New("brave: an API key is required")
	}
	if cfg.URL == "" {
		cfg.URL = BraveURL
	}
	if _, err := url.Parse(cfg.URL); err != nil {
		return nil, errors.New("brave: the endpoint URL does not parse")
	}
	return &Brave{key: cfg.APIKey, url: cfg.URL, client: newClient(cfg.Egress, cfg.Timeout)}, nil
}

// Name implements search.Provider.
func (*Brave) Name() string { return "brave" }

// braveAnswer is the part of a web search answer this client reads.
type braveAnswer struct {
	Web struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
			Profile     struct {
				Name string `json:"name"`
			} `json:"profile"`
			MetaURL struct {
				Hostname string `json:"hostname"`
			} `json:"meta_url"`
		} `json:"results"`
	} `json:"web"`
}

// WithKey implements search.KeyedProvider: the same endpoint, searched
// with key.
func (b *Brave) WithKey(key string) search.Provider {
	c := *b
	c.key = key
	return &c
}

// Search implements search.Provider.
func (b *Brave) Search(ctx context.Context, q search.Query) ([]search.Result, error) {
	v := url.Values{"q": {q.Text}, "count": {strconv.Itoa(q.Count)}}
	if q.Language != "" {
		v.Set("search_lang", q.Language)
	}
	var ans braveAnswer
	err := get(ctx, b.client, b.Name(), b.url+"?"+v.Encode(), http.Header{"X-Subscription-Token": {b.key}}, &ans, braveError)
	if err != nil {
		return nil, err
	}
	out := make([]search.Result, 0, len(ans.Web.Results))
	for _, r := range ans.Web.Results {
		source := r.Profile.Name
		if source == "" {
			source = r.MetaURL.Hostname
		}
		if source == "" {
			source = host(r.URL)
		}
		out = append(out, search.Result{Title: plain(r.Title), URL: r.URL, Snippet: plain(r.Description), Source: source})
	}
	return out, nil
}

// braveError reads the detail of Brave's error answer
// ({"type":"ErrorResponse","error":{"code":...,"detail":...}}).
func braveError(body []byte) string {
	var e struct {
		Error struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Detail == "" {
		return ""
	}
	return clip(e.Error.Code+": "+e.Error.Detail, 300)
}
