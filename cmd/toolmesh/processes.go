package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
)

// The local mesh is one plan — which processes, with which arguments, in
// which order, ready when — that two runners share: `toolmesh up` starts it
// itself, and `toolmesh processes --json` prints it for Tilt's Tiltfile. Both
// build it from the domains and workerQueues tables with meshPlan, so a new
// domain or task queue shows up in both without another edit.

// Labels group the processes (Tilt shows them as resource groups).
const (
	labelInfra    = "infra"
	labelServices = "services"
	labelWorkers  = "workers"
	labelEdge     = "edge"
	labelConsole  = "console"
)

// Names of the processes that are not a domain service or a worker.
const (
	procMeshKeys = "mesh-keys"
	procTemporal = "temporal"
	procEdge     = "edge"
	procConsole  = "console"
	// workerPrefix cli.JoinPrefixes a task queue's name: worker-<queue>.
	workerPrefix = "worker-"
)

// linkMCP names the edge's first link, its MCP endpoint.
const linkMCP = "MCP endpoint"

// linkConsole names the console's link, the owner's inbox.
const linkConsole = "Console"

// linkA2A names the edge's link to the A2A endpoint (the development
// agent's base URL: its card is below it).
const linkA2A = "A2A endpoint"

// Default ports of the processes that are not in the domains and
// workerQueues tables. --port-offset moves every default port.
const (
	edgePort           = 7100
	edgeMetricsPort    = 7190
	temporalHealthPort = 7230
	temporalPort       = 7233
	temporalUIPort     = 8233
	// upStatusPort serves the status page of `toolmesh up` itself.
	upStatusPort = 7199
)

// meshProcess is one process of the local mesh. The JSON form is what
// `toolmesh processes --json` prints; the Tiltfile reads it.
type meshProcess struct {
	// Name is unique in the plan: mesh-keys, temporal, a domain name,
	// worker-<queue> or edge.
	Name  string `json:"name"`
	Label string `json:"label"`
	// Args are the arguments of the toolmesh binary.
	Args []string `json:"args"`
	// Once marks a command that runs to completion (setup) before its
	// dependents start; every other process serves until stopped.
	Once bool `json:"once,omitempty"`
	// Env is added to the environment the process inherits.
	Env map[string]string `json:"env,omitempty"`
	// Probe answers 200 once the process is ready (nil for Once).
	Probe *httpProbe `json:"probe,omitempty"`
	// Deps are the processes that must be ready (or, for Once, done)
	// before this one starts. Every dep comes earlier in the plan.
	Deps []string `json:"deps,omitempty"`
	// Links are URLs a developer opens (the Temporal UI, the MCP endpoint).
	Links []meshLink `json:"links,omitempty"`
	// Stateless marks a domain service that keeps no database.
	Stateless bool `json:"stateless,omitempty"`
	// readyTimeout bounds the wait for Probe under `toolmesh up`.
	readyTimeout time.Duration
	// needs are the processes this one cannot start without: `toolmesh
	// up` restarts it only while they are ready. Deps order the first
	// start; after that a process copes with the others being down (it
	// answers unavailable for what needs them).
	needs []string
}

// httpProbe is an HTTP GET readiness check.
type httpProbe struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	Path string `json:"path"`
}

// URL is the address the probe gets.
func (p httpProbe) URL() string {
	return "http://" + net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) + p.Path
}

