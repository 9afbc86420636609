package schedules

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TaskQueue is the task queue of the schedules workflows and activities.
func TaskQueue() string { return approvalContract.TaskQueue }

// Activity names: the activity types in every recorded history. Never
// change one (docs/temporal-versioning.md).
const (
	ActivityNotifyOwner     = "NotifyOwner"
	ActivityApplyDecision   = "ApplyDecision"
	ActivityRecordExecution = "RecordExecution"
	ActivityCallTool        = "CallTool"
)

// Register adds the schedules workflows and the activities of a to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.NotifyOwner, activity.RegisterOptions{Name: ActivityNotifyOwner})
	r.RegisterActivityWithOptions(a.ApplyDecision, activity.RegisterOptions{Name: ActivityApplyDecision})
	r.RegisterActivityWithOptions(a.RecordExecution, activity.RegisterOptions{Name: ActivityRecordExecution})
	r.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: ActivityCallTool})
}

// RegisterWorkflows adds the schedules workflows, under their contract
// names, to r (a worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(ApprovalWorkflow, workflow.RegisterOptions{Name: approvalContract.Name})
	r.RegisterWorkflowWithOptions(RunWorkflow, workflow.RegisterOptions{Name: runContract.Name})
}
