package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/internal/server"
)

// limitFlags are the settings that cut off slow and oversized clients of a
// public listener (the edge's, or a service's): flags whose defaults come
// from <prefix>HEADER_TIMEOUT, <prefix>BODY_TIMEOUT, <prefix>MAX_BODY and
// <prefix>MAX_CONNS_PER_CLIENT.
type limitFlags struct {
	header, body *time.Duration
	maxBody      *int64
	maxConns     *int
	envErr       error
}

func addLimitFlags(fs *flag.FlagSet, getenv func(string) string, prefix string, defaultMaxBody int64) *limitFlags {
	l := &limitFlags{}
	var errs []error
	env := func(name string, parse func(string) error) {
		if v := getenv(prefix + name); v != "" {
			if err := parse(v); err != nil {
				errs = append(errs, fmt.Errorf("%s%s: %w", prefix, name, err))
			}
		}
	}
	header, body := server.DefaultHeaderTimeout, server.DefaultBodyTimeout
	maxBody, maxConns := defaultMaxBody, server.DefaultMaxConnsPerClient
	env("HEADER_TIMEOUT", func(v string) (err error) { header, err = time.ParseDuration(v); return err })
	env("BODY_TIMEOUT", func(v string) (err error) { body, err = time.ParseDuration(v); return err })
	env("MAX_BODY", func(v string) (err error) { maxBody, err = strconv.ParseInt(v, 10, 64); return err })
	env("MAX_CONNS_PER_CLIENT", func(v string) (err error) { maxConns, err = strconv.Atoi(v); return err })
	l.envErr = errors.Join(errs...)
	l.header = fs.Duration("header-timeout", header, "how long a client may take to send a request's headers ($"+prefix+"HEADER_TIMEOUT)")
	l.body = fs.Duration("body-timeout", body, "how long a client may take to send a request's body, after its headers; slower bodies get 408 and the connection is closed ($"+prefix+"BODY_TIMEOUT)")
	l.maxBody = fs.Int64("max-body", maxBody, "largest request body in bytes; a larger declared Content-Length gets 413 at once ($"+prefix+"MAX_BODY)")
	l.maxConns = fs.Int("max-conns-per-client", maxConns, "connections one client IP address may hold open at once, 0 for no cap ($"+prefix+"MAX_CONNS_PER_CLIENT)")
	return l
}

// limits returns the parsed settings.
func (l *limitFlags) limits() (server.Limits, error) {
	if l.envErr != nil {
		return server.Limits{}, l.envErr
	}
	switch {
	case *l.header <= 0 || *l.body <= 0:
		return server.Limits{}, errors.New("--header-timeout and --body-timeout must be positive")
	case *l.maxBody <= 0:
		return server.Limits{}, errors.New("--max-body must be positive")
	case *l.maxConns < 0:
		return server.Limits{}, errors.New("--max-conns-per-client must not be negative (0: no cap)")
	}
	conns := *l.maxConns
	if conns == 0 {
		conns = -1
	}
	return server.Limits{HeaderTimeout: *l.header, BodyTimeout: *l.body, MaxBodyBytes: *l.maxBody, MaxConnsPerClient: conns}, nil
}
