package edge_test

import (
	"net/http"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// registrationFor mounts any TasksService implementation (a fake) like the
// real one.
func registrationFor(h tasksv1connect.TasksServiceHandler) server.Service {
	return server.Service{
		Name: tasksv1connect.TasksServiceName,
		Mount: func(opts ...connect.HandlerOption) (string, http.Handler) {
			return tasksv1connect.NewTasksServiceHandler(h, opts...)
		},
	}
}
