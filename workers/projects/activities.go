package projects

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/mesh"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
)

// Activities are the health workflow's calls to ProjectsService, made
// through the generated client with a mesh token for each call.
type Activities struct {
	// Projects reaches ProjectsService; its client must send the identity
	// in the call's context as a mesh token (mesh.NewClientInterceptor).
	Projects projectsv1connect.ProjectsServiceClient
	// Self is the worker's own identity (mesh.RoleService).
	Self mesh.Caller
}

// RecordHealth takes one snapshot, under the request's key: a retry of the
// activity finds the snapshot its first attempt took.
func (a *Activities) RecordHealth(ctx context.Context, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
	if a.Projects == nil {
		return nil, errors.New("projects activities: no ProjectsService client")
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a.Self, IdempotencyKey: req.GetKey()})
	res, err := a.Projects.RecordHealth(ctx, req)
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrProjectGone, err)
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "ProjectsServiceRefused", err)
	}
	return res, err
}
