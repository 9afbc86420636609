package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
)

// TestSchedulesUpdateOnTemporal changes schedules on a real Temporal dev
// server with the real worker: a change stops the schedule until the owner
// approves it, an approval asked for before the change approves nothing,
// and once approved only the changed call runs.
func TestSchedulesUpdateOnTemporal(t *testing.T) {
	m := startSchedulesMesh(t, "1s", false)
	ctx := context.Background()
	workerCtx := mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: "test-worker", Agent: "test-worker", Roles: []string{mesh.RoleService}}})

	t.Run("a change of an active schedule runs only once approved", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-u", "before the change", 1)
		if _, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "a run of the approved schedule", func() bool { return len(ended(executions(t, m, "agent-u", sch.GetId()))) > 0 })

		// The change, through the edge as an MCP client makes it.
		edgeClient := servertest.HTTPClient()
		t.Cleanup(edgeClient.CloseIdleConnections)
		_, s := connectEdge(t, edge.Config{
			Services:   map[string]string{schedulesv1connect.SchedulesServiceName: m.schedulesURL},
			DevAgent:   "agent-u",
			HTTPClient: edgeClient,
		})
		env := callTool(t, s, "schedules_update", map[string]any{
			"schedule_id": sch.GetId(), "interval_seconds": 2,
			"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "after the change"}},
		})
		var res struct{ Schedule map[string]any }
		okData(t, env, &res)
		changed := &schedulesv1.Schedule{}
		if raw, err := json.Marshal(res.Schedule); err != nil || protojson.Unmarshal(raw, changed) != nil {
			t.Fatalf("schedules_update data %v", res.Schedule)
		}
		if changed.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL || changed.GetRevision() != 1 ||
			changed.GetSpecHash() == sch.GetSpecHash() || changed.GetIntervalSeconds() != 2 {
			t.Fatalf("changed schedule = %v; want pending approval at revision 1, every 2 s, with a new spec hash", changed)
		}
		// Temporal holds the change, paused.
		d, err := m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId()).Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Schedule.State.Paused || !strings.Contains(d.Schedule.State.Note, "changed (revision 1)") || d.Schedule.Spec.Intervals[0].Every != 2*time.Second {
			t.Errorf("Temporal Schedule: paused %v, note %q, spec %v; want the change, paused", d.Schedule.State.Paused, d.Schedule.State.Note, d.Schedule.Spec.Intervals)
		}
		// The owner is asked about the change, and Temporal shows it as one.
		wid := changed.GetApprovalWorkflowId()
		eventually(t, 10*time.Second, "the owner was asked about the change", func() bool { return len(m.notices.about(wid)) > 0 })
		if n := m.notices.about(wid)[0]; !strings.Contains(n.GetMessage(), "runs nothing until you approve the change") {
			t.Errorf("the owner was told %q", n.GetMessage())
		}
		wantOperatorView(t, m, wid, map[string]string{"ToolmeshTool": "schedules_update", "ToolmeshStatus": "waiting"},
			"Approve change 1 of schedule "+sch.GetId()+": tasks_create every 2 seconds for agent-u")

		// Runs in flight end; from now on the old call makes no task.
		eventually(t, 30*time.Second, "runs in flight ended", func() bool {
			all := executions(t, m, "agent-u", sch.GetId())
			return len(ended(all)) == len(all)
		})
		before := len(tasksTitled(t, m, "agent-u", "before the change"))
		if _, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: changed.GetSpecHash()}); err != nil {
			t.Fatalf("approve the change: %v", err)
		}
		eventually(t, 30*time.Second, "two runs of the change", func() bool { return len(tasksTitled(t, m, "agent-u", "after the change")) >= 2 })
		if _, err := m.schedules.Pause(servertest.As(ctx, "agent-u"), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if n := len(tasksTitled(t, m, "agent-u", "before the change")); n != before {
			t.Errorf("the call before the change made %d tasks after the change, want none", n-before)
		}
	})

	t.Run("an approval asked for before a change approves nothing", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-v", "pending tick", 1)
		oldWID := sch.GetApprovalWorkflowId()
		args, _ := structpb.NewStruct(map[string]any{"description": "changed while pending"})
		res, err := m.schedules.Update(servertest.As(ctx, "agent-v"), &schedulesv1.UpdateRequest{
			ScheduleId: sch.GetId(), Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args}, Description: proto.String("changed tick"),
		})
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		changed := res.GetSchedule()
		// The request about the old spec was withdrawn: an approval sent
		// to it in Temporal finds it closed.
		eventually(t, 10*time.Second, "the old request withdrawn", func() bool {
			d, err := m.temporal.DescribeWorkflow(ctx, oldWID, "")
			return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_CANCELED
		})
		wantOperatorView(t, m, oldWID, map[string]string{"ToolmeshStatus": "withdrawn"}, "")
		if err := sendUpdate(ctx, m, oldWID, "approve", &schedulesv1.ApproveUpdate{Note: "ok"}); err == nil {
			t.Error("an approval sent to the withdrawn request was accepted")
		}
		// A decision about the old spec, however it arrives, is refused.
		_, err = m.schedules.ApplyDecision(workerCtx, &schedulesv1.ApplyDecisionRequest{
			ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash(), Kind: schedulesv1.DecisionKind_DECISION_KIND_APPROVE, DecidedBy: "temporal",
		})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("an approval of the old spec hash: %v, want failed_precondition", err)
		}
		got, err := m.schedules.Get(servertest.As(ctx, "agent-v"), &schedulesv1.GetRequest{ScheduleId: sch.GetId()})
		if err != nil || got.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			t.Fatalf("after the refused decision: %v, %v; want still pending approval", got.GetSchedule(), err)
		}
		// The request about the change decides it, through Temporal too.
		if err := sendUpdate(ctx, m, changed.GetApprovalWorkflowId(), "approve", &schedulesv1.ApproveUpdate{Note: "ok"}); err != nil {
			t.Fatalf("approve the change in Temporal: %v", err)
		}
		eventually(t, 30*time.Second, "a run of the change", func() bool { return len(tasksTitled(t, m, "agent-v", "changed while pending")) > 0 })
		if n := len(tasksTitled(t, m, "agent-v", "pending tick")); n != 0 {
			t.Errorf("the call asked for before the change made %d tasks", n)
		}
		if _, err := m.schedules.Delete(servertest.As(ctx, "agent-v"), &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
	})
}

// sendUpdate sends an update to a workflow as the Temporal UI or CLI does,
// and waits for its outcome.
func sendUpdate(ctx context.Context, m *schedulesMesh, workflowID, name string, arg proto.Message) error {
	h, err := m.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	var res string
	return h.Get(ctx, &res)
}
