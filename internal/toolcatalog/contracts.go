package toolcatalog

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	githubv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/github/v1"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	searchv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/search/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// Contracts returns the services whose RPCs the edge may expose as tools.
// Adding a domain to the mesh adds its service here.
func Contracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		tasksv1.File_toolmesh_tasks_v1_tasks_proto.Services().ByName("TasksService"),
		agentsv1.File_toolmesh_agents_v1_agents_proto.Services().ByName("AgentsService"),
		messagesv1.File_toolmesh_messages_v1_messages_proto.Services().ByName("MessagesService"),
		auditv1.File_toolmesh_audit_v1_audit_proto.Services().ByName("AuditService"),
		memoryv1.File_toolmesh_memory_v1_memory_proto.Services().ByName("MemoryService"),
		creditsv1.File_toolmesh_credits_v1_credits_proto.Services().ByName("CreditsService"),
		ownerv1.File_toolmesh_owner_v1_owner_proto.Services().ByName("OwnerService"),
		schedulesv1.File_toolmesh_schedules_v1_schedules_proto.Services().ByName("SchedulesService"),
		githubv1.File_toolmesh_github_v1_github_proto.Services().ByName("GitHubService"),
		searchv1.File_toolmesh_search_v1_search_proto.Services().ByName("SearchService"),
		remoteagentsv1.File_toolmesh_remoteagents_v1_remoteagents_proto.Services().ByName("RemoteAgentsService"),
		projectsv1.File_toolmesh_projects_v1_projects_proto.Services().ByName("ProjectsService"),
		workflowsv1.File_toolmesh_workflows_v1_workflows_proto.Services().ByName("WorkflowsService"),
		reputationv1.File_toolmesh_reputation_v1_reputation_proto.Services().ByName("ReputationService"),
		connectionsv1.File_toolmesh_connections_v1_connections_proto.Services().ByName("ConnectionsService"),
	}
}
