package edge

import (
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Contracts returns the services whose RPCs the edge may expose as tools.
// Adding a domain to the mesh adds its service here.
func Contracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		tasksv1.File_toolmesh_tasks_v1_tasks_proto.Services().ByName("TasksService"),
		auditv1.File_toolmesh_audit_v1_audit_proto.Services().ByName("AuditService"),
	}
}
