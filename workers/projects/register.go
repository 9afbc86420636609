package projects

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TaskQueue is the task queue of the projects workflow and activity.
func TaskQueue() string { return healthContract.TaskQueue }

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md).
const ActivityRecordHealth = "RecordHealth"

// Register adds the projects workflow and the activities of a to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	w.RegisterActivityWithOptions(a.RecordHealth, activity.RegisterOptions{Name: ActivityRecordHealth})
}

// RegisterWorkflows adds the projects workflow, under its contract name,
// to r (a worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(HealthWorkflow, workflow.RegisterOptions{Name: healthContract.Name})
}
