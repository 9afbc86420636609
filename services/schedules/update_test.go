package schedules_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
)

// approved creates an hourly schedule of agentA and has the owner approve
// it.
func approved(t *testing.T, f *fixture) *schedulesv1.Schedule {
	t.Helper()
	ctx := context.Background()
	sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
	res, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash()})
	if err != nil {
		t.Fatalf("Approve: %v", err)
	}
	return res.GetSchedule()
}

// startRun reports the start of a run calling action, as the run workflow
// does before it calls anything.
func startRun(f *fixture, sch *schedulesv1.Schedule, n int, action *schedulesv1.Action) error {
	due := now.Add(time.Duration(n) * time.Hour)
	_, err := f.client.RecordExecution(asWorker(context.Background()), &schedulesv1.RecordExecutionRequest{
		Execution: &schedulesv1.Execution{
			RunId: fmt.Sprintf("schedule-run/%s-%d", sch.GetId(), n), ScheduleId: sch.GetId(),
			ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		},
		Action: action, AgentId: sch.GetAgentId(), Depth: sch.GetDepth() + 1,
	})
	return err
}

func weeklyReport(t *testing.T) *schedulesv1.Action {
	return &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": "write the weekly report"})}
}

func TestUpdateSendsTheChangeBackToTheOwner(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := approved(t, f)
		if err := startRun(f, sch, 1, taskAction(t)); err != nil {
			t.Fatalf("a run of the approved schedule: %v", err)
		}

		res, err := f.client.Update(asAgent(ctx, agentA, 1), &schedulesv1.UpdateRequest{
			ScheduleId: sch.GetId(), Cron: "0 9 * * MON", Timezone: proto.String("Europe/Paris"), Action: weeklyReport(t),
			Description: proto.String("weekly report"),
		})
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		got := res.GetSchedule()
		if got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL || got.GetRevision() != 1 ||
			got.GetCron() != "0 9 * * MON" || got.GetIntervalSeconds() != 0 || got.GetTimezone() != "Europe/Paris" ||
			got.GetDescription() != "weekly report" || !proto.Equal(got.GetAction(), weeklyReport(t)) || got.GetDepth() != 1 ||
			got.GetDecision() != nil {
			t.Fatalf("changed schedule = %v; want pending approval at revision 1 with the new spec, action, description and depth, no decision", got)
		}
		// The approval is bound to the new spec: a new hash, a new request.
		if got.GetSpecHash() == "" || got.GetSpecHash() == sch.GetSpecHash() ||
			got.GetApprovalWorkflowId() != schedules.ApprovalWorkflowID(sch.GetId(), got.GetSpecHash()) {
			t.Errorf("spec hash %q, approval %q; want a new hash (not %q) and its approval workflow", got.GetSpecHash(), got.GetApprovalWorkflowId(), sch.GetSpecHash())
		}
		a, ok := f.engine.approval(got.GetApprovalWorkflowId())
		if !ok || a.in.GetRevision() != 1 || a.in.GetSpecHash() != got.GetSpecHash() || !proto.Equal(a.in.GetAction(), weeklyReport(t)) {
			t.Errorf("approval request = %v (started %v); want revision 1 asking about the new action", a.in, ok)
		}
		// The Temporal Schedule holds the change, paused.
		ts, _ := f.engine.schedule(sch.GetTemporalScheduleId())
		if !ts.paused || !strings.Contains(ts.note, "changed (revision 1)") || ts.run.GetRevision() != 1 ||
			ts.run.GetDepth() != 2 || !proto.Equal(ts.run.GetArguments(), weeklyReport(t).GetArguments()) || ts.spec.Cron != "0 9 * * MON" {
			t.Errorf("Temporal Schedule: paused %v, note %q, run %v, spec %q; want paused with the change", ts.paused, ts.note, ts.run, ts.spec.Cron)
		}

		// Until the owner approves the change nothing runs: neither the old
		// call nor the new one.
		if err := startRun(f, sch, 2, taskAction(t)); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a run of the old call after the change: %v, want failed_precondition", err)
		}
		if err := startRun(f, got, 3, weeklyReport(t)); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a run of the new call before its approval: %v, want failed_precondition", err)
		}
		// A decision about the old spec does not approve the new one.
		_, err = f.client.ApplyDecision(asWorker(ctx), &schedulesv1.ApplyDecisionRequest{
			ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash(), Kind: schedulesv1.DecisionKind_DECISION_KIND_APPROVE, DecidedBy: "owner-1",
		})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("an approval of the old spec: %v, want failed_precondition", err)
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve naming the old spec hash: %v, want failed_precondition", err)
		}

		// The owner approves the change: it runs.
		res2, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: got.GetSpecHash(), Reason: "fine"})
		if err != nil {
			t.Fatalf("Approve of the change: %v", err)
		}
		if s := res2.GetSchedule(); s.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || s.GetRevision() != 1 ||
			s.GetNextRunTimes()[0].AsTime() != time.Date(2026, 3, 9, 8, 0, 0, 0, time.UTC) {
			t.Errorf("approved change = %v; want active at revision 1, next run Monday 09:00 Paris time", s)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); ts.paused {
			t.Error("the approved change's Temporal Schedule is still paused")
		}
		if err := startRun(f, got, 4, weeklyReport(t)); err != nil {
			t.Errorf("a run of the approved change: %v", err)
		}
		if err := startRun(f, sch, 5, taskAction(t)); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a run of the call before the change, after it was approved: %v, want failed_precondition", err)
		}
	})
}

