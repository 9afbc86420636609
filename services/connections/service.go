// Package connections is the connections domain: each agent's links to
// upstream accounts, so that a provider's service (github) acts upstream as
// the agent whose call it serves rather than as one shared token.
//
// A connection's tokens are sealed at rest with an envelope (internal/seal:
// a data key per record, wrapped by the newest configured key-encryption
// key) bound to the connection's id, and leave the service only in a
// GetToken answer.
//
// Who may do what:
//   - an agent lists its own connections (ListConnections, metadata only);
//     the owner and admins list every agent's;
//   - the owner unlinks one (DeleteConnection): its tokens are erased;
//   - GetToken, StoreConnection and MarkBroken need the mesh's service
//     role: the provider's service calls them. The mesh's identity proves a
//     caller holds a token signed with the mesh key, not which process it
//     is: any holder of that key may mint a service-role token, so the
//     mesh key guards the tokens as much as the key-encryption key does.
package connections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/server"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SealPurpose names the connections' keys among those derived from a
// key-encryption key.
const SealPurpose = "toolmesh.connections.v1 tokens"

// Defaults of Config.
const (
	// DefaultRefreshBefore is how long before its expiry a token is
	// refreshed.
	DefaultRefreshBefore = 5 * time.Minute
	// DefaultRefreshLease is how long a refresh may take before another
	// replica may try (the holder died).
	DefaultRefreshLease = 30 * time.Second
)

// Tokens are what a provider issued.
type Tokens struct {
	Access  string
	Refresh string    // "" when none was issued
	Expire  time.Time // zero when the access token does not expire
}

// Refresher exchanges a refresh token for new tokens at one provider.
type Refresher interface {
	Refresh(ctx context.Context, refreshToken string) (Tokens, error)
}

// ErrRefreshRefused is what a Refresher answers when the provider refused
// the refresh token (revoked, or already used): the connection is broken.
// Any other error is transient and the refresh is tried again later.
var ErrRefreshRefused = errors.New("the provider refused the refresh token")

// Config tunes the service.
type Config struct {
	// Envelope seals the tokens (purpose SealPurpose). Required.
	Envelope *seal.Envelope
	// Refreshers refresh the tokens of each provider that issues refresh
	// tokens; an expired token of a provider without one is not usable.
	Refreshers map[connectionsv1.Provider]Refresher
	// Revokers revoke tokens upstream when a connection is unlinked, at
	// each provider that allows it.
	Revokers map[connectionsv1.Provider]Revoker
	// RefreshBefore is how long before its expiry a token is refreshed;
	// DefaultRefreshBefore when zero.
	RefreshBefore time.Duration
	// RefreshLease bounds one refresh; DefaultRefreshLease when zero.
	RefreshLease time.Duration
	// Log records links, refreshes and breaks (never a token).
	Log *slog.Logger
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Service implements toolmesh.connections.v1.ConnectionsService.
type Service struct {
	store Store
	cfg   Config
}

var _ connectionsv1connect.ConnectionsServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) (*Service, error) {
	if cfg.Envelope == nil {
		return nil, errors.New("connections: no key-encryption key configured")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RefreshBefore == 0 {
		cfg.RefreshBefore = DefaultRefreshBefore
	}
	if cfg.RefreshLease == 0 {
		cfg.RefreshLease = DefaultRefreshLease
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, cfg: cfg}, nil
}

// Registration describes the service for internal/server.
func (s *Service) Registration() server.Service {
	return server.Register(connectionsv1connect.ConnectionsServiceName, connectionsv1connect.ConnectionsServiceHandler(s),
		connectionsv1connect.NewConnectionsServiceHandler, connectionsv1.RegisterConnectionsServiceHandler)
}

// now is the clock at the millisecond a store keeps.
func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// aad binds a sealed token to its connection and to which token it is.
func aad(id, which string) []byte { return []byte(SealPurpose + "\x00" + which + "\x00" + id) }

func (s *Service) seal(id string, t Tokens) Sealed {
	out := Sealed{KEK: s.cfg.Envelope.Newest(), Access: s.cfg.Envelope.Seal([]byte(t.Access), aad(id, "access"))}
	if t.Refresh != "" {
		out.Refresh = s.cfg.Envelope.Seal([]byte(t.Refresh), aad(id, "refresh"))
	}
	return out
}

func (s *Service) open(id string, t Sealed) (Tokens, error) {
	access, err := s.cfg.Envelope.Open(t.Access, aad(id, "access"))
	if err != nil {
		return Tokens{}, fmt.Errorf("open the access token of %s: %w", id, err)
	}
	out := Tokens{Access: string(access)}
	if len(t.Refresh) > 0 {
		refresh, err := s.cfg.Envelope.Open(t.Refresh, aad(id, "refresh"))
		if err != nil {
			return Tokens{}, fmt.Errorf("open the refresh token of %s: %w", id, err)
		}
		out.Refresh = string(refresh)
	}
	return out, nil
}

func internal(op string, err error) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("%s: %w", op, err))
}

