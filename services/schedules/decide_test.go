package schedules_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
)

func TestApproveUnpausesTheSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))

		// Agents cannot approve, not even their own schedules.
		if _, err := f.client.Approve(asAgent(ctx, agentA, 0), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent's Approve: %v, want permission_denied", err)
		}
		// A hash the owner was not asked about is refused.
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: strings.Repeat("0", 32)}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve of another hash: %v, want failed_precondition", err)
		}
		res, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), Reason: "useful", SpecHash: sch.GetSpecHash()})
		if err != nil {
			t.Fatalf("Approve: %v", err)
		}
		got := res.GetSchedule()
		if got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || got.GetDecision().GetDecidedBy() != "owner-1" ||
			got.GetDecision().GetNote() != "useful" || len(got.GetNextRunTimes()) != 3 {
			t.Errorf("approved schedule = %v; want active, decided by owner-1 with the note, and next runs", got)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); ts.paused || ts.note != "approved by owner-1: useful" {
			t.Errorf("Temporal Schedule paused %v, note %q; want unpaused with the approval's note", ts.paused, ts.note)
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a second Approve: %v, want failed_precondition", err)
		}
	})
}

func TestApproveIsRefusedWhenTheSpecChangedAfterTheAsk(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		f.engine.tamper(sch.GetTemporalScheduleId())

		_, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "changed since the owner was asked") {
			t.Fatalf("Approve after the spec changed: %v, want failed_precondition saying it changed", err)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); !ts.paused {
			t.Error("the changed schedule was unpaused")
		}
		got, _ := f.client.Get(asOwner(ctx), &schedulesv1.GetRequest{ScheduleId: sch.GetId()})
		if got.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			t.Errorf("status after the refused approval = %v, want pending_approval", got.GetSchedule().GetStatus())
		}
		// The owner can still deny it.
		if _, err := f.client.Deny(asOwner(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Errorf("Deny after the refused approval: %v", err)
		}
	})
}

func TestDenyDeletesTheSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		if _, err := f.client.Deny(asAgent(ctx, agentA, 0), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent's Deny: %v, want permission_denied", err)
		}
		res, err := f.client.Deny(asOwner(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId(), Reason: "too often"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.GetSchedule(); got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DENIED ||
			got.GetDecision().GetNote() != "too often" || len(got.GetNextRunTimes()) != 0 {
			t.Errorf("denied schedule = %v; want denied with the reason and no next runs", got)
		}
		if _, ok := f.engine.schedule(sch.GetTemporalScheduleId()); ok {
			t.Error("the denied schedule's Temporal Schedule still exists")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve after Deny: %v, want failed_precondition", err)
		}
	})
}