type meshLink struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// meshConfig is what the plan is built from: the flags of `toolmesh up`
// (and `toolmesh processes`).
type meshConfig struct {
	// DataDir holds SQLite files, the mesh keys and Temporal's state.
	DataDir string
	// DevAgent is the agent the edge's local caller acts as; the agents
	// service registers it at start, with the agents in Seed.
	DevAgent string
	Seed     []string
	// EdgeAddr is the edge's listen address.
	EdgeAddr string
	// TemporalBin is the Temporal CLI ("": found by `toolmesh temporal-dev`).
	TemporalBin string
	// TemporalPort and TemporalUIPort are the dev server's frontend and Web
	// UI ports on 127.0.0.1 (UI 0: headless); TemporalHealthPort serves the
	// /healthz of `toolmesh temporal-dev`.
	TemporalPort, TemporalUIPort, TemporalHealthPort int
	// PortOffset is added to every service's and worker's port.
	PortOffset int
	// Pprof starts every service, worker and the edge with --pprof.
	Pprof bool
	// GitHubLinkURL is TOOLMESH_GITHUB_LINK_URL as given; when empty, the
	// github service's own page on loopback (<its address>/link).
	GitHubLinkURL string
	// SearchLinkURL is TOOLMESH_SEARCH_LINK_URL as given; when empty, the
	// console's Connections page.
	SearchLinkURL string
}

// bindMesh binds the options of the plan; the returned function reads them
// after parsing.
func bindMesh(s *config.Set, getenv func(string) string) func() (meshConfig, error) {
	var cfg meshConfig
	cli.BindData(s, &cfg.DataDir, "directory for local state (SQLite files, mesh keys, Temporal)")
	bindPortOffset(s, &cfg.PortOffset, "added to every default port (services 71xx, workers 72xx, edge, Temporal), to run a second mesh beside the first")
	s.String(&cfg.EdgeAddr, fmt.Sprintf("127.0.0.1:%d", edgePort), config.Opt{Flag: "edge-addr", Env: "TOOLMESH_EDGE_ADDR", Usage: "edge listen address (its default port plus --port-offset)"})
	s.String(&cfg.DevAgent, "local", config.Opt{Flag: "dev-agent", Env: "TOOLMESH_DEV_AGENT", Usage: "agent id of the edge's calls; registered in the agents directory at start"})
	bindTemporalBin(s, &cfg.TemporalBin)
	s.Int(&cfg.TemporalPort, temporalPort, config.Opt{Flag: "temporal-port", Env: "TOOLMESH_TEMPORAL_DEV_PORT", Usage: "Temporal dev server frontend (gRPC) port on 127.0.0.1 (plus --port-offset unless given)"})
	s.Int(&cfg.TemporalUIPort, temporalUIPort, config.Opt{Flag: "temporal-ui-port", Env: "TOOLMESH_TEMPORAL_DEV_UI_PORT", Usage: "Temporal Web UI port on 127.0.0.1, 0: no UI (plus --port-offset unless given)"})
	s.Bool(&cfg.Pprof, false, config.Opt{Flag: "pprof", Env: "TOOLMESH_PPROF", Usage: "start every service, worker and the edge with --pprof: Go's profiles at /debug/pprof on each one's metrics address"})
	return func() (meshConfig, error) {
		if cfg.PortOffset < 0 || cfg.PortOffset > 50000 {
			return meshConfig{}, fmt.Errorf("--port-offset %d out of range [0, 50000]", cfg.PortOffset)
		}
		cfg.Seed = config.Split(getenv(agentsSeedEnv))
		cfg.GitHubLinkURL = getenv(githubLinkURLEnv)
		cfg.SearchLinkURL = getenv(searchLinkURLEnv)
		cfg.TemporalHealthPort = temporalHealthPort + cfg.PortOffset
		if !s.Explicit("edge-addr") {
			cfg.EdgeAddr = fmt.Sprintf("127.0.0.1:%d", edgePort+cfg.PortOffset)
		}
		if !s.Explicit("temporal-port") {
			cfg.TemporalPort += cfg.PortOffset
		}
		if !s.Explicit("temporal-ui-port") && cfg.TemporalUIPort != 0 {
			cfg.TemporalUIPort += cfg.PortOffset
		}
		if cfg.DevAgent == "" {
			return meshConfig{}, errors.New("--dev-agent must not be empty")
		}
		return cfg, nil
	}
}

