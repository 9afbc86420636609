package main

import (
	"github.com/toolmesh/toolmesh/cmd/internal/config"
)

// The options several commands share, each bound in one place.

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
