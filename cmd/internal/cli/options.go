// Package cli is what the commands of the mesh's binaries share: the
// options several of them take, each bound in one place, the files of the
// data directory and how keys are read from them, their telemetry, and how
// a process serves its listeners. Only cmd/ reads flags and the
// environment.
package cli

import (
	"flag"
	"io"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// NewConfig returns the option set of the command name, whose --help goes
// to stderr.
func NewConfig(name string, getenv func(string) string, stderr io.Writer) *config.Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return config.New(fs, getenv)
}

// ServicesEnv holds the services the edge, the workers and the services
// that call others reach: domain=url pairs, comma-separated. The
// Kubernetes manifests set it for all of them from one ConfigMap.
const ServicesEnv = "TOOLMESH_SERVICES"

// BindServices binds the repeatable --service domain=url flag; calls, when
// set, names the domains a service calls.
func BindServices(s *config.Set, p *map[string]string, calls []string) {
	o := config.Opt{Flag: "service", Env: ServicesEnv,
		Usage: "a domain service as domain=url, e.g. tasks=http://127.0.0.1:7101; a flag adds a domain or replaces its URL", Default: "every domain on 127.0.0.1"}
	if len(calls) > 0 {
		o.Usage = "a domain service this one calls (" + strings.Join(calls, ", ") + ") as domain=url; a flag adds a domain or replaces its URL"
		o.Default = ""
	}
	s.Pairs(p, o)
}

// BindData binds --data, the directory of the mesh's local state.
func BindData(s *config.Set, p *string, usage string) {
	s.String(p, ".toolmesh", config.Opt{Flag: "data", Env: "TOOLMESH_DATA", Usage: usage})
}

// BindMeshKey binds --mesh-key, the mesh private key file.
func BindMeshKey(s *config.Set, p *string, usage string) {
	s.String(p, "", config.Opt{Flag: "mesh-key", Env: "TOOLMESH_MESH_KEY", Usage: usage, Default: "<data>/" + MeshKeyFile})
}

// BindCallTimeout binds --call-timeout, the deadline of each service call
// of the edge and of a worker's activities (a schedule's run included).
func BindCallTimeout(s *config.Set, p *time.Duration, usage string) {
	s.Duration(p, toolcall.DefaultTimeout, config.Opt{Flag: "call-timeout", Env: "TOOLMESH_CALL_TIMEOUT", Usage: usage})
}

// A2A settings. The edge serves the mesh's agents over A2A at its
// --a2a-addr, known to the world as --a2a-url; the remoteagents worker
// signs the depth of what it sends with the mesh key, naming that URL
// (A2AURLEnv) as where the key is published.
const A2AURLEnv = "TOOLMESH_A2A_URL"
