package mcpdoor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// Sessions of the 2025 era across edge replicas (docs/sessions.md).
//
// The SDK keeps a session — its open SSE streams, the server-to-client
// requests (elicitations) waiting for their answers, subscriptions, the
// token's user — in the memory of the process that answered initialize.
// None of that can be rebuilt elsewhere: an answer to an elicitation is
// matched against a call parked in that process. So a session stays where
// it began and the other replicas forward its requests there:
//
//   - the session id names its owner, the replica that made it, and a MAC
//     under a key every replica derives from the request state key vouches
//     for that name;
//   - a replica that gets a request for another replica's session forwards
//     it, unchanged (Authorization, Origin and Host included; SSE
//     unbuffered), to the owner, which checks it as it checks any request;
//   - only to an address a valid MAC names, and only while that address is
//     an edge peer (the configured peers, names resolved): a forged id, or
//     one naming a replica that is gone, gets 404 like any unknown session,
//     and the client starts a new one, as the protocol says.

// Sessions lets 2025-era sessions work whichever edge replica a request
// lands on. Without it (Config.Sessions nil) a session is served only by
// the replica it began on, which is right for a single replica.
type Sessions struct {
	// Self is the IP address and port ("10.1.2.3:8080") the other replicas
	// reach this one at. The session ids this replica makes name it.
	Self string
	// Peers are the edge replicas as host:port. A host name stands for every
	// address it resolves to (in Kubernetes, a headless Service of the edge
	// pods), looked up again every few seconds. Requests are forwarded only
	// to a peer.
	Peers []string
	// Keys are the request state keys, the current one first: session ids
	// are signed with a secret derived from the first and verified with
	// those of all, so every replica must hold the same keys.
	Keys []requeststate.Key
	// Resolver looks peer names up (default net.DefaultResolver).
	Resolver PeerResolver
}

// PeerResolver looks up the addresses of a peer name (net.Resolver is
// one).
type PeerResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

const (
	// sessionKeyPurpose derives the session id secret from a state key.
	sessionKeyPurpose = "toolmesh.session_id.v1"
	// sessionNonceLen and sessionMACLen are the random part and the MAC of
	// a session id, in bytes.
	sessionNonceLen = 16
	sessionMACLen   = 16
	// maxSessionIDLen bounds the ids worth decoding.
	maxSessionIDLen = 200
	// forwardedHeader marks a request one replica forwarded to another; it
	// is never forwarded again (no loops, whatever the addresses say).
	forwardedHeader = "Toolmesh-Session-Forwarded"
	// forwardDialTimeout bounds connecting to an owner: one that does not
	// answer by then is taken for gone.
	forwardDialTimeout = 2 * time.Second
	// forwardPingTimeout closes a connection to an owner that stopped
	// answering, which ends the SSE streams forwarded over it.
	forwardPingTimeout = 15 * time.Second
)

var sessionB64 = base64.RawURLEncoding.Strict()

// sessions makes and routes session ids; nil without Config.Sessions.
type sessions struct {
	self  netip.AddrPort
	keys  [][]byte // derived; the first signs
	peers *peerSet
	proxy *httputil.ReverseProxy
	log   *slog.Logger
}

func newSessions(cfg *Sessions, log *slog.Logger) (*sessions, error) {
	if cfg == nil {
		return nil, nil
	}
	self, err := netip.ParseAddrPort(cfg.Self)
	if err != nil || self.Port() == 0 || self.Addr().IsUnspecified() {
		return nil, fmt.Errorf("edge: sessions: this replica's address %q must be the IP address and port other replicas reach it at", cfg.Self)
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("edge: sessions: no key to sign session ids with")
	}
	if len(cfg.Peers) == 0 {
		return nil, errors.New("edge: sessions: no peers: list the edge replicas")
	}
	s := &sessions{self: canonical(self), log: log}
	for _, k := range cfg.Keys {
		s.keys = append(s.keys, k.Derive(sessionKeyPurpose))
	}
	if s.peers, err = newPeerSet(cfg.Peers, cfg.Resolver); err != nil {
		return nil, err
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      peerTransport(),
		FlushInterval:  -1, // SSE events reach the client as the owner sends them
		ModifyResponse: dropCORS,
		ErrorHandler:   s.forwardFailed,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// canonical drops an IPv4 address's IPv6 mapping, so one address has one
// form.
func canonical(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// peerTransport reaches the other replicas over h2c: one connection
// carries every forwarded request and stream between two replicas.
func peerTransport() *http.Transport {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols:       protocols,
		DialContext:     (&net.Dialer{Timeout: forwardDialTimeout}).DialContext,
		IdleConnTimeout: 90 * time.Second,
		HTTP2:           &http.HTTP2Config{SendPingTimeout: forwardPingTimeout, PingTimeout: forwardPingTimeout},
	}
}

// idFunc is the SDK's ServerOptions.GetSessionID: nil (the SDK's random
// ids) without sessions.
func (s *sessions) idFunc() func() string {
	if s == nil {
		return nil
	}
	return s.newID
}

// newID makes a session id naming this replica:
// base64url(owner) "." base64url(nonce) "." base64url(MAC).
func (s *sessions) newID() string {
	owner := s.self.String()
	nonce := make([]byte, sessionNonceLen)
	_, _ = rand.Read(nonce)
	return sessionB64.EncodeToString([]byte(owner)) + "." + sessionB64.EncodeToString(nonce) + "." +
		sessionB64.EncodeToString(sessionMAC(s.keys[0], owner, nonce))
}

func sessionMAC(key []byte, owner string, nonce []byte) []byte {
	h := hmac.New(sha256.New, key)
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(owner)))
	h.Write(n[:])
	h.Write([]byte(owner))
	h.Write(nonce)
	return h.Sum(nil)[:sessionMACLen]
}

