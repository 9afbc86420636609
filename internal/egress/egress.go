// Package egress sends HTTP requests to URLs that users or remote parties
// name (webhooks, remote A2A agents, search and GitHub endpoints) without
// letting those URLs reach into the network the mesh runs in: the
// loopback interface, private and shared address space, link-local
// addresses and the cloud metadata endpoints that hand out credentials.
//
// A Policy refuses such addresses unless an allowed prefix covers them. It
// is applied twice:
//
//   - when a URL is configured (CheckURL): a literal address, or every
//     address its host resolves to, must be allowed, so a mistake is
//     reported at once;
//   - when a connection is made (Client): the dialer checks the address it
//     is about to connect to, after resolution, in its Control hook. A
//     hostname that resolved to a public address when it was configured and
//     resolves to 127.0.0.1 now (DNS rebinding) is refused there.
//
// The client follows no redirects and uses no proxy, so neither can carry a
// request past the check; it bounds each request's time and the size of the
// response body it reads.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Address categories a Policy refuses unless allowed.
const (
	CategoryLoopback    = "loopback"
	CategoryPrivate     = "private"
	CategoryLinkLocal   = "link-local"
	CategoryMetadata    = "cloud metadata"
	CategoryUnspecified = "unspecified"
	CategoryMulticast   = "multicast"
	CategoryReserved    = "reserved"
)

// metadataAddrs are the cloud instance metadata endpoints (AWS, GCP and
// Azure share 169.254.169.254; AWS's IPv6 one; Alibaba Cloud's), named
// apart so a refusal says what was at stake.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// categories maps refused ranges to their category, checked in order.
var categories = []struct {
	prefix   netip.Prefix
	category string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), CategoryUnspecified},
	{netip.MustParsePrefix("::/128"), CategoryUnspecified},
	{netip.MustParsePrefix("127.0.0.0/8"), CategoryLoopback},
	{netip.MustParsePrefix("::1/128"), CategoryLoopback},
	{netip.MustParsePrefix("10.0.0.0/8"), CategoryPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), CategoryPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), CategoryPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), CategoryPrivate}, // shared (carrier-grade NAT) space
	{netip.MustParsePrefix("fc00::/7"), CategoryPrivate},      // unique local
	{netip.MustParsePrefix("169.254.0.0/16"), CategoryLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), CategoryLinkLocal},
	{netip.MustParsePrefix("224.0.0.0/4"), CategoryMulticast},
	{netip.MustParsePrefix("ff00::/8"), CategoryMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), CategoryReserved}, // includes broadcast
	{netip.MustParsePrefix("192.0.0.0/24"), CategoryReserved},
	{netip.MustParsePrefix("198.18.0.0/15"), CategoryReserved},
	{netip.MustParsePrefix("2001::/32"), CategoryReserved}, // Teredo hides an IPv4 address
	{netip.MustParsePrefix("2001:db8::/32"), CategoryReserved},
}

// Embedded IPv4 addresses: NAT64 and 6to4 reach the IPv4 address inside.
var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixToV4 = netip.MustParsePrefix("2002::/16")
)