func TestUpdateWithdrawsTheRequestAboutTheOldSpec(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		res, err := f.client.Update(asAgent(ctx, agentA, 0), &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 7200})
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		got := res.GetSchedule()
		if old, _ := f.engine.approval(sch.GetApprovalWorkflowId()); !old.withdrawn {
			t.Error("the approval request about the old spec was not withdrawn")
		}
		if got.GetIntervalSeconds() != 7200 || got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL ||
			got.GetApprovalWorkflowId() == sch.GetApprovalWorkflowId() || !proto.Equal(got.GetAction(), sch.GetAction()) {
			t.Errorf("changed schedule = %v; want every two hours, the same action, pending a new request", got)
		}
		// The old request's decision, had it still arrived, is refused.
		for _, kind := range []schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_APPROVE, schedulesv1.DecisionKind_DECISION_KIND_DENY} {
			_, err := f.client.ApplyDecision(asWorker(ctx), &schedulesv1.ApplyDecisionRequest{ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash(), Kind: kind})
			if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), got.GetSpecHash()) {
				t.Errorf("%v of the old spec: %v, want failed_precondition naming the new hash", kind, err)
			}
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Errorf("Approve of the change: %v", err)
		}
	})
}

func TestUpdateIsIdempotent(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := approved(t, f)
		a := servertest.WithIdempotencyKey(asAgent(ctx, agentA, 0), "change-1")
		req := &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 1800}
		first, err := f.client.Update(a, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := f.client.Update(a, req)
		if err != nil || again.GetSchedule().GetRevision() != 1 || again.GetSchedule().GetSpecHash() != first.GetSchedule().GetSpecHash() {
			t.Errorf("the same change retried = %v, %v; want revision 1 with the first change's hash", again.GetSchedule(), err)
		}
		// Once approved, a late retry still changes nothing.
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		late, err := f.client.Update(a, req)
		if err != nil || late.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || late.GetSchedule().GetRevision() != 1 {
			t.Errorf("the change retried after its approval = %v, %v; want the schedule active at revision 1", late.GetSchedule(), err)
		}
		_, err = f.client.Update(a, &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 900})
		if servertest.Code(t, err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), "change-1") {
			t.Errorf("another change with the key: %v, want already_exists naming the key", err)
		}
	})
}

