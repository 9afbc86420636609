package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/oidcsignin"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/upstream"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	"github.com/toolmesh/toolmesh/services/github"
	"github.com/toolmesh/toolmesh/services/remoteagents"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
	"github.com/toolmesh/toolmesh/services/search"
	"github.com/toolmesh/toolmesh/services/search/searchprovider"
	remoteagentsworker "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// The integrations reach outside the mesh; each reads its settings from
// the environment (docs/integrations.md). Each one's outbound addresses
// pass the egress guard, which refuses loopback, private and link-local
// addresses unless <DOMAIN>_EGRESS_ALLOW lists them (for development, or
// an internal GitHub Enterprise or SearXNG).
const (
	searchProviderEnv    = "TOOLMESH_SEARCH_PROVIDER"
	searchPolicyEnv      = "TOOLMESH_SEARCH_POLICY"
	searchLinkURLEnv     = "TOOLMESH_SEARCH_LINK_URL"
	searchBraveKeyEnv    = "TOOLMESH_SEARCH_BRAVE_API_KEY"
	searchBraveURLEnv    = "TOOLMESH_SEARCH_BRAVE_URL"
	searchSearXNGURLEnv  = "TOOLMESH_SEARCH_SEARXNG_URL"
	searchEgressAllowEnv = "TOOLMESH_SEARCH_EGRESS_ALLOW"
	githubTokenEnv       = "TOOLMESH_GITHUB_TOKEN"
	githubURLEnv         = "TOOLMESH_GITHUB_URL"
	githubEgressAllowEnv = "TOOLMESH_GITHUB_EGRESS_ALLOW"
	githubPolicyEnv      = "TOOLMESH_GITHUB_POLICY"
	githubLinkURLEnv     = "TOOLMESH_GITHUB_LINK_URL"
	// githubClientSecretEnv is the app's client secret itself, for where a
	// file is awkward (--client-secret-file wins).
	githubClientSecretEnv = "TOOLMESH_GITHUB_CLIENT_SECRET"
)

