package remoteagents

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/server"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// InboundService implements toolmesh.inbound.v1.InboundService, the
// contract the edge's A2A door serves the mesh's agents through, over the
// inbound tasks of this service: the agents it may serve (active ones, from
// the agents directory) and the tasks their messages open. Its inbound
// messages are the wire-compatible twins of RemoteAgentsService's.
type InboundService struct {
	s *Service
}

var _ inboundv1connect.InboundServiceHandler = (*InboundService)(nil)

// Inbound returns the service's InboundService.
func (s *Service) Inbound() *InboundService { return &InboundService{s: s} }

// Registration describes the InboundService for internal/server.
func (in *InboundService) Registration() server.Service {
	return server.Register(inboundv1connect.InboundServiceName, inboundv1connect.InboundServiceHandler(in), inboundv1connect.NewInboundServiceHandler, nil)
}

// GetAgent answers an agent the door may serve: a registered, active one.
// The directory is asked as the caller (the door).
func (in *InboundService) GetAgent(ctx context.Context, req *inboundv1.GetAgentRequest) (*inboundv1.GetAgentResponse, error) {
	if _, err := sender(ctx); err != nil {
		return nil, err
	}
	if in.s.cfg.Agents == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("inbound A2A is unavailable: the remoteagents service has no agents directory"))
	}
	res, err := in.s.cfg.Agents.Get(ctx, &agentsv1.GetRequest{AgentId: req.GetAgentId()})
	if err != nil {
		if c := connect.CodeOf(err); c == connect.CodeNotFound || c == connect.CodeInvalidArgument {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s not found", req.GetAgentId()))
		}
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the agents directory did not answer: %w", err))
	}
	a := res.GetAgent()
	if a.GetStatus() != agentsv1.AgentStatus_AGENT_STATUS_ACTIVE {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s is not active", req.GetAgentId()))
	}
	return &inboundv1.GetAgentResponse{Agent: &inboundv1.Agent{AgentId: a.GetId(), DisplayName: a.GetDisplayName(), Description: a.GetDescription()}}, nil
}

// ListAgents answers the agents the door may serve, a page of the active
// ones of the directory, asked as the caller (the door).
func (in *InboundService) ListAgents(ctx context.Context, req *inboundv1.ListAgentsRequest) (*inboundv1.ListAgentsResponse, error) {
	if _, err := sender(ctx); err != nil {
		return nil, err
	}
	if in.s.cfg.Agents == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("inbound A2A is unavailable: the remoteagents service has no agents directory"))
	}
	res, err := in.s.cfg.Agents.List(ctx, &agentsv1.ListRequest{Status: agentsv1.AgentStatus_AGENT_STATUS_ACTIVE, Offset: req.GetOffset(), Limit: req.GetLimit()})
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the agents directory did not answer: %w", err))
	}
	out := &inboundv1.ListAgentsResponse{Page: res.GetPage()}
	for _, a := range res.GetAgents() {
		out.Agents = append(out.Agents, &inboundv1.Agent{AgentId: a.GetId(), DisplayName: a.GetDisplayName(), Description: a.GetDescription()})
	}
	return out, nil
}

// DeliverInbound is RemoteAgentsService.DeliverInbound.
func (in *InboundService) DeliverInbound(ctx context.Context, req *inboundv1.DeliverInboundRequest) (*inboundv1.DeliverInboundResponse, error) {
	return twin(ctx, req, &remoteagentsv1.DeliverInboundRequest{}, &inboundv1.DeliverInboundResponse{}, in.s.DeliverInbound)
}

// GetInbound is RemoteAgentsService.GetInbound.
func (in *InboundService) GetInbound(ctx context.Context, req *inboundv1.GetInboundRequest) (*inboundv1.GetInboundResponse, error) {
	return twin(ctx, req, &remoteagentsv1.GetInboundRequest{}, &inboundv1.GetInboundResponse{}, in.s.GetInbound)
}

// CancelInbound is RemoteAgentsService.CancelInbound.
func (in *InboundService) CancelInbound(ctx context.Context, req *inboundv1.CancelInboundRequest) (*inboundv1.CancelInboundResponse, error) {
	return twin(ctx, req, &remoteagentsv1.CancelInboundRequest{}, &inboundv1.CancelInboundResponse{}, in.s.CancelInbound)
}

// twin serves an InboundService RPC by its RemoteAgentsService twin: the
// request and the response are the same messages on the wire.
func twin[Req, Res, TReq, TRes proto.Message](ctx context.Context, req Req, treq TReq, res Res, call func(context.Context, TReq) (TRes, error)) (Res, error) {
	var zero Res
	if err := convert(req, treq); err != nil {
		return zero, err
	}
	tres, err := call(ctx, treq)
	if err != nil {
		return zero, err
	}
	if err := convert(tres, res); err != nil {
		return zero, err
	}
	return res, nil
}

func convert(from, to proto.Message) error {
	b, err := proto.Marshal(from)
	if err == nil {
		err = proto.Unmarshal(b, to)
	}
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("convert %s: %w", from.ProtoReflect().Descriptor().FullName(), err))
	}
	return nil
}