// Why a session id is not routed.
var (
	errSessionMalformed = errors.New("not a session id of this mesh")
	errSessionForged    = errors.New("session id does not verify")
)

// owner returns the replica a session id names, once its MAC verifies.
func (s *sessions) owner(id string) (netip.AddrPort, error) {
	if len(id) > maxSessionIDLen {
		return netip.AddrPort{}, errSessionMalformed
	}
	parts := strings.Split(id, ".")
	if len(parts) != 3 {
		return netip.AddrPort{}, errSessionMalformed
	}
	var raw [3][]byte
	for i, p := range parts {
		b, err := sessionB64.DecodeString(p)
		if err != nil {
			return netip.AddrPort{}, errSessionMalformed
		}
		raw[i] = b
	}
	owner, nonce, sum := string(raw[0]), raw[1], raw[2]
	if len(nonce) != sessionNonceLen || len(sum) != sessionMACLen {
		return netip.AddrPort{}, errSessionMalformed
	}
	ok := false
	for _, k := range s.keys {
		ok = ok || hmac.Equal(sum, sessionMAC(k, owner, nonce))
	}
	if !ok {
		return netip.AddrPort{}, errSessionForged
	}
	addr, err := netip.ParseAddrPort(owner)
	if err != nil {
		return netip.AddrPort{}, errSessionMalformed
	}
	return canonical(addr), nil
}

// route puts the session router in front of the SDK's stateful handler;
// without sessions it returns the handler itself.
func (s *sessions) route(next http.Handler) http.Handler {
	if s == nil {
		return next
	}
	return &sessionRouter{s: s, next: next}
}

type sessionRouter struct {
	s    *sessions
	next http.Handler
}

// ownerKey carries the owner a request is forwarded to.
type ownerKey struct{}

// ServeHTTP serves a session's request here when this replica owns the
// session (or when there is no session yet), forwards it to the owner when
// that is a peer, and answers 404 otherwise.
func (h *sessionRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	owner, err := s.owner(id)
	switch {
	case errors.Is(err, errSessionForged):
		s.log.WarnContext(r.Context(), "edge.session_refused", "reason", "forged")
		sessionNotFound(w)
		return
	case err != nil:
		// An id of another server, or of this mesh before sessions were
		// routed: a session that does not exist (any longer).
		s.log.DebugContext(r.Context(), "edge.session_refused", "reason", "malformed")
		sessionNotFound(w)
		return
	case owner == s.self || r.Header.Get(forwardedHeader) != "":
		h.next.ServeHTTP(w, r)
		return
	case !s.peers.contains(r.Context(), owner):
		s.log.InfoContext(r.Context(), "edge.session_refused", "reason", "owner_gone", "owner", owner.String())
		sessionNotFound(w)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// Already in memory (serveMCP read it): kept so that a request on a
		// connection the owner just closed can be sent again.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "the request body could not be read", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	}
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner)))
}

// sessionNotFound is the SDK's answer to an unknown session (serveMCP
// turns it into a JSON-RPC error): the client starts a new session.
func sessionNotFound(w http.ResponseWriter) {
	http.Error(w, "session not found", http.StatusNotFound)
}

func (s *sessions) rewrite(pr *httputil.ProxyRequest) {
	owner := pr.In.Context().Value(ownerKey{}).(netip.AddrPort)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = owner.String()
	// The owner checks Host, Origin and the token as for any request.
	pr.Out.Host = pr.In.Host
	pr.Out.Header.Set(forwardedHeader, s.self.String())
}