// ListConnections implements ConnectionsService.ListConnections.
func (s *Service) ListConnections(ctx context.Context, req *connectionsv1.ListConnectionsRequest) (*connectionsv1.ListConnectionsResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	named := req.GetAgent()
	switch {
	case mesh.FromContext(ctx).Caller.Oversees():
	case named == "" || named == agent:
		named = agent
	default:
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("agent %s may list only its own connections, not %s's (listing another's needs the %s or %s role)", agent, named, mesh.RoleOwner, mesh.RoleAdmin))
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, named, req.GetProvider(), offset, limit)
	if err != nil {
		return nil, internal("list connections", err)
	}
	return &connectionsv1.ListConnectionsResponse{Connections: list, Page: paging.New(offset, limit, total)}, nil
}

// DeleteConnection implements ConnectionsService.DeleteConnection.
func (s *Service) DeleteConnection(ctx context.Context, req *connectionsv1.DeleteConnectionRequest) (*connectionsv1.DeleteConnectionResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleOwner)
	if err != nil {
		return nil, err
	}
	upstream, err := s.revokeUpstream(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	r, changed, err := s.store.SetStatus(ctx, req.GetId(), connectionsv1.Status_STATUS_REVOKED,
		[]connectionsv1.Status{connectionsv1.Status_STATUS_ACTIVE, connectionsv1.Status_STATUS_BROKEN}, s.now())
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("connection %s does not exist", req.GetId()))
	case err != nil:
		return nil, internal("unlink connection", err)
	}
	if changed {
		s.cfg.Log.Info("connections.unlinked", "connection", r.Conn.GetId(), "agent", r.Conn.GetAgent(),
			"provider", protoenum.Word(r.Conn.GetProvider()), "account", r.Conn.GetAccount(), "by", caller.Subject, "upstream", upstream)
	}
	return &connectionsv1.DeleteConnectionResponse{Connection: r.Conn}, nil
}

// revokeUpstream revokes connection id's token at its provider, before
// the connection is unlinked, and says what happened upstream: "revoked",
// "already" (the provider no longer knew it), "not_supported" (no
// revoker for the provider), "unopenable" (its key-encryption key is lost)
// or "none" (no token held). A provider that does not answer keeps the
// connection as it is: Unavailable, and the unlink can be tried again.
func (s *Service) revokeUpstream(ctx context.Context, id string) (string, error) {
	r, err := s.store.ByID(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("connection %s does not exist", id))
	case err != nil:
		return "", internal("read connection", err)
	case len(r.Tokens.Access) == 0:
		return "none", nil
	}
	rv := s.cfg.Revokers[r.Conn.GetProvider()]
	if rv == nil {
		return "not_supported", nil
	}
	tokens, err := s.open(id, r.Tokens)
	if err != nil {
		s.cfg.Log.Error("connections.revoke_skipped", "connection", id, "error", err.Error())
		return "unopenable", nil
	}
	switch err := rv.Revoke(ctx, tokens.Access); {
	case errors.Is(err, ErrAlreadyRevoked):
		return "already", nil
	case err != nil:
		s.cfg.Log.Warn("connections.revoke_failed", "connection", id, "provider", protoenum.Word(r.Conn.GetProvider()), "error", err.Error())
		return "", connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s did not revoke connection %s's token (%v); the connection is kept as it was: unlink it again",
			protoenum.Word(r.Conn.GetProvider()), id, err))
	}
	return "revoked", nil
}

