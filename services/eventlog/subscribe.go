package eventlog

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/jcs"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// Defaults of Webhooks.
const (
	// DefaultMaxSubscriptions is how many live subscriptions a principal
	// may hold.
	DefaultMaxSubscriptions = 20
	// DefaultTTL is a subscription's TTL when the client names none.
	DefaultTTL = time.Hour
	// MaxTTL bounds every TTL, "no expiry" included: a subscriber
	// refreshes at least this often, and each refresh re-checks its grants.
	MaxTTL = 24 * time.Hour
	// MinTTL is the shortest TTL granted (shorter requests are raised).
	MinTTL = time.Minute
	// SecretGrace is how long a refreshed subscription's previous secret
	// signs beside the new one.
	SecretGrace = time.Hour
)

// SealPurpose is the internal/seal purpose of webhook secrets.
const SealPurpose = "toolmesh.events.v1 webhook secret"

// Webhooks configures webhook subscriptions; the zero value (no Sealer)
// offers none.
type Webhooks struct {
	// Sealer seals the secrets at rest (SealPurpose).
	Sealer *seal.Sealer
	// Egress is the policy callback URLs are checked against when a
	// client subscribes and when each delivery connects.
	Egress egress.Policy
	// AllowLoopback lets callback URLs be http:// and reach loopback
	// addresses: a development setting, off in deploy/.
	AllowLoopback bool
	// MaxPerPrincipal bounds the live subscriptions of one principal
	// (default DefaultMaxSubscriptions).
	MaxPerPrincipal int
	// Deliveries starts a subscription's delivery workflow.
	Deliveries Deliveries
}

// Deliveries starts delivery workflows (the Temporal implementation is
// NewTemporalDeliveries).
type Deliveries interface {
	// Start starts the delivery workflow of a subscription unless it runs.
	Start(ctx context.Context, in *eventsv1.DeliveryWorkflowInput) error
}

// policy is the egress policy of deliveries: Egress, plus loopback when
// allowed.
func (w Webhooks) policy() egress.Policy {
	p := w.Egress
	if w.AllowLoopback {
		p.Allow = append(append([]netip.Prefix{}, p.Allow...), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
	}
	return p
}

// Subscribe implements EventsService.Subscribe.
func (s *Service) Subscribe(ctx context.Context, req *eventsv1.SubscribeRequest) (*eventsv1.SubscribeResponse, error) {
	caller := mesh.FromContext(ctx).Caller
	if caller.Agent == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	if s.cfg.Webhooks.Sealer == nil || s.cfg.Webhooks.Deliveries == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this event log delivers no webhooks"))
	}
	t, ok := s.types[req.GetName()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no event type %q", req.GetName()))
	}
	if ok, lacks := t.Tool.PermittedBy(caller.Grants); !ok {
		// A refresh its grants no longer allow ends the subscription.
		s.terminate(ctx, subscriptionID(caller, req.GetUrl(), t.Name, canonicalArgs(req.GetArguments())), EndedForbidden, CodeForbidden)
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("these events follow the tool %s, and %s", t.Tool.Name, lacks))
	}
	if _, err := s.arguments(ctx, t, req.GetArguments()); err != nil {
		return nil, err
	}
	args := canonicalArgs(req.GetArguments())
	if err := s.checkCallback(ctx, req.GetUrl()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("url: %w", err))
	}
	secret, err := ParseSecret(req.GetSecret())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("secret: %w", err))
	}
	now := s.cfg.Now().UTC()
	sub := &Subscription{
		ID: subscriptionID(caller, req.GetUrl(), t.Name, args), Principal: principalOf(caller),
		Subject: caller.Subject, Agent: caller.Agent, Roles: caller.Roles, Grants: caller.Grants,
		Name: t.Name, Arguments: args, URL: req.GetUrl(), Updated: now,
	}
	sub.Secret = s.cfg.Webhooks.Sealer.Seal(secret, []byte(sub.ID))
	if ttl := grantTTL(req.TtlMs); ttl > 0 {
		sub.Expire = now.Add(ttl)
	}
	if req.Cursor != nil {
		after, err := parseCursor(req.GetCursor())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		p, err := s.store.Read(ctx, Query{Name: t.Name, After: after, Limit: 1})
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read events: %w", err))
		}
		sub.Cursor, sub.StartTruncated = after, after < p.PrunedThrough
	} else {
		if sub.Cursor, err = s.store.End(ctx); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read events: %w", err))
		}
	}
	limit := s.cfg.Webhooks.MaxPerPrincipal
	saved, err := s.store.SaveSubscription(ctx, sub, now.Add(SecretGrace), limit)
	if errors.Is(err, ErrSubscriptionCap) {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("subscriptions: this caller holds %d live subscriptions, the most it may; unsubscribe one or let one expire", limit))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("save subscription: %w", err))
	}
	if err := s.cfg.Webhooks.Deliveries.Start(ctx, &eventsv1.DeliveryWorkflowInput{
		SubscriptionId: saved.ID, Subject: saved.Subject, AgentId: saved.Agent, Roles: saved.Roles, Grants: saved.Grants,
	}); err != nil {
		// The subscription is saved; the client's retry (a refresh)
		// starts its deliveries.
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("start deliveries: %w", err))
	}
	s.log.InfoContext(ctx, "events.subscribed", "subscription", saved.ID, "event", t.Name, "agent", caller.Agent, "url", egress.Redact(saved.URL))
	return subscribeResponse(saved, now), nil
}

