package owner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	owner "github.com/toolmesh/toolmesh/workers/owner"
)

// An ask waiting for its answer when the ask workflow changes is answered
// on the changed code, as long as the change is patched (docs/temporal-versioning.md).
func TestUpgradeInFlight(t *testing.T) {
	_, acts := startFakeOwner(t)
	workflowtest.Upgrade(t, dial(t), workflowtest.Case[*ownerv1.AskWorkflowInput, *ownerv1.AskOutcome]{
		Workflow:   askType,
		Code:       owner.AskWorkflow,
		Activities: func(r worker.ActivityRegistry) { owner.RegisterActivities(r, acts) },
		Start: func(ctx context.Context, c client.Client, queue string) (client.WorkflowRun, error) {
			in := askInput("yes", "no")
			in.AskId = "ask_" + strings.ReplaceAll(queue, "-", "_")
			in.ExpireTime = timestamppb.New(time.Now().Add(time.Hour))
			return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "ask/agent-a/" + in.AskId, TaskQueue: queue}, askType, in)
		},
		Finish: func(ctx context.Context, c client.Client, run client.WorkflowRun) error {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(), UpdateName: "answer",
				Args: []any{&ownerv1.AnswerUpdate{Answer: "yes", AnsweredBy: "alice"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				return err
			}
			var st owner.State
			if err := h.Get(ctx, &st); err != nil {
				return err
			}
			var out ownerv1.AskOutcome
			if err := run.Get(ctx, &out); err != nil {
				return err
			}
			if out.GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED || out.GetAnswer() != "yes" || st.Status != owner.StatusAnswered {
				return fmt.Errorf("the ask ended %v (update answered %+v), want answered yes", &out, st)
			}
			return nil
		},
	})
}
