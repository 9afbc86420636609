package owner

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// Proto shows the channel through the API: the webhook URL without its path
// and query, and the secret only as whether there is one.
func (c *Channel) Proto() *ownerv1.Channel {
	out := &ownerv1.Channel{
		ChannelId:     c.ID,
		Name:          c.Name,
		Kind:          c.Kind,
		Enabled:       c.Enabled,
		MinLevel:      c.MinLevel,
		WebhookSigned: c.WebhookSecret != "",
		CreateTime:    timestamppb.New(c.Created),
		UpdateTime:    timestamppb.New(c.Updated),
	}
	if c.WebhookURL != "" {
		out.WebhookUrl = egress.Redact(c.WebhookURL)
	}
	return out
}

// checkWebhookURL applies the egress policy to a webhook URL being
// configured (it is applied again to every connection).
func (s *Service) checkWebhookURL(ctx context.Context, url string) error {
	if err := s.cfg.Egress.CheckURL(ctx, url); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("webhook_url: %w", err))
	}
	return nil
}

// CreateChannel implements OwnerService.CreateChannel.
func (s *Service) CreateChannel(ctx context.Context, req *ownerv1.CreateChannelRequest) (*ownerv1.CreateChannelResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleOwner); err != nil {
		return nil, err
	}
	if req.GetKind() == ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK {
		if err := s.checkWebhookURL(ctx, req.GetWebhookUrl()); err != nil {
			return nil, err
		}
	}
	level := req.GetMinLevel()
	if level == ownerv1.NotificationLevel_NOTIFICATION_LEVEL_UNSPECIFIED {
		level = ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO
	}
	now := s.nowMillis()
	c := &Channel{
		ID: ids.NewAt("chn", now), Name: req.GetName(), Kind: req.GetKind(), Enabled: !req.GetDisabled(), MinLevel: level,
		WebhookURL: req.GetWebhookUrl(), WebhookSecret: req.GetWebhookSecret(), Created: now, Updated: now,
	}
	err := s.store.CreateChannel(ctx, c)
	if errors.Is(err, ErrNameTaken) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a channel named %s exists", c.Name))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create channel: %w", err))
	}
	s.log.InfoContext(ctx, "owner.channel_created", "channel_id", c.ID, "name", c.Name, "kind", c.Kind.String())
	return &ownerv1.CreateChannelResponse{Channel: c.Proto()}, nil
}

// channel returns the channel for an owner's call.
func (s *Service) channel(ctx context.Context, id string) (*Channel, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleOwner); err != nil {
		return nil, err
	}
	c, err := s.store.GetChannel(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("channel %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get channel: %w", err))
	}
	return c, nil
}

// GetChannel implements OwnerService.GetChannel.
func (s *Service) GetChannel(ctx context.Context, req *ownerv1.GetChannelRequest) (*ownerv1.GetChannelResponse, error) {
	c, err := s.channel(ctx, req.GetChannelId())
	if err != nil {
		return nil, err
	}
	return &ownerv1.GetChannelResponse{Channel: c.Proto()}, nil
}

// ListChannels implements OwnerService.ListChannels.
func (s *Service) ListChannels(ctx context.Context, req *ownerv1.ListChannelsRequest) (*ownerv1.ListChannelsResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleOwner); err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListChannels(ctx, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list channels: %w", err))
	}
	out := make([]*ownerv1.Channel, len(list))
	for i, c := range list {
		out[i] = c.Proto()
	}
	return &ownerv1.ListChannelsResponse{Channels: out, Page: paging.New(offset, limit, total)}, nil
}

// UpdateChannel implements OwnerService.UpdateChannel.
func (s *Service) UpdateChannel(ctx context.Context, req *ownerv1.UpdateChannelRequest) (*ownerv1.UpdateChannelResponse, error) {
	c, err := s.channel(ctx, req.GetChannelId())
	if err != nil {
		return nil, err
	}
	webhook := c.Kind == ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK
	if (req.WebhookUrl != nil || req.WebhookSecret != nil) && !webhook {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("channel %s is not a webhook: webhook_url and webhook_secret do not apply", c.Name))
	}
	if req.WebhookUrl != nil {
		if err := s.checkWebhookURL(ctx, req.GetWebhookUrl()); err != nil {
			return nil, err
		}
		c.WebhookURL = req.GetWebhookUrl()
	}
	if req.WebhookSecret != nil {
		c.WebhookSecret = req.GetWebhookSecret()
	}
	if req.Enabled != nil {
		c.Enabled = req.GetEnabled()
	}
	if req.MinLevel != nil {
		c.MinLevel = req.GetMinLevel()
	}
	c.Updated = s.nowMillis()
	if err := s.store.UpdateChannel(ctx, c); errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("channel %s not found", c.ID))
	} else if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("update channel: %w", err))
	}
	s.log.InfoContext(ctx, "owner.channel_updated", "channel_id", c.ID, "name", c.Name, "enabled", c.Enabled)
	return &ownerv1.UpdateChannelResponse{Channel: c.Proto()}, nil
}

// DeleteChannel implements OwnerService.DeleteChannel.
func (s *Service) DeleteChannel(ctx context.Context, req *ownerv1.DeleteChannelRequest) (*ownerv1.DeleteChannelResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleOwner); err != nil {
		return nil, err
	}
	c, err := s.store.DeleteChannel(ctx, req.GetChannelId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("channel %s not found", req.GetChannelId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("delete channel: %w", err))
	}
	s.log.InfoContext(ctx, "owner.channel_deleted", "channel_id", c.ID, "name", c.Name)
	return &ownerv1.DeleteChannelResponse{Channel: c.Proto()}, nil
}
