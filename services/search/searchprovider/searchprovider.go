// Package searchprovider holds the web search providers the search service
// can use: the Brave Search API and a SearXNG instance's JSON API. Both
// reach their endpoint through an egress-guarded client (timeouts, a
// response size cap, no private addresses unless allowed).
package searchprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/services/search"
)

// maxSnippet bounds a result's snippet, in characters.
const maxSnippet = 500

// maxBody bounds a provider's answer.
const maxBody = 2 << 20

// newClient is the HTTP client of a provider.
func newClient(policy egress.Policy, timeout time.Duration) *http.Client {
	return policy.Client(egress.ClientOptions{Timeout: timeout, MaxResponseBytes: maxBody})
}

// get sends a GET to u with headers and decodes a 200 answer into out; any
// other status is a *search.ProviderError whose message is errMessage of
// the body.
func get(ctx context.Context, c *http.Client, provider, u string, headers http.Header, out any, errMessage func([]byte) string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%s: build request: %w", provider, err)
	}
	for k, v := range headers {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: read answer: %w", provider, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := errMessage(body)
		if msg == "" {
			msg = clip(strings.TrimSpace(string(body)), 200)
		}
		return &search.ProviderError{Provider: provider, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header), Message: msg}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return &search.ProviderError{Provider: provider, Status: http.StatusBadGateway, Message: "the answer is not the JSON this client reads: " + err.Error()}
	}
	return nil
}

// retryAfter reads Retry-After, else the first window of Brave's
// X-RateLimit-Reset ("1, 1419704": seconds until each limit resets).
func retryAfter(h http.Header) time.Duration {
	if d := egress.RetryAfter(h, time.Now()); d > 0 {
		return d
	}
	first, _, _ := strings.Cut(h.Get("X-RateLimit-Reset"), ",")
	var secs int
	if _, err := fmt.Sscanf(strings.TrimSpace(first), "%d", &secs); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	return 0
}

var tags = regexp.MustCompile(`<[^>]*>`)

// plain turns a provider's HTML-marked snippet into plain text.
func plain(s string) string {
	s = html.UnescapeString(tags.ReplaceAllString(s, ""))
	return clip(strings.Join(strings.Fields(s), " "), maxSnippet)
}

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// host is the host name of a result's URL.
func host(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
