package eventlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
)

// Webhook delivery: the delivery workflow of a subscription (workers/
// eventlog) asks NextDeliveries for the events after the subscription's
// position and Deliver for each; the service keeps the secret sealed and
// signs each POST itself, so no secret is in a workflow's input, an
// activity's arguments or a history.

// MaxBody bounds a delivery's body: a larger event is not sent (refused
// for that event only).
const MaxBody = 256 << 10

// DefaultDeliveryBatch is how many events NextDeliveries answers when the
// request names no limit.
const DefaultDeliveryBatch = 20

// DeliveryTimeout bounds one POST, response included.
const DeliveryTimeout = 10 * time.Second

// HeaderSubscriptionID names the subscription on every delivery.
const HeaderSubscriptionID = "X-MCP-Subscription-Id"

// CodeForbidden is the error code of a terminated envelope for a
// subscriber that may no longer see the events (SEP-3415's Forbidden, as
// events/poll answers it).
const CodeForbidden = -32024

// Ended reasons NextDeliveries and EndSubscription record.
const (
	EndedExpired   = "expired: not refreshed before its TTL"
	EndedGone      = "the receiver answered 410 Gone"
	EndedForbidden = "the subscriber may no longer see these events"
)

// subscriptionFor reads a subscription for its own caller (the delivery
// worker acts as the subscriber): PermissionDenied for anyone else.
func (s *Service) subscriptionFor(ctx context.Context, id string) (*Subscription, error) {
	caller := mesh.FromContext(ctx).Caller
	if caller.Agent == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	sub, err := s.store.Subscription(ctx, id)
	if errors.Is(err, ErrNoSubscription) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no subscription %s", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if sub.Agent != caller.Agent || sub.Subject != caller.Subject {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("subscription %s is another caller's", id))
	}
	return sub, nil
}

// NextDeliveries implements EventsService.NextDeliveries.
func (s *Service) NextDeliveries(ctx context.Context, req *eventsv1.NextDeliveriesRequest) (*eventsv1.NextDeliveriesResponse, error) {
	sub, err := s.subscriptionFor(ctx, req.GetSubscriptionId())
	if connect.CodeOf(err) == connect.CodeNotFound {
		return &eventsv1.NextDeliveriesResponse{Ended: "no such subscription"}, nil
	}
	if err != nil {
		return nil, err
	}
	if req.GetAcked() != "" {
		acked, err := parseCursor(req.GetAcked())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		if err := s.store.AckSubscription(ctx, sub.ID, acked); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		sub.Cursor = max(sub.Cursor, acked)
	}
	now := s.cfg.Now()
	t, ok := s.types[sub.Name]
	reason := sub.EndReason
	switch {
	case !sub.Ended.IsZero():
	case !ok:
		reason = "the event type is gone"
	case !sub.Live(now):
		reason = EndedExpired
	case !watchable(t, sub):
		reason = EndedForbidden
	}
	if reason != "" {
		switch {
		case !sub.Ended.IsZero():
		case reason == EndedForbidden:
			s.terminate(ctx, sub.ID, reason, CodeForbidden)
		default:
			if _, err := s.store.EndSubscription(ctx, sub.ID, reason, now); err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			s.log.InfoContext(ctx, "events.subscription_ended", "subscription", sub.ID, "reason", reason)
		}
		return &eventsv1.NextDeliveriesResponse{Ended: reason}, nil
	}
	q := Query{Name: t.Name, After: sub.Cursor, Limit: int(req.GetLimit())}
	if q.Limit == 0 {
		q.Limit = DefaultDeliveryBatch
	}
	if !(mesh.Caller{Roles: sub.Roles}).Oversees() {
		q.Agent = sub.Agent
	}
	p, err := s.store.Read(ctx, q)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read events: %w", err))
	}
	out := &eventsv1.NextDeliveriesResponse{From: cursorOf(sub.Cursor), Through: cursorOf(p.End), HasMore: p.Full, Truncated: sub.Cursor < p.PrunedThrough}
	args, err := s.arguments(ctx, t, sub.Arguments)
	if err != nil {
		return nil, err
	}
	for _, e := range p.Events {
		if args != nil {
			payload := dynamicpb.NewMessage(t.Payload)
			if err := proto.Unmarshal(e.Payload, payload); err != nil || !t.Matches(args, payload) {
				continue
			}
		}
		out.Deliveries = append(out.Deliveries, &eventsv1.Delivery{EventId: e.ID, Seq: e.Seq})
	}
	return out, nil
}

