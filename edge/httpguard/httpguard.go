// Package httpguard holds the checks every listener of the edge makes
// before it serves anything, written once for every door: the Host check
// against DNS rebinding, the Origin check of browser pages, the loopback
// check of development mode, and the JSON-RPC error body every refusal is
// written as.
//
//	g, err := httpguard.New(httpguard.Config{Addr: "127.0.0.1:7100"})
//	...
//	if !g.HostAllowed(r) {
//		g.RejectHost(w, r)
//		return
//	}
package httpguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Config says what a guard lets through.
type Config struct {
	// Addr is the address the edge listens on; empty: decided per request
	// from the connection (tests).
	Addr string
	// Resource is the canonical URI of the edge when it authenticates its
	// callers: its host is allowed, and its origin.
	Resource string
	// AllowedHosts are Host header values ("mcp.example.com", optionally
	// with a port), besides loopback names on a loopback edge.
	AllowedHosts []string
	// AllowedOrigins are browser origins ("https://app.example.com"),
	// besides loopback pages on a loopback edge.
	AllowedOrigins []string
	// Log receives a warning per refused request.
	Log *slog.Logger
}

// Guard checks the Host and Origin of requests.
type Guard struct {
	hosts   []HostPort
	origins []string
	log     *slog.Logger

	bindKnown    bool
	bindLoopback bool
}

// New checks cfg and returns its guard.
func New(cfg Config) (*Guard, error) {
	g := &Guard{log: cfg.Log}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Addr != "" {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("edge: listen address %q: %w", cfg.Addr, err)
		}
		g.bindKnown = true
		g.bindLoopback = IsLoopbackName(host)
	}
	if cfg.Resource != "" {
		res, err := url.Parse(cfg.Resource)
		if err != nil {
			return nil, fmt.Errorf("edge: resource %q: %w", cfg.Resource, err)
		}
		g.hosts = append(g.hosts, ParseHostPort(res.Host))
		g.origins = append(g.origins, res.Scheme+"://"+strings.ToLower(res.Host))
	}
	for _, h := range cfg.AllowedHosts {
		hp := ParseHostPort(h)
		if hp.Host == "" {
			return nil, fmt.Errorf("edge: allowed host %q is empty", h)
		}
		g.hosts = append(g.hosts, hp)
	}
	for _, o := range cfg.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("edge: allowed origin %q is not scheme://host[:port]", o)
		}
		g.origins = append(g.origins, u.Scheme+"://"+strings.ToLower(u.Host))
	}
	if g.bindKnown && !g.bindLoopback && len(g.hosts) == 0 {
		return nil, errors.New("edge: a non-loopback edge needs the hosts it answers to (AllowedHosts, or the Auth resource URI)")
	}
	return g, nil
}

// BindKnown reports whether the listen address is known, and
// BindLoopback whether it is a loopback address.
func (g *Guard) BindKnown() bool    { return g.bindKnown }
func (g *Guard) BindLoopback() bool { return g.bindLoopback }

// Loopback reports whether the edge serves r on a loopback address: from
// the configured bind address when there is one, else from the connection.
func (g *Guard) Loopback(r *http.Request) bool {
	if g.bindKnown {
		return g.bindLoopback
	}
	return ConnLoopback(r)
}

// ConnLoopback reports whether r came in on a loopback address.
func ConnLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackName reports whether host (no port) names the local machine.
func IsLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// HostPort is one Host allowlist entry; an empty port matches any port.
type HostPort struct{ Host, Port string }

// ParseHostPort reads a Host header value or an allowlist entry.
func ParseHostPort(s string) HostPort {
	s = strings.ToLower(strings.TrimSpace(s))
	if h, p, err := net.SplitHostPort(s); err == nil {
		return HostPort{strings.Trim(h, "[]"), p}
	}
	return HostPort{strings.Trim(s, "[]"), ""}
}

// Matches reports whether hp, an allowlist entry, allows the Host h.
func (hp HostPort) Matches(h HostPort) bool {
	return hp.Host == h.Host && (hp.Port == "" || hp.Port == h.Port)
}

// HostAllowed is the DNS-rebinding guard: the Host header must name this
// edge. On loopback any loopback name is this edge; elsewhere only the
// configured hosts and the resource URI's host are.
func (g *Guard) HostAllowed(r *http.Request) bool {
	hp := ParseHostPort(r.Host)
	if hp.Host == "" {
		return false
	}
	if g.Loopback(r) && IsLoopbackName(hp.Host) {
		return true
	}
	return g.Listed(hp)
}

// Listed reports whether the configured hosts allow hp.
func (g *Guard) Listed(hp HostPort) bool {
	for _, a := range g.hosts {
		if a.Matches(hp) {
			return true
		}
	}
	return false
}

// OriginAllowed reports whether a browser page from origin may call the
// edge: a configured origin, the resource's own origin, or — on loopback —
// a page served from the local machine.
func (g *Guard) OriginAllowed(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		return false
	}
	canon := u.Scheme + "://" + strings.ToLower(u.Host)
	if slices.Contains(g.origins, canon) {
		return true
	}
	return g.Loopback(r) && IsLoopbackName(u.Hostname())
}

// RejectHost answers a request whose Host is not this edge's.
func (g *Guard) RejectHost(w http.ResponseWriter, r *http.Request) {
	g.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "host", "host", Truncate(r.Host, 200))
	WriteRPCError(w, http.StatusForbidden, nil, CodeInvalidRequest, "Forbidden: host "+Truncate(r.Host, 200)+" is not allowed", nil)
}

// RejectOrigin answers a request from a browser page of a foreign origin.
func (g *Guard) RejectOrigin(w http.ResponseWriter, r *http.Request, origin string) {
	g.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "origin", "origin", Truncate(origin, 200))
	WriteRPCError(w, http.StatusForbidden, nil, CodeInvalidRequest, "Forbidden: origin "+Truncate(origin, 200)+" is not allowed", nil)
}

// Truncate shortens what a client sent to at most n bytes before it is
// echoed or logged.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
