package cli

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/egress"
)

// RemoteEgressAllowEnv lists the internal prefixes remote agents may be
// reached at (the remoteagents service and the edge's A2A endpoint).
const RemoteEgressAllowEnv = "TOOLMESH_REMOTEAGENTS_EGRESS_ALLOW"

// EgressPolicy reads the allowed internal JoinPrefixes of an integration from
// env and says so when there are any.
func EgressPolicy(getenv func(string) string, env string, log *slog.Logger) (egress.Policy, error) {
	allow, err := egress.ParsePrefixes(config.Split(getenv(env))...)
	if err != nil {
		return egress.Policy{}, fmt.Errorf("%s: %w", env, err)
	}
	if len(allow) > 0 {
		log.Warn("egress.allow", "setting", env, "allowed", JoinPrefixes(allow), "message", "outbound requests may reach these internal addresses")
	}
	return egress.Policy{Allow: allow}, nil
}

func JoinPrefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}