// body is an event as a delivery carries it.
type body struct {
	EventID   string          `json:"eventId"`
	Name      string          `json:"name"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
	Cursor    string          `json:"cursor"`
}

// Deliver implements EventsService.Deliver.
func (s *Service) Deliver(ctx context.Context, req *eventsv1.DeliverRequest) (*eventsv1.DeliverResponse, error) {
	sub, err := s.subscriptionFor(ctx, req.GetSubscriptionId())
	if connect.CodeOf(err) == connect.CodeNotFound {
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED}, nil
	}
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	if !sub.Live(now) {
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED}, nil
	}
	e, err := s.store.Event(ctx, req.GetSeq())
	if errors.Is(err, ErrNoEvent) {
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_REFUSED, Error: "gone"}, nil
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if e.Name != sub.Name {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("event %d is not a %s", req.GetSeq(), sub.Name))
	}
	// A retry of a delivery the receiver acknowledged (its worker died
	// before it learned so) is not posted again.
	if done, err := s.store.Delivered(ctx, sub.ID, e.Seq); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	} else if done {
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_DELIVERED}, nil
	}
	raw, err := json.Marshal(body{EventID: e.ID, Name: e.Name, Timestamp: e.Time.UTC().Format(time.RFC3339Nano), Data: json.RawMessage(e.Data), Cursor: req.GetCursor()})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if len(raw) > MaxBody {
		s.log.WarnContext(ctx, "events.delivery_too_large", "subscription", sub.ID, "event_id", e.ID, "bytes", len(raw))
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_REFUSED, Error: "too_large"}, nil
	}
	sig, err := s.sign(sub, e.ID, now, raw)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	// The POST and its record outlive the caller: a delivery worker that
	// dies mid-call leaves a POST that either was acknowledged and is
	// marked so (its retry posts nothing) or was not.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeliveryTimeout+5*time.Second)
	defer cancel()
	res := s.post(ctx, sub, e.ID, now, sig, raw)
	if res.GetOutcome() == eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_DELIVERED {
		if err := s.store.MarkDelivered(ctx, sub.ID, e.Seq); err != nil {
			s.log.WarnContext(ctx, "events.delivery_unrecorded", "subscription", sub.ID, "error", err)
		}
	}
	if err := s.store.RecordDelivery(ctx, sub.ID, now, res.GetError()); err != nil {
		s.log.WarnContext(ctx, "events.delivery_unrecorded", "subscription", sub.ID, "error", err)
	}
	switch res.GetOutcome() {
	case eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED:
		if _, err := s.store.EndSubscription(ctx, sub.ID, EndedGone, now); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		s.log.InfoContext(ctx, "events.subscription_ended", "subscription", sub.ID, "reason", EndedGone)
	case eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED:
		s.log.InfoContext(ctx, "events.delivery_failed", "subscription", sub.ID, "event_id", e.ID, "attempt", req.GetAttempt(), "error", res.GetError())
	}
	return res, nil
}

// sign is the webhook-signature header of a delivery: the subscription's
// secret's signature, and its previous secret's during a refresh's grace
// window.
func (s *Service) sign(sub *Subscription, msgID string, now time.Time, raw []byte) (string, error) {
	sealed := [][]byte{sub.Secret}
	if sub.PrevSecret != nil && now.Before(sub.PrevUntil) {
		sealed = append(sealed, sub.PrevSecret)
	}
	var sigs []string
	for i, b := range sealed {
		key, err := s.cfg.Webhooks.Sealer.Open(b, []byte(sub.ID))
		if err != nil {
			if i == 0 {
				return "", fmt.Errorf("subscription %s: its secret does not open (was the mesh key changed?); the client must subscribe again", sub.ID)
			}
			continue
		}
		wh, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			return "", err
		}
		sig, err := wh.Sign(msgID, now, raw)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// post sends one delivery and says how it went.
func (s *Service) post(ctx context.Context, sub *Subscription, msgID string, now time.Time, sig string, raw []byte) *eventsv1.DeliverResponse {
	failed := func(category string) *eventsv1.DeliverResponse {
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED, Error: category}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(raw))
	if err != nil {
		return failed("connection_refused")
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(standardwebhooks.HeaderWebhookID, msgID)
	hreq.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	hreq.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	hreq.Header.Set(HeaderSubscriptionID, sub.ID)
	resp, err := s.webhooks.Do(hreq)
	if err != nil {
		return failed(errorCategory(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_DELIVERED}
	case c == http.StatusGone:
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED, Error: "http_4xx"}
	case c == http.StatusRequestEntityTooLarge:
		return &eventsv1.DeliverResponse{Outcome: eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_REFUSED, Error: "http_4xx"}
	case c >= 500:
		r := failed("http_5xx")
		r.RetryAfterMs = egress.RetryAfter(resp.Header, now).Milliseconds()
		return r
	default:
		// Other 4xx (a receiver that does not know the subscription yet
		// answers 503 or 425), and redirects, which are not followed.
		r := failed("http_4xx")
		r.RetryAfterMs = egress.RetryAfter(resp.Header, now).Milliseconds()
		return r
	}
}

// errorCategory is the lastError category of a failed request.
func errorCategory(err error) string {
	var terr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	switch {
	case egress.IsTimeout(err):
		return "timeout"
	case errors.As(err, &terr), errors.As(err, &rerr), strings.Contains(err.Error(), "tls:"):
		return "tls_error"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, egress.ErrRefused):
		return "connection_refused"
	}
	return "connection_refused"
}

// terminate ends a subscription the mesh ended (not the client: an
// unsubscribe, an expiry, a 410) and tells the receiver with a signed
// {"type":"terminated","error":{…}} envelope (webhook-id
// msg_terminated_<random>), once and without retries: a receiver that
// misses it learns at its next refresh, which is refused.
func (s *Service) terminate(ctx context.Context, id, reason string, code int64) {
	now := s.cfg.Now()
	ended, err := s.store.EndSubscription(ctx, id, reason, now)
	if err != nil || !ended {
		if err != nil {
			s.log.WarnContext(ctx, "events.subscription_end_failed", "subscription", id, "error", err)
		}
		return
	}
	s.log.InfoContext(ctx, "events.subscription_ended", "subscription", id, "reason", reason)
	sub, err := s.store.Subscription(ctx, id)
	if err != nil || s.cfg.Webhooks.Sealer == nil {
		return
	}
	type rpcError struct {
		Code    int64          `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data,omitempty"`
	}
	raw, _ := json.Marshal(struct {
		Type  string   `json:"type"`
		Error rpcError `json:"error"`
	}{"terminated", rpcError{Code: code, Message: reason, Data: map[string]any{"kind": "subscription", "name": sub.Name}}})
	msgID := "msg_terminated_" + randomID()
	sig, err := s.sign(sub, msgID, now, raw)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeliveryTimeout)
	defer cancel()
	res := s.post(pctx, sub, msgID, now, sig, raw)
	s.log.InfoContext(ctx, "events.terminated_sent", "subscription", id, "outcome", res.GetOutcome().String(), "error", res.GetError())
}

// randomID is 16 random bytes in lowercase base32.
func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}