// searchOptions binds whose API key a search acts with: the policy, the
// console page where the owner links an agent's key, and the mesh key the
// service asks the connections service for agents' keys with.
func searchOptions(s *config.Set) buildFunc {
	var keyPath, policy, linkURL string
	cli.BindMeshKey(s, &keyPath, "mesh private key file the search service asks the connections service for agents' API keys with (--policy per_agent, per_agent_or_shared)")
	s.String(&policy, "", config.Opt{Flag: "policy", Env: searchPolicyEnv,
		Usage: "whose API key a search acts with: shared (the service's own key), per_agent (each agent's key the owner links in the console; brave only) or per_agent_or_shared", Default: "shared"})
	s.String(&linkURL, "", config.Opt{Flag: "link-url", Env: searchLinkURLEnv,
		Usage: "the console's Connections page (http(s)://<console>/connections), where an agent without a key is sent to have the owner link one (per_agent policies)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		return buildSearch(ctx, db, deps, cli.OrDataFile(keyPath, deps.DataDir, cli.MeshKeyFile), policy, linkURL)
	}
}

// buildSearch serves web search with the provider TOOLMESH_SEARCH_PROVIDER
// names, with its shared key or, under the per_agent policies, each
// agent's own; without a provider, search_web answers capability_gap.
func buildSearch(_ context.Context, _ *sqldb.DB, deps serveDeps, meshKeyPath, policyName, linkURL string) ([]server.Service, error) {
	getenv, log := deps.Getenv, deps.Log
	policy, err := cli.EgressPolicy(getenv, searchEgressAllowEnv, log)
	if err != nil {
		return nil, err
	}
	who, err := upstream.ParsePolicy(strings.TrimSpace(policyName))
	if err != nil {
		return nil, fmt.Errorf("--policy (%s): %w", searchPolicyEnv, err)
	}
	cfg := search.Config{Policy: who, Log: log}
	switch name := getenv(searchProviderEnv); name {
	case "":
		log.Warn("search.unconfigured", "message", "web search answers capability_gap: set "+searchProviderEnv+" (brave or searxng)")
	case "brave":
		key := getenv(searchBraveKeyEnv)
		if cfg.Provider, err = searchprovider.NewBrave(searchprovider.BraveConfig{APIKey: key, URL: getenv(searchBraveURLEnv), Egress: policy,
			KeysPerAgent: who != upstream.PolicyShared}); err != nil {
			return nil, fmt.Errorf("%s=brave needs %s: %w", searchProviderEnv, searchBraveKeyEnv, err)
		}
		cfg.Shared = key != ""
	case "searxng":
		if cfg.Provider, err = searchprovider.NewSearXNG(searchprovider.SearXNGConfig{URL: getenv(searchSearXNGURLEnv), Egress: policy}); err != nil {
			return nil, fmt.Errorf("%s=searxng needs %s: %w", searchProviderEnv, searchSearXNGURLEnv, err)
		}
		cfg.Shared = true
	default:
		return nil, fmt.Errorf("%s=%q: want brave or searxng", searchProviderEnv, name)
	}
	if cfg.Provider != nil {
		log.Info("search.provider", "provider", cfg.Provider.Name())
	}
	if who != upstream.PolicyShared {
		if _, keyed := cfg.Provider.(search.KeyedProvider); !keyed {
			return nil, fmt.Errorf("%s=%s needs %s=brave: only a provider searched with an API key has per-agent keys", searchPolicyEnv, who, searchProviderEnv)
		}
		url := deps.Services[connectionsv1connect.ConnectionsServiceName]
		if url == "" || linkURL == "" {
			return nil, fmt.Errorf("%s=%s needs the connections service (--service connections=URL) and --link-url (%s), the console's Connections page", searchPolicyEnv, who, searchLinkURLEnv)
		}
		key, err := cli.ReadMeshKey(meshKeyPath)
		if err != nil {
			return nil, err
		}
		signer, err := mesh.NewSigner(key, "toolmesh-search")
		if err != nil {
			return nil, err
		}
		cfg.Keys = search.Keys{LinkURL: linkURL, Connections: upstream.Connections{
			Client:   meshclient.New(meshclient.Config{Signer: signer, Timeout: 10 * time.Second}, connectionsv1connect.NewConnectionsServiceClient, url),
			Self:     mesh.Caller{Subject: "toolmesh-search", Agent: "toolmesh-search", Roles: []string{mesh.RoleService}},
			Provider: connectionsv1.Provider_PROVIDER_SEARCH,
			// Every use of an agent's key is recorded in the audit trail
			// (when the mesh has one).
			Audit: audittrail.Dial(meshclient.Config{Signer: signer}, deps.Services),
			Log:   log,
		}}
		log.Info("search.policy", "policy", string(who), "link_url", linkURL, "shared_key", cfg.Shared)
	}
	svc := search.New(cfg)
	return []server.Service{svc.Registration(), svc.VisitRegistration()}, nil
}

// githubOptions binds the mesh key the github service signs its calls to
// the connections service with (policies per_agent and
// per_agent_or_shared only), and the link page's settings: the GitHub
// app's client and where people sign in.
func githubOptions(s *config.Set) buildFunc {
	var keyPath string
	var link githubLinkOptions
	cli.BindMeshKey(s, &keyPath, "mesh private key file the github service asks the connections service for agents' tokens with (TOOLMESH_GITHUB_POLICY per_agent, per_agent_or_shared)")
	s.String(&link.clientID, "", config.Opt{Flag: "client-id", Env: "TOOLMESH_GITHUB_CLIENT_ID",
		Usage: "client ID of the GitHub App (or OAuth app) people link agents' accounts through; with its secret, the service serves the link page at TOOLMESH_GITHUB_LINK_URL, whose URL+\"/callback\" is the app's callback URL"})
	s.String(&link.secretPath, "", config.Opt{Flag: "client-secret-file", Env: "TOOLMESH_GITHUB_CLIENT_SECRET_FILE",
		Usage: "file holding that app's client secret (or the secret itself in TOOLMESH_GITHUB_CLIENT_SECRET; never the database)"})
	s.List(&link.scopes, config.Opt{Flag: "oauth-scope", Env: "TOOLMESH_GITHUB_OAUTH_SCOPES",
		Usage: "scopes an OAuth app asks for (repo, public_repo, ...); a GitHub App's permissions are its own"})
	s.String(&link.issuer, "", config.Opt{Flag: "link-issuer", Env: "TOOLMESH_GITHUB_LINK_ISSUER",
		Usage: "OpenID Connect issuer people sign in at on the link page (the edge's --issuer); empty: development mode, the page serves only the local owner on loopback"})
	s.String(&link.signInClientID, "", config.Opt{Flag: "link-client-id", Env: "TOOLMESH_GITHUB_LINK_CLIENT_ID",
		Usage: "the link page's client ID at that issuer (its redirect URI is TOOLMESH_GITHUB_LINK_URL+\"/signin\")"})
	s.String(&link.signInSecretPath, "", config.Opt{Flag: "link-client-secret-file", Env: "TOOLMESH_GITHUB_LINK_CLIENT_SECRET_FILE",
		Usage: "file holding the link page's client secret at the issuer (none: a public client, PKCE alone)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		return buildGitHub(ctx, db, deps, cli.OrDataFile(keyPath, deps.DataDir, cli.MeshKeyFile), link)
	}
}

// githubLinkOptions are the link page's settings.
type githubLinkOptions struct {
	clientID, secretPath, issuer, signInClientID, signInSecretPath string
	scopes                                                         []string
}

// config is the link page of the service whose page is at url, sealing
// with the mesh key: nil when no app client is configured.
func (o githubLinkOptions) config(getenv func(string) string, url, webURL string, meshKey []byte) (*github.LinkConfig, error) {
	secret := strings.TrimSpace(getenv(githubClientSecretEnv))
	if o.secretPath != "" {
		b, err := os.ReadFile(o.secretPath)
		if err != nil {
			return nil, fmt.Errorf("--client-secret-file (TOOLMESH_GITHUB_CLIENT_SECRET_FILE): %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	switch {
	case o.clientID == "" && secret == "":
		return nil, nil
	case o.clientID == "" || secret == "":
		return nil, errors.New("the link page needs both the GitHub app's --client-id (TOOLMESH_GITHUB_CLIENT_ID) and its secret (TOOLMESH_GITHUB_CLIENT_SECRET_FILE or TOOLMESH_GITHUB_CLIENT_SECRET)")
	}
	cfg := &github.LinkConfig{URL: url, ClientID: o.clientID, ClientSecret: secret, WebURL: webURL, Scopes: o.scopes, Key: meshKey,
		SignInHTTP: &http.Client{Timeout: 20 * time.Second}}
	if o.issuer != "" {
		in := &oidcsignin.Config{Issuer: o.issuer, ClientID: o.signInClientID}
		if o.signInSecretPath != "" {
			b, err := os.ReadFile(o.signInSecretPath)
			if err != nil {
				return nil, fmt.Errorf("--link-client-secret-file (TOOLMESH_GITHUB_LINK_CLIENT_SECRET_FILE): %w", err)
			}
			in.ClientSecret = strings.TrimSpace(string(b))
		}
		cfg.SignIn = in
	}
	return cfg, nil
}

// buildGitHub serves the GitHub tools against github.com, or the GitHub
// Enterprise Server at TOOLMESH_GITHUB_URL, acting with
// TOOLMESH_GITHUB_TOKEN or, under TOOLMESH_GITHUB_POLICY per_agent, with
// each agent's own connection; without a token they answer capability_gap.
func buildGitHub(_ context.Context, _ *sqldb.DB, deps serveDeps, meshKeyPath string, linkOpts githubLinkOptions) ([]server.Service, error) {
	getenv, log := deps.Getenv, deps.Log
	policy, err := cli.EgressPolicy(getenv, githubEgressAllowEnv, log)
	if err != nil {
		return nil, err
	}
	who, err := github.ParsePolicy(strings.TrimSpace(getenv(githubPolicyEnv)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", githubPolicyEnv, err)
	}
	token := strings.TrimSpace(getenv(githubTokenEnv))
	if token == "" && who != github.PolicyPerAgent {
		log.Warn("github.unconfigured", "message", "the GitHub tools answer capability_gap: set "+githubTokenEnv)
	}
	cfg := github.Config{Token: token, BaseURL: getenv(githubURLEnv), Egress: policy, Log: log, Policy: who}
	if who != github.PolicyShared {
		url := deps.Services[connectionsv1connect.ConnectionsServiceName]
		link := strings.TrimSpace(getenv(githubLinkURLEnv))
		if url == "" || link == "" {
			return nil, fmt.Errorf("%s=%s needs the connections service (--service connections=URL) and %s, the page where a person links an agent's GitHub account", githubPolicyEnv, who, githubLinkURLEnv)
		}
		key, err := cli.ReadMeshKey(meshKeyPath)
		if err != nil {
			return nil, err
		}
		signer, err := mesh.NewSigner(key, "toolmesh-github")
		if err != nil {
			return nil, err
		}
		cfg.Connections = github.Connections{
			Client:  meshclient.New(meshclient.Config{Signer: signer, Timeout: 10 * time.Second}, connectionsv1connect.NewConnectionsServiceClient, url),
			Self:    mesh.Caller{Subject: "toolmesh-github", Agent: "toolmesh-github", Roles: []string{mesh.RoleService}},
			LinkURL: link,
			// Every use of an agent's connection is recorded in the audit
			// trail (when the mesh has one).
			Audit: audittrail.Dial(meshclient.Config{Signer: signer}, deps.Services),
		}
		if cfg.Link, err = linkOpts.config(getenv, link, cfg.BaseURL, key.Seed()); err != nil {
			return nil, err
		}
		log.Info("github.policy", "policy", string(who), "link_url", link, "link_page", cfg.Link != nil, "sign_in", linkOpts.issuer)
	} else if linkOpts.clientID != "" {
		log.Warn("github.link_unused", "message", "the link page serves only TOOLMESH_GITHUB_POLICY per_agent and per_agent_or_shared")
	}
	svc, err := github.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", githubURLEnv, err)
	}
	return []server.Service{svc.Registration(), svc.VisitRegistration()}, nil
}

// A2A settings. The edge serves the mesh's agents over A2A at its
// --a2a-addr, known to the world as --a2a-url; the remoteagents worker
// signs the depth of what it sends with the mesh key, naming that URL
// (TOOLMESH_A2A_URL) as where the key is published.
const (
	// a2aPort is the A2A endpoint's default port under `toolmesh up`.
	a2aPort = 7170
)

// buildRemoteAgents serves invocations of remote agents (Temporal
// workflows run by the remoteagents worker) and, as InboundService, the
// agents and inbound A2A tasks the edge's A2A door serves, delivering their
// messages through the messages service.
func buildRemoteAgents(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
	policy, err := cli.EgressPolicy(deps.Getenv, cli.RemoteEgressAllowEnv, deps.Log)
	if err != nil {
		return nil, err
	}
	st, err := remoteagentsstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	// It delivers, and asks the directory, as the caller it serves (the
	// A2A door, or its sender): no key of its own.
	msgs := meshclient.New(meshclient.Config{Interceptors: []connect.Interceptor{remoteagents.NewIdempotencyInterceptor()}},
		messagesv1connect.NewMessagesServiceClient, deps.Services[messagesv1connect.MessagesServiceName])
	svc := remoteagents.New(st, remoteagents.Config{
		Engine:   remoteagents.NewTemporalEngine(deps.Temporal),
		Messages: msgs,
		Agents:   meshclient.New(meshclient.Config{}, agentsv1connect.NewAgentsServiceClient, deps.Services[agentsv1connect.AgentsServiceName]),
		Egress:   policy,
		Log:      deps.Log,
	})
	// The A2A door's backend (toolmesh.inbound.v1) beside the domain's own.
	return []server.Service{svc.Registration(), svc.Inbound().Registration()}, nil
}

// registerRemoteAgents runs the invoke workflow; its activities reach
// remote agents through the egress guard and sign each message's depth.
func registerRemoteAgents(w worker.Worker, deps workerDeps) error {
	url := deps.Services[remoteagentsv1connect.RemoteAgentsServiceName]
	if url == "" {
		return fmt.Errorf("worker remoteagents needs the remoteagents service (--service remoteagents=http://...)")
	}
	policy, err := cli.EgressPolicy(deps.Getenv, cli.RemoteEgressAllowEnv, deps.Log)
	if err != nil {
		return err
	}
	acts := &remoteagentsworker.Activities{
		HTTP:         a2alink.HTTPClient(policy, time.Minute, a2alink.MaxResponseBytes),
		RemoteAgents: meshclient.New(deps.clients(), remoteagentsv1connect.NewRemoteAgentsServiceClient, url),
		Self:         workerSelf("remoteagents"),
		Audit:        deps.auditRecorder(),
		Log:          deps.Log,
	}
	if issuer := deps.Getenv(cli.A2AURLEnv); issuer != "" {
		if acts.Depth, err = a2alink.NewDepthSigner(deps.MeshKey, issuer); err != nil {
			return fmt.Errorf("%s: %w", cli.A2AURLEnv, err)
		}
		if acts.Push, err = a2alink.NewPushSigner(deps.MeshKey, issuer); err != nil {
			return fmt.Errorf("%s: %w", cli.A2AURLEnv, err)
		}
	} else {
		deps.Log.Warn("remoteagents.depth_unsigned", "message", "messages to remote agents carry no signed depth, and pushes no signature: set "+cli.A2AURLEnv+" to the edge's A2A URL")
	}
	remoteagentsworker.Register(w, acts)
	return nil
}
