package owner_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
)

// hook is a local webhook receiver.
type hook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	sigs   []string
	status int
}

func newHook(t *testing.T) *hook {
	h := &hook{status: http.StatusNoContent}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, b)
		h.sigs = append(h.sigs, r.Header.Get(owner.HeaderSignature))
		status := h.status
		h.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) received() ([][]byte, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]byte(nil), h.bodies...), append([]string(nil), h.sigs...)
}

var allowLoopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

func TestNotifyFansOutToChannels(t *testing.T) {
	eachProtocol(t, owner.Config{Egress: allowLoopback}, func(t *testing.T, e *env) {
		h := newHook(t)
		const secret = "a-signing-secret-0123"
		hookCh, err := e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "ops", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK,
			WebhookUrl: h.srv.URL + "/hooks/T0/s3cr3t", WebhookSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		loud, err := e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "pager", Kind: ownerv1.ChannelKind_CHANNEL_KIND_LOG,
			MinLevel: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_CRITICAL})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.c.Notify(agentA(), &ownerv1.NotifyRequest{Title: "Build", Message: "nightly build is green"})
		if err != nil {
			t.Fatal(err)
		}
		status := map[string]ownerv1.DeliveryStatus{}
		for _, d := range res.GetDeliveries() {
			status[d.GetChannelName()] = d.GetStatus()
		}
		want := map[string]ownerv1.DeliveryStatus{
			"log":   ownerv1.DeliveryStatus_DELIVERY_STATUS_DELIVERED,
			"ops":   ownerv1.DeliveryStatus_DELIVERY_STATUS_DELIVERED,
			"pager": ownerv1.DeliveryStatus_DELIVERY_STATUS_SKIPPED,
		}
		if diff := cmp.Diff(want, status); diff != "" {
			t.Errorf("deliveries (-want +got):\n%s\n%v", diff, res.GetDeliveries())
		}
		// The log channel wrote the notification.
		var logged bool
		for _, ev := range e.logs.Events("owner.notification") {
			logged = logged || (ev["message"] == "nightly build is green" && ev["channel"] == "log" && ev["agent"] == "agent-a")
		}
		if !logged {
			t.Errorf("no owner.notification event on the log channel:\n%s", e.logs.String())
		}
		// The webhook got the typed payload, signed.
		bodies, sigs := h.received()
		if len(bodies) != 1 {
			t.Fatalf("webhook got %d requests, want 1", len(bodies))
		}
		v, err := boundary.NewValidator()
		if err != nil {
			t.Fatal(err)
		}
		var p ownerv1.WebhookPayload
		if vs := v.DecodeJSON(context.Background(), logging.Discard(), boundary.Webhook, "the payload", bodies[0], &p); vs != nil {
			t.Fatalf("webhook body %s fails the webhook.payload boundary: %v", bodies[0], vs)
		}
		if p.GetNotificationId() != res.GetNotificationId() || p.GetChannel() != "ops" || p.GetMessage() != "nightly build is green" ||
			p.GetTitle() != "Build" || p.GetAgentId() != "agent-a" || p.GetLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO {
			t.Errorf("payload = %v", &p)
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(sigs[0], "t="), ",")
		unix, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			t.Fatalf("signature %q: %v", sigs[0], err)
		}
		if want := owner.Sign(secret, time.Unix(unix, 0), bodies[0]); sigs[0] != want {
			t.Errorf("signature %q, want %q", sigs[0], want)
		}

		// A critical one reaches the pager too; a failing webhook is
		// reported without its URL's path.
		h.mu.Lock()
		h.status = http.StatusInternalServerError
		h.mu.Unlock()
		res, err = e.c.Notify(agentA(), &ownerv1.NotifyRequest{Message: "disk full", Level: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_CRITICAL})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.GetDeliveries() {
			switch d.GetChannelId() {
			case loud.GetChannel().GetChannelId():
				if d.GetStatus() != ownerv1.DeliveryStatus_DELIVERY_STATUS_DELIVERED {
					t.Errorf("pager delivery = %v", d)
				}
			case hookCh.GetChannel().GetChannelId():
				if d.GetStatus() != ownerv1.DeliveryStatus_DELIVERY_STATUS_FAILED || !strings.Contains(d.GetError(), "500") || strings.Contains(d.GetError(), "s3cr3t") {
					t.Errorf("failing webhook delivery = %v, want failed naming the status and not the path", d)
				}
			}
		}
	})
}

