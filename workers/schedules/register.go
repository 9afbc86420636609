package schedules

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TaskQueue is the task queue of the schedules workflows and activities.
func TaskQueue() string { return approvalContract.TaskQueue }

// Register adds the schedules workflows and the activities of a to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	w.RegisterActivity(a)
}

// RegisterWorkflows adds the schedules workflows, under their contract
// names, to r (a worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(ApprovalWorkflow, workflow.RegisterOptions{Name: approvalContract.Name})
	r.RegisterWorkflowWithOptions(RunWorkflow, workflow.RegisterOptions{Name: runContract.Name})
}
