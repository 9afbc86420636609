package main

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1/githubv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1/searchv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/services/github"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
)

// integrationsEdge serves the search and github services (search over p,
// github with no token) behind an edge and connects to it.
func integrationsEdge(t *testing.T, p search.Provider) (*edge.Edge, func(name string, args map[string]any) envelope) {
	t.Helper()
	gh, err := github.New(github.Config{})
	if err != nil {
		t.Fatal(err)
	}
	searchSrv := servertest.Start(t, search.New(search.Config{Provider: p}).Registration())
	githubSrv := servertest.Start(t, gh.Registration())
	client := servertest.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	e, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			searchv1connect.SearchServiceName: searchSrv.URL,
			githubv1connect.GitHubServiceName: githubSrv.URL,
		},
		DevAgent:   "researcher",
		HTTPClient: client,
	})
	return e, func(name string, args map[string]any) envelope { return callTool(t, s, name, args) }
}

func TestUnconfiguredIntegrationsAnswerCapabilityGap(t *testing.T) {
	e, call := integrationsEdge(t, nil)

	// Reads are open to every agent; every GitHub write needs a grant.
	for _, tool := range e.Registry().Tools() {
		if tool.Service != githubv1connect.GitHubServiceName {
			continue
		}
		if write := tool.Kind != toolv1.Kind_KIND_READ; write != tool.Privileged {
			t.Errorf("%s: kind %v, privileged %v; want writes, and only writes, privileged", tool.Name, tool.Kind, tool.Privileged)
		}
	}
	for name, want := range map[string]struct {
		args     map[string]any
		gap, env string
	}{
		"search_web":        {map[string]any{"query": "go generics"}, search.GapProvider, "TOOLMESH_SEARCH_PROVIDER"},
		"github_get_repo":   {map[string]any{"owner": "golang", "repo": "go"}, github.GapToken, "TOOLMESH_GITHUB_TOKEN"},
		"github_star_repo":  {map[string]any{"owner": "golang", "repo": "go"}, github.GapToken, "TOOLMESH_GITHUB_TOKEN"},
		"github_list_pulls": {map[string]any{"owner": "golang", "repo": "go"}, github.GapToken, "TOOLMESH_GITHUB_TOKEN"},
	} {
		env := call(name, want.args)
		if env.Status != "error" || env.DomainCode != "capability_gap" || env.Gap != want.gap || !strings.Contains(env.Message, want.env) {
			t.Errorf("%s unconfigured: %+v, want capability_gap %s naming %s", name, env, want.gap, want.env)
		}
	}
}

func TestSearchThroughTheEdge(t *testing.T) {
	var limited atomic.Bool
	brave := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusOK
		if limited.Load() {
			status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(status)
		if status != http.StatusOK {
			_, _ = w.Write([]byte(`{"type":"ErrorResponse","error":{"status":429,"code":"RATE_LIMITED","detail":"Request rate limit exceeded for plan."}}`))
			return
		}
		_, _ = w.Write([]byte(`{"type":"search","web":{"type":"search","results":[
			{"title":"The Go Programming Language","url":"https://go.dev/","description":"Go is an <strong>open source</strong> language.","profile":{"name":"Go"},"meta_url":{"hostname":"go.dev"}},
			{"title":"golang/go","url":"https://github.com/golang/go","description":"The Go repository.","profile":{"name":""},"meta_url":{"hostname":"github.com"}}]}}`))
	}))
	t.Cleanup(brave.Close)
	p, err := searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: "k", URL: brave.URL,
		Egress: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	if err != nil {
		t.Fatal(err)
	}
	_, call := integrationsEdge(t, p)

	var data struct {
		Provider string
		Results  []struct {
			Rank                        int
			Title, URL, Snippet, Source string
		}
	}
	okData(t, call("search_web", map[string]any{"query": "go", "count": 2}), &data)
	if data.Provider != "brave" || len(data.Results) != 2 || data.Results[0].Rank != 1 || data.Results[0].Snippet != "Go is an open source language." ||
		data.Results[1].Source != "github.com" || data.Results[1].URL != "https://github.com/golang/go" {
		t.Errorf("search_web = %+v", data)
	}

	limited.Store(true)
	if env := call("search_web", map[string]any{"query": "go"}); env.DomainCode != "rate_limited" || env.RetryAfterSeconds != 7 {
		t.Errorf("search_web over the provider's quota: %+v, want rate_limited with retry_after_seconds 7", env)
	}
}