// RevokeAgent implements ConnectionsService.RevokeAgent: every connection
// of the agent still holding tokens is revoked upstream, then unlinked. A
// provider that does not answer leaves its connection as it was, the
// others are unlinked, and the call answers Unavailable: call it again.
func (s *Service) RevokeAgent(ctx context.Context, req *connectionsv1.RevokeAgentRequest) (*connectionsv1.RevokeAgentResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleService)
	if connect.CodeOf(err) == connect.CodePermissionDenied {
		caller, err = mesh.RequireRole(ctx, mesh.RoleOwner)
	}
	if err != nil {
		return nil, err
	}
	out := &connectionsv1.RevokeAgentResponse{}
	var failed error
	for offset := 0; ; {
		page, total, err := s.store.List(ctx, req.GetAgent(), connectionsv1.Provider_PROVIDER_UNSPECIFIED, offset, 100)
		if err != nil {
			return nil, internal("list the agent's connections", err)
		}
		for _, c := range page {
			if c.GetStatus() == connectionsv1.Status_STATUS_REVOKED {
				continue
			}
			upstream, err := s.revokeUpstream(ctx, c.GetId())
			if err != nil {
				failed = err
				continue
			}
			r, changed, err := s.store.SetStatus(ctx, c.GetId(), connectionsv1.Status_STATUS_REVOKED,
				[]connectionsv1.Status{connectionsv1.Status_STATUS_ACTIVE, connectionsv1.Status_STATUS_BROKEN}, s.now())
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, internal("unlink connection", err)
			}
			if changed {
				out.Connections = append(out.Connections, r.Conn)
				s.cfg.Log.Info("connections.unlinked", "connection", r.Conn.GetId(), "agent", r.Conn.GetAgent(),
					"provider", protoenum.Word(r.Conn.GetProvider()), "account", r.Conn.GetAccount(), "by", caller.Subject, "upstream", upstream, "why", "agent_retired")
			}
		}
		offset += len(page)
		if len(page) == 0 || offset >= total {
			break
		}
	}
	if failed != nil {
		return nil, failed
	}
	return out, nil
}

// StoreConnection implements ConnectionsService.StoreConnection.
func (s *Service) StoreConnection(ctx context.Context, req *connectionsv1.StoreConnectionRequest) (*connectionsv1.StoreConnectionResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleService)
	if err != nil {
		return nil, err
	}
	now := s.now()
	id := ids.NewAt("con", now)
	c := &connectionsv1.Connection{
		Id: id, Agent: req.GetAgent(), Provider: req.GetProvider(), Account: req.GetAccount(), Scopes: req.GetScopes(),
		Status: connectionsv1.Status_STATUS_ACTIVE, CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now),
	}
	if req.GetExpireTime() != nil {
		c.ExpireTime = timestamppb.New(req.GetExpireTime().AsTime().Truncate(time.Millisecond))
	}
	sealed := s.seal(id, Tokens{Access: req.GetAccessToken(), Refresh: req.GetRefreshToken()})
	replaced, replacedErr := s.store.Get(ctx, req.GetAgent(), req.GetProvider())
	err = s.store.Put(ctx, Record{Conn: c, Tokens: sealed}, s.linkCall(req.GetCallKey(), now))
	if errors.Is(err, ErrCallEnded) {
		s.cfg.Log.Info("connections.link_refused", "agent", c.GetAgent(), "provider", protoenum.Word(c.GetProvider()), "reason", "call_ended", "by", caller.Subject)
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the call that asked agent %s's link ended (cancelled, declined or expired) before it was made: nothing was stored", c.GetAgent()))
	}
	if err != nil {
		return nil, internal("store connection", err)
	}
	if replacedErr == nil {
		s.revokeReplaced(ctx, replaced, req.GetAccessToken())
	}
	s.cfg.Log.Info("connections.linked", "connection", id, "agent", c.GetAgent(), "provider", protoenum.Word(c.GetProvider()),
		"account", c.GetAccount(), "by", caller.Subject)
	return &connectionsv1.StoreConnectionResponse{Connection: c}, nil
}