// directoryDomain is the domain every other service checks its callers
// against (the one marked directory in the domains table).
func directoryDomain() (string, error) {
	var found []string
	for name, d := range domains {
		if d.directory {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("the domains table must mark exactly one directory domain, got %v", found)
	}
	return found[0], nil
}

// meshPlan returns the processes of the local mesh in start order: the mesh
// keys and Temporal, the agents directory, the other services, the workers
// (their activities call the services), the edge last. Every process comes
// after its Deps.
func meshPlan(cfg meshConfig) ([]meshProcess, error) {
	directory, err := directoryDomain()
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(domains))
	// The directory first: every other service asks it about its callers.
	names = callsFirst(append([]string{directory}, slices.DeleteFunc(names, func(n string) bool { return n == directory })...))
	queues := slices.Sorted(maps.Keys(workerQueues))

	local := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port+cfg.PortOffset) }
	keyPath := cli.DataFile(cfg.DataDir, cli.MeshKeyFile)
	pubPath := cli.DataFile(cfg.DataDir, cli.MeshPubKeyFile)
	temporalAddr := fmt.Sprintf("127.0.0.1:%d", cfg.TemporalPort)

	plan := []meshProcess{{
		Name:  procMeshKeys,
		Label: labelInfra,
		Args:  []string{"keygen", "--data", cfg.DataDir},
		Once:  true,
	}}

	temporalArgs := []string{"temporal-dev", "--data", cfg.DataDir,
		"--port", strconv.Itoa(cfg.TemporalPort), "--ui-port", strconv.Itoa(cfg.TemporalUIPort),
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", cfg.TemporalHealthPort)}
	if cfg.TemporalBin != "" {
		temporalArgs = append(temporalArgs, "--temporal-bin", cfg.TemporalBin)
	}
	temporal := meshProcess{
		Name:         procTemporal,
		Label:        labelInfra,
		Args:         temporalArgs,
		Probe:        &httpProbe{Host: "127.0.0.1", Port: cfg.TemporalHealthPort, Path: "/healthz"},
		readyTimeout: 90 * time.Second,
	}
	if cfg.TemporalUIPort != 0 {
		temporal.Links = []meshLink{{Name: "Temporal UI", URL: fmt.Sprintf("http://127.0.0.1:%d", cfg.TemporalUIPort)}}
	}
	plan = append(plan, temporal)

	agentsURL := "http://" + local(domains[directory].port)
	a2aURL := "http://" + local(a2aPort)
	serviceFlags := make([]string, 0, 2*len(names))
	for _, n := range names {
		d := domains[n]
		addr := local(d.port)
		args := []string{"serve", n, "--addr", addr, "--data", cfg.DataDir, "--mesh-public-key", pubPath}
		deps := []string{procMeshKeys, procTemporal}
		var env map[string]string
		if d.temporal {
			args = append(args, "--temporal", temporalAddr)
		}
		if cfg.Pprof {
			args = append(args, "--pprof")
		}
		for _, c := range slices.Concat(d.calls, d.mayCall) {
			args = append(args, "--service", c+"=http://"+local(domains[c].port))
			deps = append(deps, c)
		}
		if n == "eventlog" {
			// The relay pulls the domains' outboxes as the mesh's service.
			args = append(args, "--mesh-key", keyPath)
		}
		if n == "reputation" {
			// Attestations are signed with the mesh key and name the A2A
			// endpoint, which publishes it; they are public at the
			// service's own address.
			args = append(args, "--mesh-key", keyPath)
			env = map[string]string{cli.A2AURLEnv: a2aURL, reputationPublicURLEnv: "http://" + addr}
		}
		if n == "github" && cfg.GitHubLinkURL == "" {
			// The link page, when the github service serves it, is its
			// own, on loopback (docs/connections.md).
			env = map[string]string{githubLinkURLEnv: "http://" + addr + "/link"}
		}
		if n == "search" && cfg.SearchLinkURL == "" {
			// An agent without its own search key (per_agent policies)
			// is sent to the console's Connections page.
			env = map[string]string{searchLinkURLEnv: fmt.Sprintf("http://127.0.0.1:%d/connections", consolePort+cfg.PortOffset)}
		}
		if d.directory {
			// The edge's development agent is registered at start (when
			// missing), so the mesh works out of the box.
			env = map[string]string{agentsSeedEnv: strings.Join(append([]string{cfg.DevAgent}, cfg.Seed...), ",")}
			// Retiring an agent unlinks its connections first. The
			// directory starts before the others: it calls connections
			// only then, so connections is not one of its dependencies.
			args = append(args, "--connections-url", "http://"+local(domains["connections"].port), "--mesh-key", keyPath)
		} else {
			args = append(args, "--agents-url", agentsURL)
			deps = append(deps, directory)
		}
		plan = append(plan, meshProcess{
			Name:         n,
			Label:        labelServices,
			Args:         args,
			Env:          env,
			Probe:        &httpProbe{Host: "127.0.0.1", Port: d.port + cfg.PortOffset, Path: "/healthz"},
			Deps:         deps,
			Stateless:    d.stateless,
			readyTimeout: 30 * time.Second,
		})
		serviceFlags = append(serviceFlags, "--service", n+"=http://"+addr)
	}

	workerNames := make([]string, 0, len(queues))
	for _, q := range queues {
		health := local(workerQueues[q].port)
		args := append([]string{"worker", q, "--temporal", temporalAddr, "--health-addr", health, "--mesh-key", keyPath}, serviceFlags...)
		if cfg.Pprof {
			args = append(args, "--pprof")
		}
		var env map[string]string
		if q == "remoteagents" {
			// Depth tokens name the A2A endpoint, which publishes the key.
			env = map[string]string{cli.A2AURLEnv: a2aURL}
		}
		plan = append(plan, meshProcess{
			Name:         workerPrefix + q,
			Label:        labelWorkers,
			Args:         args,
			Env:          env,
			Probe:        &httpProbe{Host: "127.0.0.1", Port: workerQueues[q].port + cfg.PortOffset, Path: "/healthz"},
			Deps:         append([]string{procMeshKeys, procTemporal}, names...),
			readyTimeout: 30 * time.Second,
			// A worker dials Temporal at start (and fails without it).
			needs: []string{procTemporal},
		})
		workerNames = append(workerNames, workerPrefix+q)
	}

	edgeHost, edgePortStr, err := net.SplitHostPort(cfg.EdgeAddr)
	if err != nil {
		return nil, fmt.Errorf("--edge-addr: %w", err)
	}
	edgePortNum, err := strconv.Atoi(edgePortStr)
	if err != nil || edgePortNum <= 0 {
		return nil, fmt.Errorf("--edge-addr %q needs a port", cfg.EdgeAddr)
	}
	probeHost := edgeHost
	if ip := net.ParseIP(edgeHost); edgeHost == "" || (ip != nil && ip.IsUnspecified()) {
		probeHost = "127.0.0.1"
	}
	// The edge asks the user for what calls lack (elicitation), carried by
	// the calls worker's workflows; keygen creates the request state key.
	edgeArgs := []string{"edge", "--addr", cfg.EdgeAddr, "--dev-agent", cfg.DevAgent, "--mesh-key", keyPath,
		"--metrics-addr", local(edgeMetricsPort),
		"--temporal", temporalAddr,
		"--state-key", cli.DataFile(cfg.DataDir, cli.StateKeyFile),
		"--state-previous-key", cli.DataFile(cfg.DataDir, cli.StatePreviousKeyFile),
		"--a2a-addr", local(a2aPort),
		// The A2A endpoint publishes the audit checkpoint key beside the
		// mesh key, for the checkpoints attestations name.
		"--a2a-audit-public-key", cli.DataFile(cfg.DataDir, cli.AuditPubKeyFile)}
	if cfg.Pprof {
		edgeArgs = append(edgeArgs, "--pprof")
	}
	plan = append(plan, meshProcess{
		Name:  procEdge,
		Label: labelEdge,
		Args:  append(edgeArgs, serviceFlags...),
		Probe: &httpProbe{Host: probeHost, Port: edgePortNum, Path: "/healthz"},
		Deps:  append(append([]string{procMeshKeys, procTemporal}, names...), workerNames...),
		Links: []meshLink{
			{Name: linkMCP, URL: "http://" + net.JoinHostPort(probeHost, edgePortStr) + "/mcp"},
			{Name: "Edge metrics", URL: "http://" + local(edgeMetricsPort) + "/metrics"},
			{Name: linkA2A, URL: a2aURL + "/a2a/agents/" + cfg.DevAgent + "/"},
		},
		readyTimeout: 30 * time.Second,
	})

	// The console is a client of the edge alone: no mesh key, no store.
	mcpURL := "http://" + net.JoinHostPort(probeHost, edgePortStr) + "/mcp"
	consoleArgs := []string{"console", "--addr", local(consolePort), "--edge-url", mcpURL, "--data", cfg.DataDir,
		"--metrics-addr", local(consoleMetricsPort),
		// up's status page on its default address (--status-addr moves it).
		"--mesh-status-url", fmt.Sprintf("http://127.0.0.1:%d/status.json", upStatusPort+cfg.PortOffset)}
	if cfg.TemporalUIPort != 0 {
		consoleArgs = append(consoleArgs, "--temporal-ui-url", fmt.Sprintf("http://127.0.0.1:%d", cfg.TemporalUIPort))
	}
	if cfg.Pprof {
		consoleArgs = append(consoleArgs, "--pprof")
	}
	plan = append(plan, meshProcess{
		Name:         procConsole,
		Label:        labelConsole,
		Args:         consoleArgs,
		Probe:        &httpProbe{Host: "127.0.0.1", Port: consolePort + cfg.PortOffset, Path: "/healthz"},
		Deps:         []string{procEdge},
		Links:        []meshLink{{Name: linkConsole, URL: "http://" + local(consolePort) + "/"}},
		readyTimeout: 30 * time.Second,
	})
	return plan, nil
}

