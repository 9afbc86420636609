package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// The options several commands share, each bound in one place.

// newConfig returns the option set of the command name, whose --help goes
// to stderr.
func newConfig(name string, getenv func(string) string, stderr io.Writer) *config.Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return config.New(fs, getenv)
}

// servicesEnv holds the services the edge, the workers and the services
// that call others reach: domain=url pairs, comma-separated. The
// Kubernetes manifests set it for all of them from one ConfigMap.
const servicesEnv = "TOOLMESH_SERVICES"

// bindServices binds the repeatable --service domain=url flag; calls, when
// set, names the domains a service calls.
func bindServices(s *config.Set, p *map[string]string, calls []string) {
	o := config.Opt{Flag: "service", Env: servicesEnv,
		Usage: "a domain service as domain=url, e.g. tasks=http://127.0.0.1:7101; a flag adds a domain or replaces its URL", Default: "every domain on 127.0.0.1"}
	if len(calls) > 0 {
		o.Usage = "a domain service this one calls (" + strings.Join(calls, ", ") + ") as domain=url; a flag adds a domain or replaces its URL"
		o.Default = ""
	}
	s.Pairs(p, o)
}

// orLoopback returns services, or every domain on 127.0.0.1 at its
// default port when services is empty.
func orLoopback(services map[string]string) map[string]string {
	if len(services) > 0 {
		return services
	}
	out := map[string]string{}
	for name, d := range domains {
		out[name] = fmt.Sprintf("http://127.0.0.1:%d", d.port)
	}
	return out
}

// bindData binds --data, the directory of the mesh's local state.
func bindData(s *config.Set, p *string, usage string) {
	s.String(p, ".toolmesh", config.Opt{Flag: "data", Env: "TOOLMESH_DATA", Usage: usage})
}

// bindMeshKey binds --mesh-key, the mesh private key file.
func bindMeshKey(s *config.Set, p *string, usage string) {
	s.String(p, "", config.Opt{Flag: "mesh-key", Env: "TOOLMESH_MESH_KEY", Usage: usage, Default: "<data>/" + meshKeyFile})
}

// bindCallTimeout binds --call-timeout, the deadline of each service call
// of the edge and of a worker's activities (a schedule's run included).
func bindCallTimeout(s *config.Set, p *time.Duration, usage string) {
	s.Duration(p, toolcall.DefaultTimeout, config.Opt{Flag: "call-timeout", Env: "TOOLMESH_CALL_TIMEOUT", Usage: usage})
}

// bindPortOffset binds --port-offset of up, processes and up status.
func bindPortOffset(s *config.Set, p *int, usage string) {
	s.Int(p, 0, config.Opt{Flag: "port-offset", Env: "TOOLMESH_PORT_OFFSET", Usage: usage})
}

// bindTemporalBin binds --temporal-bin of up and temporal-dev.
func bindTemporalBin(s *config.Set, p *string) {
	s.String(p, "", config.Opt{Flag: "temporal-bin", Env: "TOOLMESH_TEMPORAL_BIN", Usage: "path of the pinned Temporal CLI",
		Default: "temporal next to this binary, else ./bin/temporal"})
}

// defaultTemporalAddr is the Temporal frontend of `toolmesh up`.
const defaultTemporalAddr = "127.0.0.1:7233"