func subscribeResponse(sub *Subscription, now time.Time) *eventsv1.SubscribeResponse {
	out := &eventsv1.SubscribeResponse{Id: sub.ID, Cursor: cursorOf(sub.Cursor), Truncated: sub.StartTruncated,
		DeliveryStatus: &eventsv1.DeliveryStatus{Active: sub.Live(now), LastError: sub.LastError}}
	if !sub.Expire.IsZero() {
		out.RefreshBefore = timestamppb.New(sub.Expire)
	}
	if !sub.LastDelivery.IsZero() {
		out.DeliveryStatus.LastDeliveryTime = timestamppb.New(sub.LastDelivery)
	}
	if !sub.FailedSince.IsZero() {
		out.DeliveryStatus.FailedSince = timestamppb.New(sub.FailedSince)
	}
	return out
}

// Unsubscribe implements EventsService.Unsubscribe.
func (s *Service) Unsubscribe(ctx context.Context, req *eventsv1.UnsubscribeRequest) (*eventsv1.UnsubscribeResponse, error) {
	caller := mesh.FromContext(ctx).Caller
	if caller.Agent == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	id := subscriptionID(caller, req.GetUrl(), req.GetName(), canonicalArgs(req.GetArguments()))
	ended, err := s.store.EndSubscription(ctx, id, "unsubscribed", s.cfg.Now())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if ended {
		s.log.InfoContext(ctx, "events.unsubscribed", "subscription", id)
	}
	return &eventsv1.UnsubscribeResponse{Ended: ended}, nil
}

// EndSubscription implements EventsService.EndSubscription.
func (s *Service) EndSubscription(ctx context.Context, req *eventsv1.EndSubscriptionRequest) (*eventsv1.EndSubscriptionResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	s.terminate(ctx, req.GetSubscriptionId(), req.GetReason(), CodeForbidden)
	return &eventsv1.EndSubscriptionResponse{}, nil
}

// grantTTL is the TTL granted for a request: absent is DefaultTTL; 0 (no
// expiry) and longer ones are MaxTTL; shorter than MinTTL is MinTTL.
func grantTTL(ms *int64) time.Duration {
	if ms == nil {
		return DefaultTTL
	}
	ttl := time.Duration(*ms) * time.Millisecond
	if ttl == 0 || ttl > MaxTTL {
		return MaxTTL
	}
	return max(ttl, MinTTL)
}

// principalOf is whom the cap counts a caller's subscriptions against.
func principalOf(c mesh.Caller) string {
	if c.Subject != "" {
		return "s:" + c.Subject
	}
	return "a:" + c.Agent
}

// canonicalArgs is a subscription's arguments in canonical JSON (RFC
// 8785), "" for none, so equal arguments name the same subscription.
func canonicalArgs(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "{}" || raw == "null" {
		return ""
	}
	c, err := jcs.Transform([]byte(raw))
	if err != nil {
		return raw
	}
	if string(c) == "{}" {
		return ""
	}
	return string(c)
}

// subscriptionID derives a subscription's id from (caller, URL, type,
// arguments): "sub_" and 32 base32 characters.
func subscriptionID(c mesh.Caller, callback, name, args string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{principalOf(c), c.Agent, callback, name, args}, "\x00")))
	return "sub_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:20]))
}

// ParseSecret checks a client's webhook secret — "whsec_" and the
// standard base64 of 24 to 64 bytes — and returns its key bytes. Errors
// never repeat the value.
func ParseSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New(`must start with "whsec_" followed by the base64 of 24 to 64 random bytes`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil {
		return nil, errors.New(`the part after "whsec_" is not base64`)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("decodes to %d bytes; want 24 to 64 random bytes", len(key))
	}
	return key, nil
}

// checkCallback checks a callback URL when a client subscribes: https
// (http only to loopback, when allowed), no user info, no fragment, and an
// address the egress policy allows. Errors name no path or query.
func (s *Service) checkCallback(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("must be an absolute https URL")
	}
	if u.Fragment != "" {
		return errors.New("must not carry a fragment")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !s.cfg.Webhooks.AllowLoopback || !isLoopbackHost(u.Hostname()) {
			return errors.New("must be https (plain http is allowed only to a loopback receiver, when the event log allows loopback receivers for development)")
		}
	default:
		return fmt.Errorf("must be https, not %q", u.Scheme)
	}
	return s.cfg.Webhooks.policy().CheckURL(ctx, raw)
}

// isLoopbackHost reports whether host names the loopback interface.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// watchable reports whether a subscription's stored identity still may see
// its type's events.
func watchable(t *toolcatalog.EventType, sub *Subscription) bool {
	ok, _ := t.Tool.PermittedBy(sub.Grants)
	return ok
}
