package remoteagents

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Discover implements RemoteAgentsService.Discover.
func (s *Service) Discover(ctx context.Context, req *remoteagentsv1.DiscoverRequest) (*remoteagentsv1.DiscoverResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	if err := s.checkURL(ctx, req.GetUrl()); err != nil {
		return nil, err
	}
	card, err := a2alink.FetchCard(ctx, s.cards, req.GetUrl())
	if err != nil {
		return nil, remoteError(err)
	}
	out := cardOf(card.AgentCard)
	if iface, err := a2alink.Negotiate(card.AgentCard); err == nil {
		out.Url, out.ProtocolVersion, out.PreferredTransport = iface.URL, string(iface.ProtocolVersion), string(iface.ProtocolBinding)
	}
	v := a2alink.VerifyCard(ctx, s.keys, card)
	out.Signature = &remoteagentsv1.CardSignature{Signed: v.Signed, Verified: v.Verified, KeyId: v.KeyID, KeysUrl: v.KeysURL, Error: v.Reason}
	if v.Signed && !v.Verified {
		s.log.InfoContext(ctx, "remoteagents.card_unverified", "url", egress.Redact(card.URL), "reason", v.Reason)
	}
	return &remoteagentsv1.DiscoverResponse{Card: out}, nil
}

// checkURL refuses an agent address the egress guard refuses, before
// anything is sent to it.
func (s *Service) checkURL(ctx context.Context, raw string) error {
	if err := s.cfg.Egress.CheckURL(ctx, raw); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("url: %w", err))
	}
	return nil
}

// remoteError maps a failure to reach a remote agent.
func remoteError(err error) error {
	switch {
	case errors.Is(err, egress.ErrRefused):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("url: %s", egress.DescribeError(err)))
	case egress.IsTimeout(err):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the remote agent did not answer in time"))
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// cardOf is what a card says, as the contract shows it. Which interface
// the mesh would use is the caller's to fill in.
func cardOf(c *a2a.AgentCard) *remoteagentsv1.AgentCard {
	out := &remoteagentsv1.AgentCard{
		Name:              c.Name,
		Description:       clip(c.Description, 4000),
		Version:           c.Version,
		Streaming:         c.Capabilities.Streaming,
		PushNotifications: c.Capabilities.PushNotifications,
		TakesDepth:        a2alink.TakesDepth(c),
		InputModes:        c.DefaultInputModes,
		OutputModes:       c.DefaultOutputModes,
	}
	if c.Provider != nil {
		out.Provider = c.Provider.Org
	}
	for i, sk := range c.Skills {
		if i == 100 {
			break
		}
		out.Skills = append(out.Skills, &remoteagentsv1.Skill{Id: sk.ID, Name: sk.Name, Description: clip(sk.Description, 2000), Tags: sk.Tags, Examples: sk.Examples})
	}
	for i, iface := range c.SupportedInterfaces {
		if i == 20 {
			break
		}
		if iface != nil {
			out.Interfaces = append(out.Interfaces, &remoteagentsv1.AgentInterface{Url: clip(iface.URL, 2048), Binding: string(iface.ProtocolBinding),
				ProtocolVersion: string(iface.ProtocolVersion), Tenant: clip(iface.Tenant, 256)})
		}
	}
	return out
}
