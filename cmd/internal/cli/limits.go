package cli

import (
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
)

// LimitFlags holds the settings that cut off slow and oversized clients of
// a public listener (the edge's, or a service's); their variables are
// <prefix>HEADER_TIMEOUT, <prefix>BODY_TIMEOUT, <prefix>MAX_BODY and
// <prefix>MAX_CONNS_PER_CLIENT.
type LimitFlags struct {
	header, body time.Duration
	maxBody      int64
	maxConns     int
}

func BindLimits(s *config.Set, prefix string, defaultMaxBody int64) *LimitFlags {
	l := &LimitFlags{}
	s.Duration(&l.header, server.DefaultHeaderTimeout, config.Opt{Flag: "header-timeout", Env: prefix + "HEADER_TIMEOUT",
		Usage: "how long a client may take to send a request's headers"})
	s.Duration(&l.body, server.DefaultBodyTimeout, config.Opt{Flag: "body-timeout", Env: prefix + "BODY_TIMEOUT",
		Usage: "how long a client may take to send a request's body, after its headers; slower bodies get 408 and the connection is closed"})
	s.Int64(&l.maxBody, defaultMaxBody, config.Opt{Flag: "max-body", Env: prefix + "MAX_BODY",
		Usage: "largest request body in bytes; a larger declared Content-Length gets 413 at once"})
	s.Int(&l.maxConns, server.DefaultMaxConnsPerClient, config.Opt{Flag: "max-conns-per-client", Env: prefix + "MAX_CONNS_PER_CLIENT",
		Usage: "connections one client IP address may hold open at once, 0 for no cap"})
	return l
}

// Limits returns the checked settings.
func (l *LimitFlags) Limits() (server.Limits, error) {
	switch {
	case l.header <= 0 || l.body <= 0:
		return server.Limits{}, errors.New("--header-timeout and --body-timeout must be positive")
	case l.maxBody <= 0:
		return server.Limits{}, errors.New("--max-body must be positive")
	case l.maxConns < 0:
		return server.Limits{}, errors.New("--max-conns-per-client must not be negative (0: no cap)")
	}
	conns := l.maxConns
	if conns == 0 {
		conns = -1
	}
	return server.Limits{HeaderTimeout: l.header, BodyTimeout: l.body, MaxBodyBytes: l.maxBody, MaxConnsPerClient: conns}, nil
}
