// Package workflowaudit records, from inside a workflow, what one of its
// updates did on behalf of an agent (an extension of its deadline): an
// activity that appends the audit record, run beside the workflow's own
// work and retried a while. The update holds whether or not the audit
// service answers; a record that could not be written is logged, and stays
// in the workflow's history.
package workflowaudit

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Record runs the activity named activity with arg, which records one
// audit entry under callID (the activity writes it once per call id, so a
// retried attempt writes one record), and logs event when every attempt
// failed. It blocks until the activity is over: run it in a workflow.Go.
func Record(ctx workflow.Context, activity string, arg any, callID, event string) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 8},
		Summary:             "Record the extension in the audit trail",
	})
	if err := workflow.ExecuteActivity(actx, activity, arg).Get(actx, nil); err != nil {
		workflow.GetLogger(ctx).Error(event, "call_id", callID, "error", err)
	}
}
