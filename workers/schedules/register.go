package schedules

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TaskQueue is the task queue of the schedules workflows and activities.
func TaskQueue() string { return approvalContract.TaskQueue }

// Register adds the schedules workflows, under their contract names, and
// the activities of a to w.
func Register(w worker.Registry, a *Activities) {
	w.RegisterWorkflowWithOptions(ApprovalWorkflow, workflow.RegisterOptions{Name: approvalContract.Name})
	w.RegisterWorkflowWithOptions(RunWorkflow, workflow.RegisterOptions{Name: runContract.Name})
	w.RegisterActivity(a)
}
