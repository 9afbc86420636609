package projects

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// TemporalEngine runs health workflows on Temporal.
type TemporalEngine struct {
	c client.Client
}

var _ Engine = (*TemporalEngine)(nil)

// NewTemporalEngine returns the engine over a connected client (one that
// encodes payloads as protobuf JSON: internal/temporalclient).
func NewTemporalEngine(c client.Client) *TemporalEngine { return &TemporalEngine{c: c} }

// healthWorkflow is the contract of the health workflow.
func healthWorkflow() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&projectsv1.HealthInput{})
}

// HealthWorkflowID is the id of a project's health workflow:
// "project-health/<agent>/<project>".
func HealthWorkflowID(agentID, projectID string) string {
	return healthWorkflow().IDPrefix + "/" + agentID + "/" + projectID
}

// StartHealth implements Engine.
func (e *TemporalEngine) StartHealth(ctx context.Context, in *projectsv1.HealthInput) error {
	id := HealthWorkflowID(in.GetAgentId(), in.GetProjectId())
	return workflowrun.Once(ctx, e.c, workflowrun.Start{
		Contract: healthWorkflow(),
		ID:       id,
		Agent:    in.GetAgentId(),
		Tool:     "projects_create",
		Status:   "recording",
		Summary:  fmt.Sprintf("Health snapshots of project %s (%s)", in.GetProjectId(), in.GetAgentId()),
		Details: fmt.Sprintf("Takes a health snapshot of project `%s` at once, then one every %s (the projects service's health interval), "+
			"through `ProjectsService.RecordHealth`, until the project is archived. `projects_health_trends` reports them.",
			in.GetProjectId(), in.GetInterval().AsDuration()),
	}, in)
}

// StopHealth implements Engine.
func (e *TemporalEngine) StopHealth(ctx context.Context, agentID, projectID string) error {
	return workflowrun.Cancel(ctx, e.c, HealthWorkflowID(agentID, projectID))
}
