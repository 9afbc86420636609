package mcpdoor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// Resource subscriptions. The services do not announce changes, so the
// edge polls: every ResourcePollInterval it reads each subscribed resource
// again, as one of its subscribers and through the same tool call as a
// read (not counted against the subscriber's rate limit), and when what it
// reads changes it sends notifications/resources/updated to every session
// subscribed to it (an ask answered, a task moved to another status, a
// memory saved over or deleted). A subscription needs the right to read
// the resource, checked by reading it once.
//
// Subscriptions live in the edge process that holds the session, as the
// sessions themselves do; each process polls its own. A session's
// subscriptions end with it.

// maxSubscriptionsPerSession bounds the resources one session watches, and
// so the polling one client can cause.
const maxSubscriptionsPerSession = 100

// subscriptions are the resources the sessions of this process watch.
type subscriptions struct {
	// read reads a resource as a subscriber.
	read func(ctx context.Context, k *resourceKind, p *identity.Principal, extra *mcp.RequestExtra, uri string) (*toolcall.Envelope, error)
	// kindOf finds the kind of a URI.
	kindOf func(uri string) (*resourceKind, string, bool)
	// sessions are the sessions alive; updated notifies subscribers.
	sessions func() iter.Seq[*mcp.ServerSession]
	updated  func(context.Context, *mcp.ResourceUpdatedNotificationParams) error
	interval time.Duration

	mu      sync.Mutex
	watches map[string]*watch // by URI
	polling bool
}

// watch is one subscribed resource.
type watch struct {
	kind *resourceKind
	// subscribers are the sessions watching it, each with its principal.
	subscribers map[*mcp.ServerSession]*identity.Principal
	// digest is what the resource read as last.
	digest [sha256.Size]byte
}

// digest identifies what a read answered: the data, or the error's code. A
// failure that may pass (the service is down or slow) keeps the last digest,
// so an outage notifies nobody.
func digest(env *toolcall.Envelope, last [sha256.Size]byte) [sha256.Size]byte {
	switch env.DomainCode {
	case toolcall.CodeUnavailable, toolcall.CodeDeadlineExceeded, toolcall.CodeInternal, toolcall.CodeRateLimited:
		return last
	}
	if env.IsError() {
		return sha256.Sum256([]byte("error:" + env.DomainCode))
	}
	return sha256.Sum256(env.Data)
}

// subscriber is the caller of a subscription request. A 2026-07-28
// subscriptions/listen stream subscribes with a request of the SDK's
// making, which carries no token: the caller's token is then the one the
// stream's HTTP request was authenticated with.
func (rs *resourceFeature) subscriber(ctx context.Context, req mcp.Request) (*identity.Principal, *mcp.RequestExtra, error) {
	extra := req.GetExtra()
	if extra == nil || extra.TokenInfo == nil {
		if ti := auth.TokenInfoFromContext(ctx); ti != nil {
			extra = &mcp.RequestExtra{TokenInfo: ti}
		}
	}
	p := rs.resolve.principalOf(extra)
	if p == nil {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated"}
	}
	return p, extra, nil
}

func (rs *resourceFeature) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	p, extra, err := rs.subscriber(ctx, req)
	if err != nil {
		return err
	}
	r, err := rs.resolve.reachFor(ctx, req)
	if err != nil {
		return err
	}
	if k, _, ok := rs.kindOf(req.Params.URI); ok && !k.reached(r) {
		return k.refuse(r, req.Params.URI)
	}
	return rs.subs.subscribe(ctx, req, p, extra)
}

func (s *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest, p *identity.Principal, extra *mcp.RequestExtra) error {
	uri := req.Params.URI
	k, _, ok := s.kindOf(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	env, err := s.read(ctx, k, p, extra, uri)
	if err != nil {
		return err
	}
	if env.IsError() {
		return envelopeError(env)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.watches {
		if _, ok := w.subscribers[req.Session]; ok {
			n++
		}
	}
	if n >= maxSubscriptionsPerSession {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("a session may subscribe to at most %d resources", maxSubscriptionsPerSession)}
	}
	w := s.watches[uri]
	if w == nil {
		w = &watch{kind: k, subscribers: map[*mcp.ServerSession]*identity.Principal{}, digest: digest(env, [sha256.Size]byte{})}
		s.watches[uri] = w
	}
	w.subscribers[req.Session] = p
	if !s.polling {
		s.polling = true
		go s.poll()
	}
	return nil
}

func (s *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[req.Params.URI]; w != nil {
		delete(w.subscribers, req.Session)
		if len(w.subscribers) == 0 {
			delete(s.watches, req.Params.URI)
		}
	}
	return nil
}

// poll reads the watched resources every interval until none is watched.
func (s *subscriptions) poll() {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for range tick.C {
		if !s.pollOnce() {
			return
		}
	}
}

// pollOnce reads each watched resource once and notifies its subscribers
// when it changed. It forgets sessions that have ended, and reports false,
// having stopped polling, when nothing is watched any more.
func (s *subscriptions) pollOnce() bool {
	live := map[*mcp.ServerSession]bool{}
	for ss := range s.sessions() {
		live[ss] = true
	}
	type job struct {
		uri string
		w   *watch
		p   *identity.Principal
	}
	var jobs []job
	s.mu.Lock()
	for uri, w := range s.watches {
		var p *identity.Principal
		for ss, sp := range w.subscribers {
			if !live[ss] {
				delete(w.subscribers, ss)
				continue
			}
			p = sp
		}
		if p == nil {
			delete(s.watches, uri)
			continue
		}
		jobs = append(jobs, job{uri, w, p})
	}
	if len(s.watches) == 0 {
		s.polling = false
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()

	ctx := context.WithValue(context.Background(), unmeteredKey{}, true)
	for _, j := range jobs {
		env, err := s.read(ctx, j.w.kind, j.p, nil, j.uri)
		if err != nil {
			continue
		}
		s.mu.Lock()
		d := digest(env, j.w.digest)
		changed := d != j.w.digest
		j.w.digest = d
		s.mu.Unlock()
		if changed {
			_ = s.updated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: j.uri})
		}
	}
	return true
}