func TestNotifyWithoutChannelsIsACapabilityGap(t *testing.T) {
	e := start(t, owner.Config{})
	if _, err := e.c.DeleteChannel(theOwner(), &ownerv1.DeleteChannelRequest{ChannelId: "chn_00000000000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.Notify(agentA(), &ownerv1.NotifyRequest{Message: "anyone?"})
	if gap, ok := mesh.CapabilityGap(err); !ok || gap != owner.GapNoChannel {
		t.Errorf("Notify without channels = %v, want capability gap %s", err, owner.GapNoChannel)
	}
}

func TestBlankNotificationIsRefused(t *testing.T) {
	e := start(t, owner.Config{})
	_, err := e.c.Notify(agentA(), &ownerv1.NotifyRequest{Title: "Build", Message: " \r\n "})
	if vs := servertest.Violations(t, err); !slices.Equal(vs["message"], []string{"string.non_blank"}) {
		t.Errorf("a blank notification: violations %v, want message: string.non_blank", vs)
	}
}

func TestChannelsAreTheOwners(t *testing.T) {
	eachProtocol(t, owner.Config{Egress: allowLoopback}, func(t *testing.T, e *env) {
		_, err := e.c.ListChannels(agentA(), &ownerv1.ListChannelsRequest{})
		wantCode(t, "an agent listing channels", err, connect.CodePermissionDenied)
		_, err = e.c.CreateChannel(agentA(), &ownerv1.CreateChannelRequest{Name: "mine", Kind: ownerv1.ChannelKind_CHANNEL_KIND_LOG})
		wantCode(t, "an agent creating a channel", err, connect.CodePermissionDenied)

		created, err := e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "chat", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK,
			WebhookUrl: "http://127.0.0.1:9/services/T0/B1/s3cr3t?token=x", WebhookSecret: "0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		c := created.GetChannel()
		if c.GetWebhookUrl() != "http://127.0.0.1:9/…" || !c.GetWebhookSigned() || !c.GetEnabled() ||
			c.GetMinLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO {
			t.Errorf("created channel = %v, want the URL redacted, signed, enabled, info", c)
		}
		_, err = e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "chat", Kind: ownerv1.ChannelKind_CHANNEL_KIND_LOG})
		wantCode(t, "a second channel named chat", err, connect.CodeAlreadyExists)
		_, err = e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "nourl", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK})
		if v := servertest.Violations(t, err); len(v[""]) == 0 {
			t.Errorf("a webhook without a URL: violations %v, want the message-level rule", v)
		}

		upd, err := e.c.UpdateChannel(theOwner(), &ownerv1.UpdateChannelRequest{ChannelId: c.GetChannelId(), Enabled: new(false),
			MinLevel: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING.Enum(), WebhookSecret: new("")})
		if err != nil {
			t.Fatal(err)
		}
		if u := upd.GetChannel(); u.GetEnabled() || u.GetWebhookSigned() || u.GetMinLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING || u.GetWebhookUrl() != c.GetWebhookUrl() {
			t.Errorf("updated channel = %v", u)
		}
		_, err = e.c.UpdateChannel(theOwner(), &ownerv1.UpdateChannelRequest{ChannelId: "chn_00000000000000000000000000", WebhookUrl: new("https://example.com/")})
		wantCode(t, "a webhook URL on the log channel", err, connect.CodeInvalidArgument)

		list, err := e.c.ListChannels(theOwner(), &ownerv1.ListChannelsRequest{})
		if err != nil || list.GetPage().GetTotal() != 2 || list.GetChannels()[0].GetName() != "chat" || list.GetChannels()[1].GetName() != "log" {
			t.Errorf("ListChannels = %v, %v", list, err)
		}
		if _, err := e.c.DeleteChannel(theOwner(), &ownerv1.DeleteChannelRequest{ChannelId: c.GetChannelId()}); err != nil {
			t.Fatal(err)
		}
		_, err = e.c.GetChannel(theOwner(), &ownerv1.GetChannelRequest{ChannelId: c.GetChannelId()})
		wantCode(t, "a deleted channel", err, connect.CodeNotFound)
	})
}

func TestWebhookAddressesAreGuarded(t *testing.T) {
	// The default policy: nothing internal.
	e := start(t, owner.Config{})
	for _, url := range []string{
		"http://127.0.0.1:8080/hook",
		"http://localhost:8080/hook", // resolves to 127.0.0.1
		"http://169.254.169.254/latest/meta-data/iam",
		"http://10.0.0.7/hook",
		"http://[::1]/hook",
	} {
		_, err := e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "x", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK, WebhookUrl: url})
		wantCode(t, "webhook to "+url, err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "explicitly allowed") {
			t.Errorf("webhook to %s: %v does not say why", url, err)
		}
	}

	// A hostname that passed when it was configured (it resolved to a
	// public address then) and resolves to 127.0.0.1 when the notification
	// is sent: refused at dial time, nothing reaches the receiver.
	h := newHook(t)
	_, port, _ := strings.Cut(strings.TrimPrefix(h.srv.URL, "http://"), ":")
	rebinding := egress.Policy{Lookup: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}}
	e = start(t, owner.Config{Egress: rebinding})
	if _, err := e.c.CreateChannel(theOwner(), &ownerv1.CreateChannelRequest{Name: "rebound", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK,
		WebhookUrl: "http://localhost:" + port + "/hook"}); err != nil {
		t.Fatalf("configure the webhook: %v", err)
	}
	res, err := e.c.Notify(agentA(), &ownerv1.NotifyRequest{Message: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.GetDeliveries() {
		if d.GetChannelName() == "rebound" && (d.GetStatus() != ownerv1.DeliveryStatus_DELIVERY_STATUS_FAILED || !strings.Contains(d.GetError(), "127.0.0.1") || !strings.Contains(d.GetError(), "loopback")) {
			t.Errorf("delivery to a hostname now on 127.0.0.1 = %v, want refused as loopback", d)
		}
	}
	if bodies, _ := h.received(); len(bodies) != 0 {
		t.Errorf("the receiver got %d requests, want none", len(bodies))
	}
}
