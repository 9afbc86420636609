package owner

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// Webhook request headers.
const (
	// HeaderSignature carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// "<t>.<body>">" when the channel has a secret.
	HeaderSignature = "Toolmesh-Signature"
	// HeaderNotificationID repeats the payload's notification_id, so a
	// receiver can drop a redelivery without parsing the body.
	HeaderNotificationID = "Toolmesh-Notification-Id"
)

// GapNoChannel names the capability a notification lacks when no channel
// is enabled.
const GapNoChannel = "owner.notification_channel"

var payloadJSON = protojson.MarshalOptions{UseProtoNames: true}

// Notify implements OwnerService.Notify: the notification goes to every
// enabled channel at once, and the answer says what happened on each.
func (s *Service) Notify(ctx context.Context, req *ownerv1.NotifyRequest) (*ownerv1.NotifyResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	level := req.GetLevel()
	if level == ownerv1.NotificationLevel_NOTIFICATION_LEVEL_UNSPECIFIED {
		level = ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO
	}
	channels, err := s.store.EnabledChannels(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list channels: %w", err))
	}
	if len(channels) == 0 {
		return nil, mesh.NewCapabilityGapError(GapNoChannel,
			errors.New("no notification channel is enabled, so the owner would not see this; the owner can add one with owner_create_channel"))
	}
	now := s.nowMillis()
	p := &ownerv1.WebhookPayload{
		NotificationId: ids.NewAt("ntf", now),
		Level:          level,
		Title:          req.GetTitle(),
		Message:        req.GetMessage(),
		AgentId:        agent,
		CreateTime:     timestamppb.New(now),
	}
	// Delivered even when the caller stops waiting: it has been sent.
	dctx := context.WithoutCancel(ctx)
	out := make([]*ownerv1.Delivery, len(channels))
	var wg sync.WaitGroup
	for i, c := range channels {
		wg.Go(func() { out[i] = s.deliver(dctx, c, p) })
	}
	wg.Wait()
	delivered := 0
	for _, d := range out {
		if d.GetStatus() == ownerv1.DeliveryStatus_DELIVERY_STATUS_DELIVERED {
			delivered++
		}
	}
	s.log.InfoContext(ctx, "owner.notified", "notification_id", p.GetNotificationId(), "agent", agent,
		"level", protoenum.Word(level), "channels", len(out), "delivered", delivered)
	return &ownerv1.NotifyResponse{NotificationId: p.GetNotificationId(), Deliveries: out}, nil
}

// deliver sends p to one channel.
func (s *Service) deliver(ctx context.Context, c *Channel, p *ownerv1.WebhookPayload) *ownerv1.Delivery {
	d := &ownerv1.Delivery{ChannelId: c.ID, ChannelName: c.Name, Status: ownerv1.DeliveryStatus_DELIVERY_STATUS_DELIVERED}
	if p.GetLevel() < c.MinLevel {
		d.Status = ownerv1.DeliveryStatus_DELIVERY_STATUS_SKIPPED
		return d
	}
	var err error
	switch c.Kind {
	case ownerv1.ChannelKind_CHANNEL_KIND_LOG:
		s.log.Log(ctx, slogLevel(p.GetLevel()), "owner.notification",
			"notification_id", p.GetNotificationId(), "channel", c.Name, "level", protoenum.Word(p.GetLevel()),
			"agent", p.GetAgentId(), "title", p.GetTitle(), "message", p.GetMessage())
	case ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK:
		err = s.postWebhook(ctx, c, p)
	default:
		err = fmt.Errorf("unknown channel kind %v", c.Kind)
	}
	if err != nil {
		d.Status, d.Error = ownerv1.DeliveryStatus_DELIVERY_STATUS_FAILED, err.Error()
		s.log.WarnContext(ctx, "owner.delivery_failed", "notification_id", p.GetNotificationId(), "channel", c.Name, "error", d.Error)
	}
	return d
}

// postWebhook POSTs the payload through the webhook.payload boundary: the
// typed payload must pass its own rules before it leaves.
func (s *Service) postWebhook(ctx context.Context, c *Channel, p *ownerv1.WebhookPayload) error {
	p = &ownerv1.WebhookPayload{
		NotificationId: p.GetNotificationId(), Channel: c.Name, Level: p.GetLevel(), Title: p.GetTitle(),
		Message: p.GetMessage(), AgentId: p.GetAgentId(), CreateTime: p.GetCreateTime(),
	}
	vs, err := s.validator.Check(p)
	if err != nil {
		return fmt.Errorf("check the payload: %w", err)
	}
	if len(vs) > 0 {
		boundary.LogRejection(ctx, s.log, boundary.Webhook, vs)
		return fmt.Errorf("the notification does not fit the webhook payload: %s", boundary.Summary(vs))
	}
	body, err := payloadJSON.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode the payload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DeliveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return errors.New("the webhook URL is not valid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolmesh-owner")
	req.Header.Set(HeaderNotificationID, p.GetNotificationId())
	if c.WebhookSecret != "" {
		req.Header.Set(HeaderSignature, Sign(c.WebhookSecret, s.now(), body))
	}
	resp, err := s.webhooks.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %s", egress.Redact(c.WebhookURL), egress.DescribeError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook %s answered %s", egress.Redact(c.WebhookURL), resp.Status)
	}
	return nil
}

// Sign returns the Toolmesh-Signature value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

func slogLevel(l ownerv1.NotificationLevel) slog.Level {
	switch l {
	case ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING:
		return slog.LevelWarn
	case ownerv1.NotificationLevel_NOTIFICATION_LEVEL_CRITICAL:
		return slog.LevelError
	}
	return slog.LevelInfo
}
