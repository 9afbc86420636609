package eventlog_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/eventlog"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
)

// reader is ctx carrying agent's call with the read scope.
func reader(ctx context.Context, agent string) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Grants: []string{"toolmesh:read"}}})
}

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// startedDeliveries records the delivery workflows Subscribe starts.
type startedDeliveries struct {
	mu  sync.Mutex
	ins []*eventsv1.DeliveryWorkflowInput
}

func (d *startedDeliveries) Start(_ context.Context, in *eventsv1.DeliveryWorkflowInput) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ins = append(d.ins, in)
	return nil
}

// receiver is a webhook endpoint that verifies each delivery with the
// Standard Webhooks library (the timestamp against the service's test
// clock: not checked) and answers status.
type receiver struct {
	mu       sync.Mutex
	status   int
	secrets  []string
	got      []map[string]any
	verified []int // how many of secrets verified each delivery
	headers  []http.Header
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, s := range rc.secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err == nil && wh.VerifyIgnoringTimestamp(body, r.Header) == nil { // the service runs on a test clock
			n++
		}
	}
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	rc.got, rc.verified, rc.headers = append(rc.got, m), append(rc.verified, n), append(rc.headers, r.Header.Clone())
	w.WriteHeader(rc.status)
}

// TestWebhookSubscriptions: a subscription is validated (type, grants,
// arguments, URL, secret), stored with its secret sealed, capped per
// principal, refreshed in place; deliveries carry the event signed with
// the Standard Webhooks scheme (both secrets during a refresh), 410 ends
// the subscription, 413 refuses one event only.
func TestWebhookSubscriptions(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		st := sqldbtest.OpenStore(t, e.Open(t), eventlogstore.Open)
		key := make([]byte, seal.KeySize)
		_, _ = rand.Read(key)
		sealer, err := seal.New(key, eventlog.SealPurpose)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		clock := now
		starts := &startedDeliveries{}
		newSvc := func(loopback bool) *eventlog.Service {
			svc, err := eventlog.New(st, eventlog.Config{Types: types(t), Now: func() time.Time { return clock },
				Webhooks: eventlog.Webhooks{Sealer: sealer, AllowLoopback: loopback, MaxPerPrincipal: 2, Deliveries: starts}})
			if err != nil {
				t.Fatal(err)
			}
			return svc
		}
		svc := newSvc(true)
		rc := &receiver{status: 200}
		hook := httptest.NewServer(rc)
		t.Cleanup(hook.Close)
		alice := reader(ctx, "alice")
		secret := newSecret(t)
		rc.secrets = []string{secret}

		code := func(err error) connect.Code { return connect.CodeOf(err) }
		sub := func(ctx context.Context, req *eventsv1.SubscribeRequest) (*eventsv1.SubscribeResponse, error) {
			return svc.Subscribe(ctx, req)
		}
		// Refusals.
		for name, c := range map[string]struct {
			ctx  context.Context
			svc  *eventlog.Service
			req  *eventsv1.SubscribeRequest
			want connect.Code
		}{
			"unknown type":    {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.unknown", Url: hook.URL, Secret: secret}, connect.CodeNotFound},
			"no grant":        {as(ctx, "alice", false), svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: secret}, connect.CodePermissionDenied},
			"secret prefix":   {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: strings.TrimPrefix(secret, "whsec_")}, connect.CodeInvalidArgument},
			"secret short":    {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16))}, connect.CodeInvalidArgument},
			"http elsewhere":  {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: "http://example.com/hook", Secret: secret}, connect.CodeInvalidArgument},
			"loopback not on": {alice, newSvc(false), &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: secret}, connect.CodeInvalidArgument},
			"https private":   {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: "https://10.0.0.1/hook", Secret: secret}, connect.CodeInvalidArgument},
			"bad arguments":   {alice, svc, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: secret, Arguments: `{"nope": 1}`}, connect.CodeInvalidArgument},
		} {
			_, err := c.svc.Subscribe(c.ctx, c.req)
			if code(err) != c.want {
				t.Errorf("%s: err = %v, want %v", name, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), strings.TrimPrefix(secret, "whsec_")) {
				t.Errorf("%s: the error repeats the secret", name)
			}
		}
		if len(starts.ins) != 0 {
			t.Fatalf("a refused subscription started deliveries: %v", starts.ins)
		}

		res, err := sub(alice, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.GetId(), "sub_") || res.GetRefreshBefore().AsTime().Sub(now) != eventlog.DefaultTTL || !res.GetDeliveryStatus().GetActive() {
			t.Fatalf("subscribe = %v", res)
		}
		if len(starts.ins) != 1 || starts.ins[0].GetSubscriptionId() != res.GetId() || starts.ins[0].GetAgentId() != "alice" {
			t.Fatalf("deliveries started = %v", starts.ins)
		}
		stored, err := st.Subscription(ctx, res.GetId())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(stored.Secret), strings.TrimPrefix(secret, "whsec_")) || len(stored.Secret) < 32 {
			t.Fatal("the secret is stored in the clear")
		}

		// The cap counts live subscriptions per principal.
		if _, err := sub(alice, &eventsv1.SubscribeRequest{Name: "ask.answered", Url: hook.URL, Secret: newSecret(t)}); err != nil {
			t.Fatal(err)
		}
		_, err = sub(alice, &eventsv1.SubscribeRequest{Name: "ask.expired", Url: hook.URL, Secret: newSecret(t)})
		if code(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "2 live subscriptions") {
			t.Fatalf("third subscription: %v", err)
		}
		if _, err := sub(reader(ctx, "bob"), &eventsv1.SubscribeRequest{Name: "ask.expired", Url: hook.URL, Secret: newSecret(t)}); err != nil {
			t.Fatalf("another principal's subscription: %v", err)
		}
		if u, err := svc.Unsubscribe(alice, &eventsv1.UnsubscribeRequest{Name: "ask.answered", Url: hook.URL}); err != nil || !u.GetEnded() {
			t.Fatalf("unsubscribe = %v, %v", u, err)
		}
		if _, err := sub(alice, &eventsv1.SubscribeRequest{Name: "ask.expired", Url: hook.URL, Secret: newSecret(t)}); err != nil {
			t.Fatalf("subscription after an unsubscribe: %v", err)
		}

		// Events: alice's and bob's asks; alice's subscription delivers hers.
		if _, err := svc.Record(as(ctx, "relay", false), nil); err == nil {
			t.Fatal("an agent recorded events")
		}
		record := func(occs ...*outboxv1.Occurrence) {
			t.Helper()
			svcCtx := mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: "relay", Agent: "relay", Roles: []string{mesh.RoleService}}})
			if _, err := svc.Record(svcCtx, &eventsv1.RecordRequest{Occurrences: occs}); err != nil {
				t.Fatal(err)
			}
		}
		record(askEvent("ask.created", "bob", "ask_00000000000000000000000011", now), askEvent("ask.created", "alice", "ask_00000000000000000000000012", now),
			askEvent("ask.created", "alice", "ask_00000000000000000000000013", now), askEvent("ask.created", "alice", "ask_00000000000000000000000014", now),
			askEvent("ask.created", "alice", "ask_00000000000000000000000015", now), askEvent("ask.created", "alice", "ask_00000000000000000000000016", now))
		if _, err := svc.NextDeliveries(reader(ctx, "bob"), &eventsv1.NextDeliveriesRequest{SubscriptionId: res.GetId()}); code(err) != connect.CodePermissionDenied {
			t.Fatalf("another agent read alice's deliveries: %v", err)
		}
		next, err := svc.NextDeliveries(alice, &eventsv1.NextDeliveriesRequest{SubscriptionId: res.GetId()})
		if err != nil || next.GetEnded() != "" || len(next.GetDeliveries()) != 5 {
			t.Fatalf("next deliveries = %v, %v", next, err)
		}
		deliver := func(d *eventsv1.Delivery) *eventsv1.DeliverResponse {
			t.Helper()
			out, err := svc.Deliver(alice, &eventsv1.DeliverRequest{SubscriptionId: res.GetId(), Seq: d.GetSeq(), Cursor: res.GetCursor()})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if out := deliver(next.GetDeliveries()[0]); out.GetOutcome() != eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_DELIVERED {
			t.Fatalf("deliver = %v", out)
		}
		if len(rc.got) != 1 || rc.verified[0] != 1 || rc.got[0]["eventId"] != next.GetDeliveries()[0].GetEventId() ||
			rc.headers[0].Get("webhook-id") != next.GetDeliveries()[0].GetEventId() || rc.headers[0].Get("X-MCP-Subscription-Id") != res.GetId() {
			t.Fatalf("delivered %v (verified %v) with %v", rc.got, rc.verified, rc.headers)
		}
		// A retry of an acknowledged delivery (its worker died before it
		// learned so) is not posted again.
		if out := deliver(next.GetDeliveries()[0]); out.GetOutcome() != eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_DELIVERED || len(rc.got) != 1 {
			t.Fatalf("a delivered event delivered again: %v, %d posts", out, len(rc.got))
		}

		// A refresh keeps the id and position and replaces the secret;
		// both sign during the grace window, only the new one after.
		secret2 := newSecret(t)
		again, err := sub(alice, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: secret2, TtlMs: new(int64(3 * 60 * 60 * 1000))})
		if err != nil || again.GetId() != res.GetId() || again.GetRefreshBefore().AsTime().Sub(clock) != 3*time.Hour {
			t.Fatalf("refresh = %v, %v", again, err)
		}
		rc.secrets = []string{secret, secret2}
		deliver(next.GetDeliveries()[1])
		if rc.verified[1] != 2 {
			t.Fatalf("during the grace window %d of 2 secrets verified", rc.verified[1])
		}
		clock = clock.Add(eventlog.SecretGrace + time.Second)
		deliver(next.GetDeliveries()[2])
		if rc.verified[2] != 1 || len(strings.Fields(rc.headers[2].Get("webhook-signature"))) != 1 {
			t.Fatalf("after the grace window: %d verified, signatures %q", rc.verified[2], rc.headers[2].Get("webhook-signature"))
		}

		// The egress guard applies at each delivery, not only at subscribe:
		// a replica that does not allow loopback receivers connects to
		// none, and follows no redirect (302 below fails).
		posts := len(rc.got)
		strict := newSvc(false)
		if out, err := strict.Deliver(alice, &eventsv1.DeliverRequest{SubscriptionId: res.GetId(), Seq: next.GetDeliveries()[3].GetSeq(), Cursor: res.GetCursor()}); err != nil ||
			out.GetOutcome() != eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED || out.GetError() != "connection_refused" || len(rc.got) != posts {
			t.Fatalf("delivery to a loopback receiver without the setting: %v, %v (%d posts, want %d)", out, err, len(rc.got), posts)
		}

		// 413 refuses this event only; 5xx fails (retry); 410 ends the
		// subscription.
		for _, c := range []struct {
			status int
			want   eventsv1.DeliveryOutcome
			d      *eventsv1.Delivery
		}{
			{413, eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_REFUSED, next.GetDeliveries()[3]},
			{503, eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED, next.GetDeliveries()[4]},
			{302, eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_FAILED, next.GetDeliveries()[4]},
		} {
			rc.status = c.status
			if out := deliver(c.d); out.GetOutcome() != c.want {
				t.Errorf("%d: %v, want %v", c.status, out, c.want)
			}
		}
		rc.status = 410
		if out := deliver(next.GetDeliveries()[4]); out.GetOutcome() != eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_ENDED {
			t.Fatalf("410: %v", out)
		}
		if next, err := svc.NextDeliveries(alice, &eventsv1.NextDeliveriesRequest{SubscriptionId: res.GetId(), Acked: next.GetThrough()}); err != nil || next.GetEnded() != eventlog.EndedGone {
			t.Fatalf("after 410: %v, %v", next, err)
		}

		// A body over 256 KiB is not sent: refused for that event only.
		bigAsk := &ownerv1.Ask{AskId: "ask_00000000000000000000000021", AgentId: "carol", Question: strings.Repeat("?", eventlog.MaxBody)}
		big := outbox.New(outbox.ID("ask.created", bigAsk.GetAskId()), "ask.created", &ownerv1.AskEventCreated{AskId: bigAsk.GetAskId(), AgentId: "carol", Ask: bigAsk}, now)

		// A refresh the caller's grants no longer allow is refused and
		// ends the subscription.
		carol, carolSecret := reader(ctx, "carol"), newSecret(t)
		rc.secrets = []string{carolSecret}
		held, err := sub(carol, &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: carolSecret})
		if err != nil {
			t.Fatal(err)
		}
		record(big)
		if nb, err := svc.NextDeliveries(carol, &eventsv1.NextDeliveriesRequest{SubscriptionId: held.GetId()}); err != nil || len(nb.GetDeliveries()) != 1 {
			t.Fatalf("carol's deliveries: %v, %v", nb, err)
		} else if out, err := svc.Deliver(carol, &eventsv1.DeliverRequest{SubscriptionId: held.GetId(), Seq: nb.GetDeliveries()[0].GetSeq()}); err != nil ||
			out.GetOutcome() != eventsv1.DeliveryOutcome_DELIVERY_OUTCOME_REFUSED || out.GetError() != "too_large" {
			t.Fatalf("a body over 256 KiB: %v, %v", out, err)
		}
		if _, err := sub(as(ctx, "carol", false), &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: newSecret(t)}); code(err) != connect.CodePermissionDenied {
			t.Fatalf("a refresh without the grant: %v", err)
		}
		if next, err := svc.NextDeliveries(carol, &eventsv1.NextDeliveriesRequest{SubscriptionId: held.GetId()}); err != nil || next.GetEnded() != eventlog.EndedForbidden {
			t.Fatalf("after a refused refresh: %v, %v", next, err)
		}
		// …and tells the receiver, signed, with a terminated envelope.
		last := len(rc.got) - 1
		if rc.got[last]["type"] != "terminated" || rc.verified[last] != 1 || !strings.HasPrefix(rc.headers[last].Get("webhook-id"), "msg_terminated_") {
			t.Fatalf("last delivery %v (verified %d, id %q), want a signed terminated envelope", rc.got[last], rc.verified[last], rc.headers[last].Get("webhook-id"))
		}
		if e, _ := rc.got[last]["error"].(map[string]any); e["code"] != float64(-32024) {
			t.Errorf("terminated error = %v", rc.got[last]["error"])
		}

		// TTL: a subscription not refreshed ends.
		exp, err := sub(reader(ctx, "bob"), &eventsv1.SubscribeRequest{Name: "ask.created", Url: hook.URL, Secret: newSecret(t)})
		if err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(eventlog.DefaultTTL + time.Second)
		if next, err := svc.NextDeliveries(reader(ctx, "bob"), &eventsv1.NextDeliveriesRequest{SubscriptionId: exp.GetId()}); err != nil || next.GetEnded() != eventlog.EndedExpired {
			t.Fatalf("after the TTL: %v, %v", next, err)
		}
	})
}