// dropCORS removes the owner's CORS headers: this replica has set its own
// (the same ones), and a browser refuses a response that has two.
func dropCORS(res *http.Response) error {
	for k := range res.Header {
		if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
			res.Header.Del(k)
		}
	}
	return nil
}

// forwardFailed answers a request the owner did not answer: 404 when the
// owner cannot be reached (it is gone, and its sessions with it), 502 when
// it can but the exchange broke off. A request sent just as the owner died
// fails on the connection it was sent on rather than at the dial, so a
// failure that is not the dial's asks whether the owner still accepts
// connections.
func (s *sessions) forwardFailed(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if ctx.Err() != nil {
		return // the client went away
	}
	owner := ctx.Value(ownerKey{}).(netip.AddrPort)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || !reachable(ctx, owner) {
		s.log.WarnContext(ctx, "edge.session_refused", "reason", "owner_unreachable", "owner", owner.String(), "error", err.Error())
		sessionNotFound(w)
		return
	}
	s.log.WarnContext(ctx, "edge.session_forward_failed", "owner", owner.String(), "error", err.Error())
	http.Error(w, "Bad Gateway: the edge replica holding this session did not answer", http.StatusBadGateway)
}

// reachable reports whether a accepts a TCP connection.
func reachable(ctx context.Context, a netip.AddrPort) bool {
	c, err := (&net.Dialer{Timeout: forwardDialTimeout}).DialContext(ctx, "tcp", a.String())
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// How often peer names are looked up.
const (
	// peersTTL is how long a lookup is used.
	peersTTL = 5 * time.Second
	// peersMinRefresh spaces the lookups a missing address causes (a
	// replica that started since the last lookup).
	peersMinRefresh = time.Second
	// peersMaxStale is how long addresses are used after lookups fail.
	peersMaxStale = 30 * time.Second
	// peersLookupTimeout bounds one lookup.
	peersLookupTimeout = 2 * time.Second
)

// peerSet is the set of edge replicas: addresses, and names resolved every
// peersTTL (at once when an address is missing).
type peerSet struct {
	fixed    map[netip.AddrPort]bool
	names    []peerName
	resolver PeerResolver
	now      func() time.Time

	lookup sync.Mutex // one lookup at a time; the others wait for it

	mu         sync.Mutex
	resolved   map[netip.AddrPort]bool
	resolvedAt time.Time // of the last lookup that succeeded
	triedAt    time.Time // of the last lookup
}

type peerName struct {
	host string
	port uint16
}

func newPeerSet(peers []string, r PeerResolver) (*peerSet, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	p := &peerSet{fixed: map[netip.AddrPort]bool{}, resolver: r, now: time.Now}
	for _, v := range peers {
		host, port, err := net.SplitHostPort(strings.TrimSpace(v))
		n, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || host == "" || perr != nil || n == 0 {
			return nil, fmt.Errorf("edge: sessions: peer %q is not host:port", v)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			p.fixed[canonical(netip.AddrPortFrom(a, uint16(n)))] = true
			continue
		}
		p.names = append(p.names, peerName{host, uint16(n)})
	}
	return p, nil
}

// contains reports whether a is an edge replica now.
func (p *peerSet) contains(ctx context.Context, a netip.AddrPort) bool {
	if p.fixed[a] {
		return true
	}
	if len(p.names) == 0 {
		return false
	}
	if set, ok := p.fresh(a); ok {
		return set[a]
	}
	p.lookup.Lock()
	defer p.lookup.Unlock()
	if set, ok := p.fresh(a); ok { // a lookup just finished
		return set[a]
	}
	p.resolve(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resolved[a]
}

// fresh returns the resolved set when it needs no new lookup to answer
// for a.
func (p *peerSet) fresh(a netip.AddrPort) (map[netip.AddrPort]bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch {
	case now.Sub(p.triedAt) < peersMinRefresh:
		return p.resolved, true
	case now.Sub(p.resolvedAt) < peersTTL && p.resolved[a]:
		return p.resolved, true
	}
	return nil, false
}

// resolve looks every name up again. A failed lookup keeps the addresses
// it gave last time, for up to peersMaxStale.
func (p *peerSet) resolve(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peersLookupTimeout)
	defer cancel()
	set := map[netip.AddrPort]bool{}
	failed := false
	for _, n := range p.names {
		addrs, err := p.resolver.LookupNetIP(ctx, "ip", n.host)
		if err != nil {
			failed = true
			continue
		}
		for _, a := range addrs {
			set[canonical(netip.AddrPortFrom(a, n.port))] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.triedAt = now
	if failed {
		if now.Sub(p.resolvedAt) < peersMaxStale {
			for a := range p.resolved {
				set[a] = true
			}
		}
		p.resolved = set
		return
	}
	p.resolved, p.resolvedAt = set, now
}