// callsFirst orders names so that each domain comes after the domains it
// calls, and otherwise as names has them.
func callsFirst(names []string) []string {
	out := make([]string, 0, len(names))
	placed := map[string]bool{}
	var place func(n string)
	place = func(n string) {
		if placed[n] {
			return
		}
		placed[n] = true
		for _, c := range slices.Concat(domains[n].calls, domains[n].mayCall) {
			if slices.Contains(names, c) {
				place(c)
			}
		}
		out = append(out, n)
	}
	for _, n := range names {
		place(n)
	}
	return out
}

// runProcesses prints the plan of `toolmesh up`: as JSON for tools (the
// Tiltfile), or as a table.
func bindProcesses(s *config.Set, getenv func(string) string) (*bool, func() (meshConfig, error)) {
	asJSON := new(bool)
	s.Bool(asJSON, false, config.Opt{Flag: "json", Usage: "print JSON (what the Tiltfile reads)"})
	return asJSON, bindMesh(s, getenv)
}

func runProcesses(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("processes", getenv, stderr)
	asJSON, meshCfg := bindProcesses(s, getenv)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("processes takes no arguments, got %q", s.FlagSet().Args())
	}
	cfg, err := meshCfg()
	if err != nil {
		return err
	}
	plan, err := meshPlan(cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Processes []meshProcess `json:"processes"`
		}{plan})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLABEL\tREADY WHEN\tAFTER\tCOMMAND")
	for _, p := range plan {
		ready := "exited 0"
		if p.Probe != nil {
			ready = "GET " + p.Probe.URL()
		}
		after := strings.Join(p.Deps, ",")
		if after == "" {
			after = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\ttoolmesh %s\n", p.Name, p.Label, ready, after, strings.Join(p.Args, " "))
	}
	return tw.Flush()
}