// linkCallRetention is how long what became of a call that asked for a
// link is kept: longer than any link for it stays usable.
const linkCallRetention = 24 * time.Hour

func (s *Service) linkCall(key string, now time.Time) LinkCall {
	return LinkCall{Key: key, Now: now, Until: now.Add(linkCallRetention)}
}

// EndLinkCall implements ConnectionsService.EndLinkCall.
func (s *Service) EndLinkCall(ctx context.Context, req *connectionsv1.EndLinkCallRequest) (*connectionsv1.EndLinkCallResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleService)
	if err != nil {
		return nil, err
	}
	ended, err := s.store.EndCall(ctx, req.GetAgent(), s.linkCall(req.GetCallKey(), s.now()))
	if err != nil {
		return nil, internal("end the link's call", err)
	}
	s.cfg.Log.Info("connections.link_call_ended", "agent", req.GetAgent(), "ended", ended, "by", caller.Subject)
	return &connectionsv1.EndLinkCallResponse{Ended: ended}, nil
}

// revokeReplaced revokes at its provider the token of a connection a new
// link replaced (the agent linked again), so no live token is left that
// the mesh no longer holds. Best effort: the new link stands whatever the
// provider answers; a failure is logged.
func (s *Service) revokeReplaced(ctx context.Context, old Record, newAccess string) {
	rv := s.cfg.Revokers[old.Conn.GetProvider()]
	if rv == nil || len(old.Tokens.Access) == 0 {
		return
	}
	tokens, err := s.open(old.Conn.GetId(), old.Tokens)
	if err != nil || tokens.Access == "" || tokens.Access == newAccess {
		return
	}
	if err := rv.Revoke(ctx, tokens.Access); err != nil && !errors.Is(err, ErrAlreadyRevoked) {
		s.cfg.Log.Warn("connections.revoke_failed", "connection", old.Conn.GetId(), "provider", protoenum.Word(old.Conn.GetProvider()), "replaced", true, "error", err.Error())
		return
	}
	s.cfg.Log.Info("connections.replaced_revoked", "connection", old.Conn.GetId(), "agent", old.Conn.GetAgent(), "provider", protoenum.Word(old.Conn.GetProvider()))
}

// MarkBroken implements ConnectionsService.MarkBroken.
func (s *Service) MarkBroken(ctx context.Context, req *connectionsv1.MarkBrokenRequest) (*connectionsv1.MarkBrokenResponse, error) {
	caller, err := mesh.RequireRole(ctx, mesh.RoleService)
	if err != nil {
		return nil, err
	}
	r, changed, err := s.store.SetStatus(ctx, req.GetId(), connectionsv1.Status_STATUS_BROKEN,
		[]connectionsv1.Status{connectionsv1.Status_STATUS_ACTIVE}, s.now())
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("connection %s does not exist", req.GetId()))
	case err != nil:
		return nil, internal("mark connection broken", err)
	}
	if changed {
		s.cfg.Log.Warn("connections.broken", "connection", r.Conn.GetId(), "agent", r.Conn.GetAgent(),
			"provider", protoenum.Word(r.Conn.GetProvider()), "account", r.Conn.GetAccount(), "by", caller.Subject)
	}
	return &connectionsv1.MarkBrokenResponse{Connection: r.Conn}, nil
}

