package projects

import (
	"context"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// Engine runs the health workflow of each project (workers/projects): it
// takes a snapshot at once and then one each health interval, through
// RecordHealth, until the project is archived. Temporal (TemporalEngine)
// is the one used in production; the service's tests use a fake.
type Engine interface {
	// StartHealth starts the health workflow of in's project; one that
	// runs, or ran, under its id is kept.
	StartHealth(ctx context.Context, in *projectsv1.HealthInput) error
	// StopHealth cancels the health workflow of a project; one that has
	// ended, or never started, is not an error.
	StopHealth(ctx context.Context, agentID, projectID string) error
}
