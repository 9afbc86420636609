package schedules_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/workers/schedules"
)

// An approval waiting for the owner when the approval workflow changes is
// approved on the changed code, as long as the change is patched
// (docs/temporal-versioning.md).
func TestUpgradeInFlight(t *testing.T) {
	fake := &fakeSchedules{}
	acts := newActivities(t, fake, &fakeNotifier{}, testingsvc.New())
	name := workflowcontract.WorkflowOf(&schedulesv1.ApprovalInput{}).Name
	workflowtest.Upgrade(t, dial(t), workflowtest.Case[*schedulesv1.ApprovalInput, *schedulesv1.ApprovalResult]{
		Workflow:   name,
		Code:       schedules.ApprovalWorkflow,
		Activities: func(r worker.ActivityRegistry) { schedules.RegisterActivities(r, acts) },
		Start: func(ctx context.Context, c client.Client, queue string) (client.WorkflowRun, error) {
			in := approvalInput()
			in.Timeout = durationpb.New(168 * time.Hour)
			return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: approvalID() + "-" + queue, TaskQueue: queue}, name, in)
		},
		Finish: func(ctx context.Context, c client.Client, run client.WorkflowRun) error {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(), UpdateName: "approve",
				Args: []any{&schedulesv1.ApproveUpdate{DecidedBy: "owner-1", SpecHash: specHash}}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				return err
			}
			if err := h.Get(ctx, nil); err != nil {
				return err
			}
			var res schedulesv1.ApprovalResult
			if err := run.Get(ctx, &res); err != nil {
				return err
			}
			if res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_APPROVED || res.GetDecision().GetDecidedBy() != "owner-1" {
				return fmt.Errorf("the approval ended %v, want approved by owner-1", &res)
			}
			return nil
		},
	})
}