func notLinked(reason connectionsv1.NotLinked_Reason, c *connectionsv1.Connection) *connectionsv1.GetTokenResponse {
	return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_NotLinked{
		NotLinked: &connectionsv1.NotLinked{Reason: reason, Connection: c}}}
}

// GetToken implements ConnectionsService.GetToken.
func (s *Service) GetToken(ctx context.Context, req *connectionsv1.GetTokenRequest) (*connectionsv1.GetTokenResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	for {
		r, err := s.store.Get(ctx, req.GetAgent(), req.GetProvider())
		switch {
		case errors.Is(err, ErrNotFound):
			return notLinked(connectionsv1.NotLinked_REASON_NONE, nil), nil
		case err != nil:
			return nil, internal("read connection", err)
		}
		switch r.Conn.GetStatus() {
		case connectionsv1.Status_STATUS_BROKEN:
			return notLinked(connectionsv1.NotLinked_REASON_BROKEN, r.Conn), nil
		case connectionsv1.Status_STATUS_REVOKED:
			return notLinked(connectionsv1.NotLinked_REASON_REVOKED, r.Conn), nil
		}
		tokens, err := s.open(r.Conn.GetId(), r.Tokens)
		if err != nil {
			return nil, internal("read connection", err)
		}
		now := s.now()
		expire := r.Conn.GetExpireTime()
		if expire == nil || now.Add(s.cfg.RefreshBefore).Before(expire.AsTime()) {
			return s.use(ctx, r, tokens.Access, now)
		}
		refresher := s.cfg.Refreshers[r.Conn.GetProvider()]
		if refresher == nil || tokens.Refresh == "" {
			if now.Before(expire.AsTime()) {
				return s.use(ctx, r, tokens.Access, now)
			}
			return notLinked(connectionsv1.NotLinked_REASON_EXPIRED, r.Conn), nil
		}
		done, res, err := s.refresh(ctx, r, refresher, tokens.Refresh, now)
		if done {
			return res, err
		}
		// Another caller holds the lease: wait for its refresh to land
		// (the generation moves) or its lease to end, then read again.
		if err := s.awaitRefresh(ctx, r); err != nil {
			return nil, err
		}
	}
}

// use answers the access token of r and records the use.
func (s *Service) use(ctx context.Context, r Record, access string, now time.Time) (*connectionsv1.GetTokenResponse, error) {
	if err := s.store.Touch(ctx, r.Conn.GetId(), now); err != nil {
		return nil, internal("record connection use", err)
	}
	r.Conn.UseTime = timestamppb.New(now)
	return &connectionsv1.GetTokenResponse{Result: &connectionsv1.GetTokenResponse_Token{
		Token: &connectionsv1.Token{AccessToken: access, Connection: r.Conn}}}, nil
}

