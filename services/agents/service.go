// Package agents is the agent directory: which agents exist and whether they
// may act (active, paused, retired). Other services ask it, through its
// generated client, whether their caller is a registered, active agent
// (internal/agentcheck).
//
// Who may call what: any authenticated caller may get and list agents.
// Register and SetStatus are ADMIN, privileged tools: at the edge only
// callers holding a grant for them (the owner; in development mode the local
// agent) see and call them, with the admin guardrails. The service itself
// additionally refuses an agent changing its own status, so that a paused
// agent cannot unpause itself. Retired is final, and ids are never reused.
package agents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/server"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SeedSubject is recorded as registered_by on agents registered by Seed.
const SeedSubject = "toolmesh-seed"

// Config tunes the service.
type Config struct {
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Connections, when set, unlinks an agent's upstream connections
	// (revoked at each provider) before the agent is retired.
	Connections *Connections
}

// Connections is the connections service, called as Self (the mesh's
// service role).
type Connections struct {
	Client connectionsv1connect.ConnectionsServiceClient
	Self   mesh.Caller
}

// Service implements toolmesh.agents.v1.AgentsService.
type Service struct {
	store Store
	now   clock.Clock
	conns *Connections
}

var _ agentsv1connect.AgentsServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: store, now: cfg.Now, conns: cfg.Connections}
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(agentsv1connect.AgentsServiceName, agentsv1connect.AgentsServiceHandler(s), agentsv1connect.NewAgentsServiceHandler, agentsv1.RegisterAgentsServiceHandler)
}

// Seed registers each of ids that is not registered yet, active, so that a
// deployment's own agents (the development edge's agent under `toolmesh up`)
// can call the mesh from the first start. Agents that exist are left as
// they are: a paused or retired agent stays so.
func (s *Service) Seed(ctx context.Context, ids ...string) error {
	v, err := boundary.NewValidator()
	if err != nil {
		return err
	}
	for _, id := range ids {
		// The id must be one the contract accepts.
		if vs, err := v.Check(&agentsv1.RegisterRequest{AgentId: id}); err != nil || len(vs) > 0 {
			return fmt.Errorf("seed agent %q: %s", id, boundary.Summary(vs))
		}
		_, _, err := s.store.Create(ctx, s.newAgent(id, id, "Registered at start by the mesh.", SeedSubject), idempotency.Call{})
		if err != nil && !errors.Is(err, ErrExists) {
			return fmt.Errorf("seed agent %q: %w", id, err)
		}
	}
	return nil
}

func (s *Service) newAgent(id, displayName, description, by string) *agentsv1.Agent {
	// Stored times have millisecond precision; answer with what is stored.
	now := timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	if displayName == "" {
		displayName = id
	}
	return &agentsv1.Agent{
		Id:           id,
		DisplayName:  displayName,
		Description:  description,
		Status:       agentsv1.AgentStatus_AGENT_STATUS_ACTIVE,
		RegisteredBy: by,
		CreateTime:   now,
		UpdateTime:   now,
	}
}

// Register implements AgentsService.Register.
func (s *Service) Register(ctx context.Context, req *agentsv1.RegisterRequest) (*agentsv1.RegisterResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	a := s.newAgent(req.GetAgentId(), req.GetDisplayName(), req.GetDescription(), mesh.FromContext(ctx).Caller.Subject)
	call := idempotency.CallOf(ctx, req)
	stored, created, err := s.store.Create(ctx, a, call)
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(call.Key)
	}
	if errors.Is(err, ErrExists) {
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("agent %s is already registered; agent ids are permanent, so choose another id", req.GetAgentId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("register agent: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, call.Key)
	}
	return &agentsv1.RegisterResponse{Agent: stored}, nil
}

// Get implements AgentsService.Get.
func (s *Service) Get(ctx context.Context, req *agentsv1.GetRequest) (*agentsv1.GetResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	a, err := s.get(ctx, req.GetAgentId())
	if err != nil {
		return nil, err
	}
	return &agentsv1.GetResponse{Agent: a}, nil
}

func (s *Service) get(ctx context.Context, id string) (*agentsv1.Agent, error) {
	a, err := s.store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s is not registered", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get agent: %w", err))
	}
	return a, nil
}

// List implements AgentsService.List.
func (s *Service) List(ctx context.Context, req *agentsv1.ListRequest) (*agentsv1.ListResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, req.GetStatus(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list agents: %w", err))
	}
	summary, err := s.store.Summary(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("count agents: %w", err))
	}
	return &agentsv1.ListResponse{Agents: list, Page: paging.New(offset, limit, total), Summary: summary}, nil
}

// SetStatus implements AgentsService.SetStatus.
func (s *Service) SetStatus(ctx context.Context, req *agentsv1.SetStatusRequest) (*agentsv1.SetStatusResponse, error) {
	caller, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	id, to := req.GetAgentId(), req.GetStatus()
	if id == caller {
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("agent %s cannot change its own status; another agent or the owner must do it", id))
	}
	a, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	from := a.GetStatus()
	if from == to {
		return &agentsv1.SetStatusResponse{Agent: a}, nil
	}
	if from == agentsv1.AgentStatus_AGENT_STATUS_RETIRED {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("agent %s is retired and cannot become %s; retiring is final, register a new agent id instead", id, protoenum.Word(to)))
	}
	if to == agentsv1.AgentStatus_AGENT_STATUS_RETIRED && s.conns != nil {
		// First the connections: a retired agent is final, so an agent
		// whose connections could not be unlinked stays as it was, and
		// retiring it again tries again.
		if _, err := s.conns.Client.RevokeAgent(mesh.WithCall(ctx, mesh.Call{Caller: s.conns.Self}), &connectionsv1.RevokeAgentRequest{Agent: id}); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("agent %s was not retired: its upstream connections could not be unlinked (%v); try again", id, err))
		}
	}
	a.Status = to
	a.StatusReason = req.GetReason()
	a.UpdateTime = timestamppb.New(s.now().UTC().Truncate(time.Millisecond))
	updated, err := s.store.Update(ctx, a, from)
	if errors.Is(err, ErrStale) {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("agent %s changed while it was being updated; read it and try again", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("set agent status: %w", err))
	}
	return &agentsv1.SetStatusResponse{Agent: updated}, nil
}
