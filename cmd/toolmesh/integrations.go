package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/github"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
)

// The integrations reach outside the mesh; each reads its settings from
// the environment (docs/integrations.md). Each one's outbound addresses
// pass the egress guard, which refuses loopback, private and link-local
// addresses unless <DOMAIN>_EGRESS_ALLOW lists them (for development, or
// an internal GitHub Enterprise or SearXNG).
const (
	searchProviderEnv    = "TOOLMESH_SEARCH_PROVIDER"
	searchBraveKeyEnv    = "TOOLMESH_SEARCH_BRAVE_API_KEY"
	searchBraveURLEnv    = "TOOLMESH_SEARCH_BRAVE_URL"
	searchSearXNGURLEnv  = "TOOLMESH_SEARCH_SEARXNG_URL"
	searchEgressAllowEnv = "TOOLMESH_SEARCH_EGRESS_ALLOW"
	githubTokenEnv       = "TOOLMESH_GITHUB_TOKEN"
	githubURLEnv         = "TOOLMESH_GITHUB_URL"
	githubEgressAllowEnv = "TOOLMESH_GITHUB_EGRESS_ALLOW"
	remoteEgressAllowEnv = "TOOLMESH_REMOTEAGENTS_EGRESS_ALLOW"
)

// egressPolicy reads the allowed internal prefixes of an integration from
// env and says so when there are any.
func egressPolicy(getenv func(string) string, env string, log *slog.Logger) (egress.Policy, error) {
	allow, err := egress.ParsePrefixes(getenv(env))
	if err != nil {
		return egress.Policy{}, fmt.Errorf("%s: %w", env, err)
	}
	if len(allow) > 0 {
		log.Warn("egress.allow", "setting", env, "allowed", prefixes(allow), "message", "outbound requests may reach these internal addresses")
	}
	return egress.Policy{Allow: allow}, nil
}

func prefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

// buildSearch serves web search with the provider TOOLMESH_SEARCH_PROVIDER
// names; without one, search_web answers capability_gap.
func buildSearch(_ context.Context, _ *sqldb.DB, deps serveDeps) (server.Service, error) {
	getenv, log := deps.Getenv, deps.Log
	policy, err := egressPolicy(getenv, searchEgressAllowEnv, log)
	if err != nil {
		return server.Service{}, err
	}
	var p search.Provider
	switch name := getenv(searchProviderEnv); name {
	case "":
		log.Warn("search.unconfigured", "message", "web search answers capability_gap: set "+searchProviderEnv+" (brave or searxng)")
	case "brave":
		if p, err = searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: getenv(searchBraveKeyEnv), URL: getenv(searchBraveURLEnv), Egress: policy}); err != nil {
			return server.Service{}, fmt.Errorf("%s=brave needs %s: %w", searchProviderEnv, searchBraveKeyEnv, err)
		}
	case "searxng":
		if p, err = searchprovider.NewSearXNG(searchprovider.SearXNGConfig{URL: getenv(searchSearXNGURLEnv), Egress: policy}); err != nil {
			return server.Service{}, fmt.Errorf("%s=searxng needs %s: %w", searchProviderEnv, searchSearXNGURLEnv, err)
		}
	default:
		return server.Service{}, fmt.Errorf("%s=%q: want brave or searxng", searchProviderEnv, name)
	}
	if p != nil {
		log.Info("search.provider", "provider", p.Name())
	}
	return search.New(search.Config{Provider: p, Log: log}).Registration(), nil
}

// buildGitHub serves the GitHub tools with TOOLMESH_GITHUB_TOKEN against
// github.com, or the GitHub Enterprise Server at TOOLMESH_GITHUB_URL;
// without a token they answer capability_gap.
func buildGitHub(_ context.Context, _ *sqldb.DB, deps serveDeps) (server.Service, error) {
	getenv, log := deps.Getenv, deps.Log
	policy, err := egressPolicy(getenv, githubEgressAllowEnv, log)
	if err != nil {
		return server.Service{}, err
	}
	token := strings.TrimSpace(getenv(githubTokenEnv))
	if token == "" {
		log.Warn("github.unconfigured", "message", "the GitHub tools answer capability_gap: set "+githubTokenEnv)
	}
	svc, err := github.New(github.Config{Token: token, BaseURL: getenv(githubURLEnv), Egress: policy, Log: log})
	if err != nil {
		return server.Service{}, fmt.Errorf("%s: %w", githubURLEnv, err)
	}
	return svc.Registration(), nil
}