// Category returns the refused category addr falls in, or "" for a public
// address. IPv4-mapped, NAT64 and 6to4 addresses are judged by the IPv4
// address they carry.
func Category(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		b := addr.As16()
		switch {
		case nat64.Contains(addr):
			return Category(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToV4.Contains(addr):
			return Category(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, m := range metadataAddrs {
		if addr == m {
			return CategoryMetadata
		}
	}
	for _, c := range categories {
		if c.prefix.Contains(addr) {
			return c.category
		}
	}
	return ""
}

// RefusedError says that an address may not be reached.
type RefusedError struct {
	// Host is the host name of the URL, when it had one.
	Host string
	// Addr is the refused address.
	Addr netip.Addr
	// Category is why it is refused.
	Category string
}

func (e *RefusedError) Error() string {
	what := e.Addr.String()
	if e.Host != "" && e.Host != what {
		what = fmt.Sprintf("%s (%s)", e.Host, e.Addr)
	}
	return fmt.Sprintf("%s is refused: outbound requests may not reach %s addresses unless they are explicitly allowed", what, e.Category)
}

// ErrRefused matches every *RefusedError with errors.Is.
var ErrRefused = errors.New("address refused")

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Policy decides which addresses outbound requests may reach.
type Policy struct {
	// Allow lists prefixes that may be reached although they are loopback,
	// private, link-local or metadata addresses (e.g. 127.0.0.1/32 for a
	// local receiver, 10.1.2.0/24 for an internal chat bridge).
	Allow []netip.Prefix
	// Lookup resolves host names for CheckURL; net.DefaultResolver when
	// nil. (Connections always resolve with the system resolver and are
	// checked after resolution.)
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// ParsePrefixes parses CIDR prefixes or single addresses ("127.0.0.1",
// "10.0.0.0/8").
func ParsePrefixes(items ...string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range items {
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("allowed address %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("allowed prefix %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Check returns a *RefusedError when addr may not be reached (host names
// it in the error), else nil.
func (p Policy) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap().WithZone("")
	cat := Category(addr)
	if cat == "" {
		return nil
	}
	for _, a := range p.Allow {
		if a.Contains(addr) {
			return nil
		}
	}
	return &RefusedError{Host: host, Addr: addr, Category: cat}
}

// CheckURL checks a URL when it is configured: http or https, a host, no
// user info, and every address the host resolves to allowed. Errors name
// the host, never the path or query (which often carry secrets).
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("the URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the URL scheme must be http or https, not %q", u.Scheme)
	}
	if u.User != nil {
		return errors.New("the URL must not carry user info; use the channel secret to authenticate")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("the URL has no host")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.Check("", addr)
	}
	lookup := p.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := lookup(lctx, host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("cannot resolve host %s", host)
	}
	for _, a := range addrs {
		if err := p.Check(host, a); err != nil {
			return err
		}
	}
	return nil
}

// ClientOptions tune Client.
type ClientOptions struct {
	// Timeout bounds one request, response included (default 10s).
	Timeout time.Duration
	// MaxResponseBytes bounds a response body (default
	// DefaultMaxResponseBytes): reading past it fails with
	// ErrResponseTooLarge.
	MaxResponseBytes int64
}

// DefaultMaxResponseBytes is the response body cap of a Client.
const DefaultMaxResponseBytes = 4 << 20

// ErrResponseTooLarge is the error reading a response body fails with once
// it passes the client's cap.
var ErrResponseTooLarge = errors.New("the response is larger than this client reads")

// Client returns an HTTP client whose every connection is checked against
// p after resolution, that follows no redirects and uses no proxy.
func (p Policy) Client(opts ClientOptions) *http.Client {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	dialer := &net.Dialer{
		Timeout: 5 * time.Second,
		// Control runs for every address the dialer tries, after name
		// resolution and before the connection is made.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress: unexpected address %q", address)
			}
			return p.Check("", ap.Addr())
		},
	}
	return &http.Client{
		Timeout: opts.Timeout,
		Transport: capped{max: opts.MaxResponseBytes, next: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: opts.Timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       60 * time.Second,
			ForceAttemptHTTP2:     true,
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// capped bounds the bodies of the responses next returns.
type capped struct {
	max  int64
	next http.RoundTripper
}

func (c capped) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > c.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w (%d bytes announced, at most %d read)", ErrResponseTooLarge, resp.ContentLength, c.max)
	}
	resp.Body = &cappedBody{rc: resp.Body, left: c.max}
	return resp, nil
}

// cappedBody fails once more than its allowance has been read.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n - int(-b.left), ErrResponseTooLarge
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// Redact returns a URL as scheme://host[:port]/… without user info, path or
// query, for showing and logging it.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		out += "/…"
	}
	return out
}

// DescribeError turns a client error into a message that names no URL path
// or query: *url.Error embeds the whole URL.
func DescribeError(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var refused *RefusedError
	if errors.As(err, &refused) {
		return refused.Error()
	}
	if errors.Is(err, ErrResponseTooLarge) {
		return err.Error()
	}
	if IsTimeout(err) {
		return "timed out"
	}
	return err.Error()
}

// IsTimeout reports whether err is a request that ran out of time (the
// client's timeout or the context's deadline).
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, http.ErrHandlerTimeout) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// RetryAfter reads a Retry-After header (delay seconds or an HTTP date) as
// the time to wait from now; 0 when there is none or it has passed.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
