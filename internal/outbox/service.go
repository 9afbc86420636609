package outbox

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1/outboxv1connect"
)

// Service serves a domain's outbox to the events service
// (toolmesh.outbox.v1.OutboxService); its callers must hold the mesh's
// service role.
type Service struct{ db *sqldb.DB }

var _ outboxv1connect.OutboxServiceHandler = (*Service)(nil)

// NewService serves the outbox of db.
func NewService(db *sqldb.DB) *Service { return &Service{db: db} }

// Registration describes the service for server.New, at the domain's
// address.
func (s *Service) Registration() server.Service {
	return server.Register(outboxv1connect.OutboxServiceName, outboxv1connect.OutboxServiceHandler(s), outboxv1connect.NewOutboxServiceHandler, nil)
}

// Pull implements OutboxService.Pull.
func (s *Service) Pull(ctx context.Context, req *outboxv1.PullRequest) (*outboxv1.PullResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	es, err := Pull(ctx, s.db, int(req.GetLimit()))
	if err != nil {
		return nil, err
	}
	return &outboxv1.PullResponse{Occurrences: es}, nil
}

// Ack implements OutboxService.Ack.
func (s *Service) Ack(ctx context.Context, req *outboxv1.AckRequest) (*outboxv1.AckResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	n, err := Ack(ctx, s.db, req.GetEventIds())
	if err != nil {
		return nil, err
	}
	return &outboxv1.AckResponse{Removed: int32(n)}, nil
}