// refresh refreshes r's tokens if this caller claims the lease. done is
// false when another caller holds it.
func (s *Service) refresh(ctx context.Context, r Record, refresher Refresher, refreshToken string, now time.Time) (bool, *connectionsv1.GetTokenResponse, error) {
	id := r.Conn.GetId()
	claimed, err := s.store.ClaimRefresh(ctx, id, r.Generation, now, now.Add(s.cfg.RefreshLease))
	if err != nil {
		return true, nil, internal("claim refresh", err)
	}
	if !claimed {
		return false, nil, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RefreshLease)
	defer cancel()
	fresh, err := refresher.Refresh(rctx, refreshToken)
	log := s.cfg.Log.With("connection", id, "agent", r.Conn.GetAgent(), "provider", protoenum.Word(r.Conn.GetProvider()), "account", r.Conn.GetAccount())
	switch {
	case errors.Is(err, ErrRefreshRefused):
		b, _, serr := s.store.SetStatus(rctx, id, connectionsv1.Status_STATUS_BROKEN, []connectionsv1.Status{connectionsv1.Status_STATUS_ACTIVE}, s.now())
		if serr != nil {
			return true, nil, internal("mark connection broken", serr)
		}
		log.Warn("connections.broken", "reason", "refresh refused")
		return true, notLinked(connectionsv1.NotLinked_REASON_BROKEN, b.Conn), nil
	case err != nil:
		if rerr := s.store.ReleaseRefresh(rctx, id, r.Generation); rerr != nil {
			log.Error("connections.release_refresh", "error", rerr.Error())
		}
		log.Warn("connections.refresh_failed", "error", err.Error())
		return true, nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("refreshing the %s token of agent %s failed; try again: %w",
			protoenum.Word(r.Conn.GetProvider()), r.Conn.GetAgent(), err))
	}
	if fresh.Refresh == "" {
		fresh.Refresh = refreshToken // the provider keeps the old one valid
	}
	stored, err := s.store.Refreshed(rctx, id, r.Generation, s.seal(id, fresh), fresh.Expire.UTC().Truncate(time.Millisecond), s.now())
	if err != nil {
		return true, nil, internal("store refreshed tokens", err)
	}
	if !stored {
		// Relinked or unlinked meanwhile: what is stored now stands.
		return false, nil, nil
	}
	log.Info("connections.refreshed")
	r, err = s.store.ByID(ctx, id)
	if err != nil {
		return true, nil, internal("read connection", err)
	}
	res, err := s.use(ctx, r, fresh.Access, s.now())
	return true, res, err
}

// awaitRefresh waits until r's refresh lease holder has stored its tokens or
// released the lease, or its lease ended, reading the row again and again.
func (s *Service) awaitRefresh(ctx context.Context, r Record) error {
	wait := 10 * time.Millisecond
	for {
		cur, err := s.store.ByID(ctx, r.Conn.GetId())
		switch {
		case errors.Is(err, ErrNotFound):
			return nil // relinked under a new id: read again
		case err != nil:
			return internal("read connection", err)
		}
		if cur.Generation != r.Generation || cur.Conn.GetStatus() != connectionsv1.Status_STATUS_ACTIVE || !s.now().Before(cur.LeaseUntil) {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("waiting for another replica to refresh the token: %w", ctx.Err()))
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Rewrap wraps the data keys of every connection's tokens with the newest
// key-encryption key, so that older ones can be removed, and returns how
// many it rewrapped. A connection whose tokens change meanwhile is left to
// the next run (its new tokens are wrapped by the newest key already).
func (s *Service) Rewrap(ctx context.Context) (int, error) {
	env, n := s.cfg.Envelope, 0
	for {
		batch, err := s.store.NotWrappedBy(ctx, env.Newest(), 100)
		if err != nil {
			return n, err
		}
		progress := false
		for _, r := range batch {
			id := r.Conn.GetId()
			t := Sealed{KEK: env.Newest()}
			if t.Access, _, err = env.Rewrap(r.Tokens.Access, aad(id, "access")); err != nil {
				return n, fmt.Errorf("rewrap the access token of %s: %w", id, err)
			}
			if len(r.Tokens.Refresh) > 0 {
				if t.Refresh, _, err = env.Rewrap(r.Tokens.Refresh, aad(id, "refresh")); err != nil {
					return n, fmt.Errorf("rewrap the refresh token of %s: %w", id, err)
				}
			}
			ok, err := s.store.Rewrapped(ctx, id, r.Generation, t)
			if err != nil {
				return n, err
			}
			if ok {
				n++
				progress = true
			}
		}
		if len(batch) == 0 || !progress {
			return n, nil
		}
	}
}