func TestUpdateRefusals(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := approved(t, f)
		a := asAgent(ctx, agentA, 0)
		for _, tc := range []struct {
			name  string
			req   *schedulesv1.UpdateRequest
			field string
		}{
			{"nothing to change", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId()}, ""},
			{"cron and interval", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Cron: "0 9 * * *", IntervalSeconds: 3600}, ""},
			{"runs too often", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Cron: "* * * * *"}, "cron"},
			{"unknown time zone", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Timezone: proto.String("Mars/Olympus")}, "timezone"},
			{"a tool that cannot be scheduled", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Action: &schedulesv1.Action{Tool: "credits_grant"}}, "action.tool"},
			{"bad arguments", &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Action: &schedulesv1.Action{Tool: "tasks_create"}}, "action.arguments.description"},
		} {
			_, err := f.client.Update(a, tc.req)
			if _, ok := servertest.Violations(t, err)[tc.field]; !ok {
				t.Errorf("%s: %v, want invalid_argument on %q", tc.name, err, tc.field)
			}
		}
		if _, err := f.client.Update(asAgent(ctx, agentB, 0), &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 7200}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's change: %v, want not_found", err)
		}
		// Refused changes change nothing.
		got, _ := f.client.Get(a, &schedulesv1.GetRequest{ScheduleId: sch.GetId()})
		if s := got.GetSchedule(); s.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || s.GetRevision() != 0 || s.GetSpecHash() != sch.GetSpecHash() {
			t.Errorf("after refused changes the schedule is %v; want it active as approved", s)
		}
		// A change that changes nothing leaves it running.
		res, err := f.client.Update(a, &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 3600, Description: proto.String(sch.GetDescription())})
		if err != nil || res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || res.GetSchedule().GetRevision() != 0 {
			t.Errorf("a change to what it is = %v, %v; want it active, unchanged", res.GetSchedule(), err)
		}
		// An ended schedule cannot be changed.
		if _, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Update(a, &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), IntervalSeconds: 7200}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a change of a deleted schedule: %v, want failed_precondition", err)
		}
	})
}

func TestApprovedChangeOfAPausedScheduleRuns(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := approved(t, f)
		a := asAgent(ctx, agentA, 0)
		if _, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		res, err := f.client.Update(a, &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Action: weeklyReport(t)})
		if err != nil || res.GetSchedule().GetPausedBy() != "" || res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			t.Fatalf("change of a paused schedule = %v, %v; want pending approval", res.GetSchedule(), err)
		}
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Resume of the pending change: %v, want failed_precondition", err)
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); ts.paused {
			t.Error("the approved change is paused")
		}
	})
}

func TestUpdateThatCannotFinishIsFinishedByARetry(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := approved(t, f)
		a := servertest.WithIdempotencyKey(asAgent(ctx, agentA, 0), "change-while-temporal-is-down")
		req := &schedulesv1.UpdateRequest{ScheduleId: sch.GetId(), Action: weeklyReport(t)}
		f.engine.failUpdate = errUnavailable
		_, err := f.client.Update(a, req)
		if servertest.Code(t, err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "runs nothing until the owner approves") {
			t.Fatalf("Update while Temporal is down: %v, want unavailable saying the schedule runs nothing", err)
		}
		// The change is taken: the old call no longer runs, and nobody can
		// approve anything until the owner is asked.
		if err := startRun(f, sch, 1, taskAction(t)); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a run of the old call: %v, want failed_precondition", err)
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve before the owner was asked: %v, want failed_precondition", err)
		}
		f.engine.failUpdate = nil
		res, err := f.client.Update(a, req)
		if err != nil || res.GetSchedule().GetSpecHash() == "" || res.GetSchedule().GetRevision() != 1 {
			t.Fatalf("the retry = %v, %v; want the change finished at revision 1 with its spec hash", res.GetSchedule(), err)
		}
		if _, ok := f.engine.approval(res.GetSchedule().GetApprovalWorkflowId()); !ok {
			t.Error("the retry did not ask the owner")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Errorf("Approve of the finished change: %v", err)
		}
	})
}
