package schedules_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
)

func TestPauseAndResume(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		sch := create(t, f, a, hourly(t))
		tid := sch.GetTemporalScheduleId()
		// Waiting for approval: neither pause nor resume moves it.
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Resume before approval: %v, want failed_precondition", err)
		}
		if _, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Pause before approval: %v, want failed_precondition", err)
		}
		if ts, _ := f.engine.schedule(tid); !ts.paused {
			t.Fatal("the schedule runs before approval")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}

		res, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId(), Reason: "holiday"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.GetSchedule(); got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED || got.GetPausedBy() != agentA {
			t.Errorf("paused schedule = %v, want paused by %s", got, agentA)
		}
		if ts, _ := f.engine.schedule(tid); !ts.paused || ts.note != "paused by agent-a: holiday" {
			t.Errorf("Temporal Schedule paused %v, note %q", ts.paused, ts.note)
		}
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatalf("Resume by the agent that paused it: %v", err)
		}
		if ts, _ := f.engine.schedule(tid); ts.paused {
			t.Error("resumed schedule is still paused in Temporal")
		}

		// What the owner pauses, only the owner resumes.
		if _, err := f.client.Pause(asOwner(ctx), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("the agent resuming what the owner paused: %v, want permission_denied", err)
		}
		if res, err := f.client.Resume(asOwner(ctx), &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); err != nil ||
			res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE {
			t.Errorf("the owner's Resume = %v, %v; want active", res.GetSchedule(), err)
		}
		// Another agent does not see it at all.
		if _, err := f.client.Pause(asAgent(ctx, agentB, 0), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Pause: %v, want not_found", err)
		}
	})
}

func TestDelete(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		pending := create(t, f, a, hourly(t))
		res, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: pending.GetId()})
		if err != nil || res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DELETED {
			t.Fatalf("Delete of a pending schedule = %v, %v; want deleted", res.GetSchedule(), err)
		}
		if _, ok := f.engine.schedule(pending.GetTemporalScheduleId()); ok {
			t.Error("the deleted schedule's Temporal Schedule still exists")
		}
		if ap, _ := f.engine.approval(pending.GetApprovalWorkflowId()); !ap.withdrawn {
			t.Error("the deleted schedule's approval request was not withdrawn")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: pending.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve of a deleted schedule: %v, want failed_precondition", err)
		}
		// Deleting again changes nothing.
		again, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: pending.GetId()})
		if err != nil || !cmp.Equal(res.GetSchedule(), again.GetSchedule(), protocmp.Transform()) {
			t.Errorf("second Delete = %v, %v; want the deleted schedule unchanged", again.GetSchedule(), err)
		}

		active := create(t, f, a, hourly(t))
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: active.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Delete(asAgent(ctx, agentB, 0), &schedulesv1.DeleteRequest{ScheduleId: active.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Delete: %v, want not_found", err)
		}
		if _, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: active.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.engine.schedule(active.GetTemporalScheduleId()); ok {
			t.Error("the deleted active schedule's Temporal Schedule still exists")
		}
	})
}
