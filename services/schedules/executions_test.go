package schedules_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
)

func TestRunsAreRecordedAndListed(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		sch := create(t, f, a, hourly(t))
		due := now.Add(53 * time.Minute)
		run := &schedulesv1.Execution{
			RunId: "schedule-run/" + sch.GetId() + "-" + due.Format(time.RFC3339), ScheduleId: sch.GetId(),
			ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), EndTime: timestamppb.New(due.Add(time.Second)),
			Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, Attempts: 1,
			Result: args(t, map[string]any{"status": "ok", "data": map[string]any{"task": map[string]any{"id": "tsk_1"}}}),
		}
		if _, err := f.client.RecordExecution(a, &schedulesv1.RecordExecutionRequest{Execution: run}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent recording a run: %v, want permission_denied", err)
		}
		if _, err := f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: run}); err != nil {
			t.Fatalf("the worker recording a run: %v", err)
		}
		blank := proto.CloneOf(run)
		blank.RunId = "  "
		if vs := servertest.Violations(t, func() error {
			_, err := f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: blank})
			return err
		}()); !slices.Equal(vs["execution.run_id"], []string{"string.non_blank"}) {
			t.Errorf("a run with a blank id: violations %v, want execution.run_id: string.non_blank", vs)
		}
		other := &schedulesv1.Execution{RunId: "r", ScheduleId: "sch_" + strings.Repeat("0", 26), ScheduledTime: timestamppb.New(due),
			Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}
		if _, err := f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: other, Action: taskAction(t)}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("recording a run of an unknown schedule: %v, want not_found", err)
		}
		res, err := f.client.Executions(a, &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetExecutions()) != 1 || !cmp.Equal(run, res.GetExecutions()[0], protocmp.Transform()) || res.GetPage().GetTotal() != 1 {
			t.Errorf("Executions = %v, want the recorded run", res.GetExecutions())
		}
		if _, err := f.client.Executions(asAgent(ctx, agentB, 0), &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Executions: %v, want not_found", err)
		}
		if _, err := f.client.ApplyDecision(a, &schedulesv1.ApplyDecisionRequest{ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash(),
			Kind: schedulesv1.DecisionKind_DECISION_KIND_APPROVE}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent applying a decision: %v, want permission_denied", err)
		}
	})
}

func TestRunsAreCheckedAgainstTheApprovedSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 1)
		sch := create(t, f, a, hourly(t))
		due := now.Add(53 * time.Minute)
		n := 0
		start := func(action *schedulesv1.Action, agent string, depth int32) (*schedulesv1.RecordExecutionResponse, error) {
			n++
			run := &schedulesv1.Execution{
				RunId: fmt.Sprintf("schedule-run/%s-%d", sch.GetId(), n), ScheduleId: sch.GetId(),
				ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
			}
			return f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: run, Action: action, AgentId: agent, Depth: depth})
		}
		refused := func(what string, action *schedulesv1.Action, agent string, depth int32, why string) {
			t.Helper()
			_, err := start(action, agent, depth)
			if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), why) {
				t.Errorf("%s: %v, want failed_precondition saying %q", what, err, why)
			}
		}
		refused("a run before approval", taskAction(t), agentA, 2, "is pending_approval")
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if res, err := start(taskAction(t), agentA, 2); err != nil || res.GetExecution().GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the approved call: %v, %v; want recorded running", res.GetExecution(), err)
		}
		other := taskAction(t)
		other.Arguments = args(t, map[string]any{"description": "something else"})
		refused("other arguments", other, agentA, 2, "arguments are not the approved ones")
		refused("another tool", &schedulesv1.Action{Tool: "memory_save", Arguments: other.GetArguments()}, agentA, 2, "would call memory_save")
		refused("another agent", taskAction(t), agentB, 2, "would act as agent-b")
		refused("another depth", taskAction(t), agentA, 1, "at depth 1")
		if _, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		refused("a run of a paused schedule", taskAction(t), agentA, 2, "is paused")

		// The refusals are listed as failed runs.
		res, err := f.client.Executions(a, &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for _, e := range res.GetExecutions() {
			if e.GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED && e.GetDomainCode() == "conflict" &&
				strings.Contains(e.GetResult().GetFields()["message"].GetStringValue(), "refused") {
				failed++
			}
		}
		if failed != 6 || res.GetPage().GetTotal() != 7 {
			t.Errorf("%d of %d runs listed as refused, want 6 of 7", failed, res.GetPage().GetTotal())
		}
		// A start report must say what it is about to call.
		_, err = f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: &schedulesv1.Execution{
			RunId: "r", ScheduleId: sch.GetId(), ScheduledTime: timestamppb.New(due), Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		}})
		if v := servertest.Violations(t, err); len(v[""]) != 1 {
			t.Errorf("a start report without the action: violations %v", v)
		}
	})
}
