package edge_test

import (
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// registrationFor mounts any TasksService implementation (a fake) like the
// real one.
func registrationFor(h tasksv1connect.TasksServiceHandler) server.Service {
	return server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(h), tasksv1connect.NewTasksServiceHandler, nil)
}
