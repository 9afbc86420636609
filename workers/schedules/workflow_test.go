package schedules_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/schedules"
)

// fakeSchedules stands in for the schedules service: it answers
// ApplyDecision with decide and remembers every call.
type fakeSchedules struct {
	schedulesv1connect.UnimplementedSchedulesServiceHandler

	mu        sync.Mutex
	decide    func(*schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error)
	decisions []*schedulesv1.ApplyDecisionRequest
	records   []*schedulesv1.Execution
	starts    []*schedulesv1.RecordExecutionRequest
	callers   []mesh.Caller
	// refuseStart refuses start reports, as the service does for a run
	// that is not the approved one.
	refuseStart error
}

func (f *fakeSchedules) ApplyDecision(ctx context.Context, req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions = append(f.decisions, req)
	f.callers = append(f.callers, mesh.FromContext(ctx).Caller)
	if f.decide != nil {
		return f.decide(req)
	}
	return applied(req), nil
}

func (f *fakeSchedules) RecordExecution(ctx context.Context, req *schedulesv1.RecordExecutionRequest) (*schedulesv1.RecordExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetExecution().GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		f.starts = append(f.starts, proto.Clone(req).(*schedulesv1.RecordExecutionRequest))
		if f.refuseStart != nil {
			return nil, f.refuseStart
		}
	}
	f.records = append(f.records, proto.Clone(req.GetExecution()).(*schedulesv1.Execution))
	return &schedulesv1.RecordExecutionResponse{Execution: req.GetExecution()}, nil
}

func (f *fakeSchedules) kinds() []schedulesv1.DecisionKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schedulesv1.DecisionKind
	for _, d := range f.decisions {
		out = append(out, d.GetKind())
	}
	return out
}

// applied is what the service answers when it carried a decision out.
func applied(req *schedulesv1.ApplyDecisionRequest) *schedulesv1.ApplyDecisionResponse {
	status := map[schedulesv1.DecisionKind]schedulesv1.ScheduleStatus{
		schedulesv1.DecisionKind_DECISION_KIND_APPROVE: schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE,
		schedulesv1.DecisionKind_DECISION_KIND_DENY:    schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DENIED,
		schedulesv1.DecisionKind_DECISION_KIND_EXPIRE:  schedulesv1.ScheduleStatus_SCHEDULE_STATUS_EXPIRED,
	}[req.GetKind()]
	return &schedulesv1.ApplyDecisionResponse{Schedule: &schedulesv1.Schedule{
		Id: req.GetScheduleId(), Status: status, SpecHash: req.GetSpecHash(),
		Decision: &schedulesv1.Decision{DecidedBy: req.GetDecidedBy(), Note: req.GetNote(), DecideTime: timestamppb.New(start)},
	}}
}

// fakeNotifier remembers notices; err makes Notify fail.
type fakeNotifier struct {
	mu      sync.Mutex
	notices []*schedulesv1.Notice
	err     error
}

func (n *fakeNotifier) Notify(_ context.Context, notice *schedulesv1.Notice) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notices = append(n.notices, notice)
	return n.err
}

var workerCaller = mesh.Caller{Subject: "toolmesh-worker-schedules", Agent: "toolmesh-worker-schedules", Roles: []string{mesh.RoleService}}

// start is the test environment's clock at the start of every workflow.
var start = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const (
	scheduleID = "sch_01kjq07wd0wefb8100zjpgseth"
	specHash   = "56c52770157898ab030335469e4c9681"
)

func approvalInput() *schedulesv1.ApprovalInput {
	args, _ := structpb.NewStruct(map[string]any{"message": "hello"})
	return &schedulesv1.ApprovalInput{
		ScheduleId: scheduleID, AgentId: "agent-a", SpecHash: specHash, TemporalScheduleId: "schedule/" + scheduleID,
		Description: "say hello", IntervalSeconds: 3600, Timezone: "UTC", SpecSummary: "every 1 hour",
		Action:       &schedulesv1.Action{Tool: "testing_echo", Arguments: args},
		NextRunTimes: []*timestamppb.Timestamp{timestamppb.New(start.Add(time.Hour))},
		Timeout:      durationpb.New(24 * time.Hour),
	}
}

func approvalID() string { return "schedule-approval/" + scheduleID + "/" + specHash }

type env struct {
	*testsuite.TestWorkflowEnvironment
	schedules *fakeSchedules
	notifier  *fakeNotifier
	backend   *testingsvc.Service
}

// newEnv is a test environment running the package's workflows and its
// real activities, over a fake schedules service and the test-only
// testing service as the tools' backend.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		TestWorkflowEnvironment: workflowtest.NewEnv(),
		schedules:               &fakeSchedules{},
		notifier:                &fakeNotifier{},
		backend:                 testingsvc.New(),
	}
	e.SetStartTime(start)
	schedules.Register(e, newActivities(t, e.schedules, e.notifier, e.backend))
	return e
}

// newActivities are the real activities over a fake schedules service and
// notifier, calling the tools of the testing service backend.
func newActivities(t *testing.T, fake *fakeSchedules, notifier schedules.Notifier, backend *testingsvc.Service) *schedules.Activities {
	t.Helper()
	srv := servertest.Start(t, backend.Server())
	tools, err := toolcall.BindAll(toolcall.BindConfig{
		Contracts:  []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")},
		Services:   map[string]string{testingv1connect.TestingServiceName: srv.URL},
		HTTPClient: srv.Client(), Log: logging.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &schedules.Activities{
		Schedules: fake, Identity: workerCaller, Notifier: notifier,
		Tools: tools, Mesh: servertest.MeshSigner(), CallTimeout: 5 * time.Second, Log: logging.Discard(),
	}
}

func (e *env) runApproval(t *testing.T, in *schedulesv1.ApprovalInput) (*schedulesv1.ApprovalResult, error) {
	t.Helper()
	e.SetStartWorkflowOptions(startOptions(approvalID()))
	e.ExecuteWorkflow(workflowcontract.WorkflowOf(in).Name, in)
	if !e.IsWorkflowCompleted() {
		t.Fatal("the approval workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		return nil, err
	}
	var res schedulesv1.ApprovalResult
	if err := e.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return &res, nil
}

// update sends an update after delay and records how it ended.
type updateOutcome struct {
	rejected error
	result   string
	err      error
	done     bool
}

func (e *env) updateAfter(delay time.Duration, name string, arg proto.Message) *updateOutcome {
	out := &updateOutcome{}
	e.RegisterDelayedCallback(func() {
		e.UpdateWorkflow(name, fmt.Sprintf("%s-%s", name, delay), &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.rejected, out.done = err, true },
			OnComplete: func(v any, err error) {
				out.done, out.err = true, err
				switch v := v.(type) {
				case string:
					out.result = v
				case converter.EncodedValue:
					out.err = v.Get(&out.result)
				}
			},
		}, arg)
	}, delay)
	return out
}

func (e *env) state(t *testing.T) *schedulesv1.ApprovalState {
	t.Helper()
	v, err := e.QueryWorkflow("state")
	if err != nil {
		t.Fatal(err)
	}
	var st schedulesv1.ApprovalState
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestApprovalThenApproved(t *testing.T) {
	e := newEnv(t)
	var waiting *schedulesv1.ApprovalState
	e.RegisterDelayedCallback(func() { waiting = e.state(t) }, 30*time.Minute)
	approve := e.updateAfter(time.Hour, "approve", &schedulesv1.ApproveUpdate{Note: "fine", DecidedBy: "owner-1", SpecHash: specHash})
	res, err := e.runApproval(t, approvalInput())
	if err != nil {
		t.Fatalf("approval workflow: %v", err)
	}
	if waiting.GetStatus() != "waiting" {
		t.Errorf("state while waiting = %q, want waiting", waiting.GetStatus())
	}
	if !approve.done || approve.rejected != nil || approve.err != nil {
		t.Fatalf("approve update: done %v, rejected %v, err %v", approve.done, approve.rejected, approve.err)
	}
	if want := "schedule " + scheduleID + " approved by owner-1: it is active"; approve.result != want || res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_APPROVED {
		t.Errorf("update answered %q, workflow ended %v; want %q and approved", approve.result, res.GetOutcome(), want)
	}
	want := &schedulesv1.ApplyDecisionRequest{ScheduleId: scheduleID, SpecHash: specHash,
		Kind: schedulesv1.DecisionKind_DECISION_KIND_APPROVE, DecidedBy: "owner-1", Note: "fine"}
	if len(e.schedules.decisions) != 1 || !proto.Equal(e.schedules.decisions[0], want) {
		t.Errorf("decisions applied = %v, want exactly %v", e.schedules.decisions, want)
	}
	if diff := cmp.Diff([]mesh.Caller{workerCaller}, e.schedules.callers); diff != "" {
		t.Errorf("the service was called as (-want +got):\n%s", diff)
	}
	if len(e.notifier.notices) != 1 || !strings.Contains(e.notifier.notices[0].GetMessage(), "schedules_approve") ||
		!strings.Contains(e.notifier.notices[0].GetMessage(), approvalID()) {
		t.Errorf("notices = %v, want one telling the owner how to approve", e.notifier.notices)
	}
	if st := e.state(t); st.GetStatus() != "approved" || st.GetDecision().GetDecidedBy() != "owner-1" {
		t.Errorf("state after approval = %v", st)
	}
}

func TestApprovalFromTheTemporalUINamesTemporalAsDecider(t *testing.T) {
	e := newEnv(t)
	// What the UI or `temporal workflow update execute --input '{}'` sends.
	approve := e.updateAfter(time.Minute, "approve", &schedulesv1.ApproveUpdate{})
	if _, err := e.runApproval(t, approvalInput()); err != nil {
		t.Fatal(err)
	}
	if approve.err != nil || len(e.schedules.decisions) != 1 || e.schedules.decisions[0].GetDecidedBy() != "temporal" {
		t.Errorf("update err %v, decisions %v; want one decided by temporal", approve.err, e.schedules.decisions)
	}
}

func TestDenyThenNoRun(t *testing.T) {
	e := newEnv(t)
	deny := e.updateAfter(time.Hour, "deny", &schedulesv1.DenyUpdate{Note: "too often", DecidedBy: "owner-1"})
	approve := e.updateAfter(2*time.Hour, "approve", &schedulesv1.ApproveUpdate{})
	res, err := e.runApproval(t, approvalInput())
	if err != nil {
		t.Fatal(err)
	}
	if deny.err != nil || res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_DENIED {
		t.Errorf("deny: err %v, outcome %v; want denied", deny.err, res.GetOutcome())
	}
	// The workflow ended at the denial: the later approve finds nothing to
	// approve, and the service was only ever asked to deny.
	if approve.done && approve.rejected == nil && approve.err == nil {
		t.Error("an approve after the denial succeeded")
	}
	if diff := cmp.Diff([]schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_DENY}, e.schedules.kinds()); diff != "" {
		t.Errorf("decisions applied (-want +got):\n%s", diff)
	}
}

func TestApproveRefusedWhenTheSpecChangedAfterTheAsk(t *testing.T) {
	e := newEnv(t)
	// The service finds the Temporal Schedule changed since the ask.
	e.schedules.decide = func(req *schedulesv1.ApplyDecisionRequest) (*schedulesv1.ApplyDecisionResponse, error) {
		if req.GetKind() == schedulesv1.DecisionKind_DECISION_KIND_APPROVE {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(
				"schedule "+scheduleID+" changed since the owner was asked (spec hash "+specHash+", now 0badc0de): it was not approved"))
		}
		return applied(req), nil
	}
	approve := e.updateAfter(time.Hour, "approve", &schedulesv1.ApproveUpdate{DecidedBy: "owner-1"})
	var afterRefusal *schedulesv1.ApprovalState
	e.RegisterDelayedCallback(func() { afterRefusal = e.state(t) }, 90*time.Minute)
	deny := e.updateAfter(2*time.Hour, "deny", &schedulesv1.DenyUpdate{DecidedBy: "owner-1"})
	res, err := e.runApproval(t, approvalInput())
	if err != nil {
		t.Fatal(err)
	}
	var ae *temporal.ApplicationError
	if !errors.As(approve.err, &ae) || !ae.NonRetryable() || !strings.Contains(ae.Message(), "changed since the owner was asked") {
		t.Fatalf("approve after the change: err %v, want a non-retryable refusal saying the spec changed", approve.err)
	}
	if afterRefusal.GetStatus() != "waiting" || !strings.Contains(afterRefusal.GetLastRefusal(), "changed since") {
		t.Errorf("state after the refusal = %v, want waiting with the refusal", afterRefusal)
	}
	// Only one approval attempt: a refusal is not retried.
	if diff := cmp.Diff([]schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_APPROVE, schedulesv1.DecisionKind_DECISION_KIND_DENY},
		e.schedules.kinds()); diff != "" {
		t.Errorf("decisions applied (-want +got):\n%s", diff)
	}
	if deny.err != nil || res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_DENIED {
		t.Errorf("deny after the refused approval: err %v, outcome %v", deny.err, res.GetOutcome())
	}
}

func TestApproveOfAnotherHashIsRejected(t *testing.T) {
	e := newEnv(t)
	approve := e.updateAfter(time.Hour, "approve", &schedulesv1.ApproveUpdate{SpecHash: strings.Repeat("0", 32)})
	e.updateAfter(2*time.Hour, "deny", &schedulesv1.DenyUpdate{})
	if _, err := e.runApproval(t, approvalInput()); err != nil {
		t.Fatal(err)
	}
	if approve.rejected == nil || !strings.Contains(approve.rejected.Error(), "not "+strings.Repeat("0", 32)) {
		t.Errorf("approve of another hash: rejected %v, want the validator's refusal", approve.rejected)
	}
	if diff := cmp.Diff([]schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_DENY}, e.schedules.kinds()); diff != "" {
		t.Errorf("decisions applied (-want +got):\n%s", diff)
	}
}

func TestUndecidedApprovalExpires(t *testing.T) {
	e := newEnv(t)
	e.notifier.err = errors.New("no channel") // an undeliverable notice does not stop the approval
	res, err := e.runApproval(t, approvalInput())
	if err != nil {
		t.Fatal(err)
	}
	if res.GetOutcome() != schedulesv1.ApprovalOutcome_APPROVAL_OUTCOME_EXPIRED {
		t.Errorf("outcome %v, want expired", res.GetOutcome())
	}
	if diff := cmp.Diff([]schedulesv1.DecisionKind{schedulesv1.DecisionKind_DECISION_KIND_EXPIRE}, e.schedules.kinds()); diff != "" {
		t.Errorf("decisions applied (-want +got):\n%s", diff)
	}
	if got := len(e.notifier.notices); got != 5 {
		t.Errorf("notify attempts = %d, want 5 (then give up)", got)
	}
}

func TestWithdrawnApprovalEnds(t *testing.T) {
	e := newEnv(t)
	e.RegisterDelayedCallback(e.CancelWorkflow, time.Hour)
	_, err := e.runApproval(t, approvalInput())
	if !temporal.IsCanceledError(err) {
		t.Errorf("withdrawn approval ended with %v, want canceled", err)
	}
	if len(e.schedules.decisions) != 0 {
		t.Errorf("decisions applied = %v, want none", e.schedules.decisions)
	}
}

func runInput(message string, fail testingv1.Failure) *schedulesv1.RunInput {
	args := map[string]any{"message": message}
	if fail != testingv1.Failure_FAILURE_UNSPECIFIED {
		args["fail"] = fail.String()
	}
	s, _ := structpb.NewStruct(args)
	return &schedulesv1.RunInput{ScheduleId: scheduleID, AgentId: "agent-a", Tool: "testing_echo", Arguments: s, Depth: 1}
}

func runID(due time.Time) string {
	return "schedule-run/" + scheduleID + "-" + due.Format(time.RFC3339)
}

func (e *env) run(t *testing.T, in *schedulesv1.RunInput, due time.Time) *schedulesv1.Execution {
	t.Helper()
	e.SetStartWorkflowOptions(startOptions(runID(due)))
	if err := e.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(
		temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime").ValueSet(due))); err != nil {
		t.Fatal(err)
	}
	e.ExecuteWorkflow(workflowcontract.WorkflowOf(in).Name, in)
	if !e.IsWorkflowCompleted() || e.GetWorkflowError() != nil {
		t.Fatalf("run workflow: completed %v, error %v", e.IsWorkflowCompleted(), e.GetWorkflowError())
	}
	var got schedulesv1.Execution
	if err := e.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func TestRunCallsTheToolAsTheAgentOnce(t *testing.T) {
	e := newEnv(t)
	due := start.Add(-20 * time.Millisecond)
	got := e.run(t, runInput("hello", 0), due)

	if got.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED || got.GetAttempts() != 1 {
		t.Fatalf("run = %v, want succeeded in one attempt", got)
	}
	data := got.GetResult().GetFields()["data"].GetStructValue().AsMap()
	want := map[string]any{
		"message": "hello", "agent_id": "agent-a", "subject": "schedule/" + scheduleID, "roles": []any{},
		"depth": float64(1), "idempotency_key": runID(due),
	}
	if diff := cmp.Diff(want, data); diff != "" {
		t.Errorf("the tool saw (-want +got):\n%s", diff)
	}
	if e.backend.Calls("Echo") != 1 {
		t.Errorf("the tool was called %d times, want once", e.backend.Calls("Echo"))
	}
	if len(e.schedules.records) != 2 || e.schedules.records[0].GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		t.Fatalf("records = %v, want running then the result", e.schedules.records)
	}
	in := runInput("hello", 0)
	wantStart := &schedulesv1.RecordExecutionRequest{Execution: e.schedules.records[0],
		Action: &schedulesv1.Action{Tool: in.GetTool(), Arguments: in.GetArguments()}, AgentId: "agent-a", Depth: 1}
	if len(e.schedules.starts) != 1 || !proto.Equal(e.schedules.starts[0], wantStart) {
		t.Errorf("start report = %v, want %v: the call it is about to make", e.schedules.starts, wantStart)
	}
	last := e.schedules.records[1]
	if diff := cmp.Diff(got, last, protocmp.Transform()); diff != "" {
		t.Errorf("recorded result differs from the workflow's (-result +recorded):\n%s", diff)
	}
	if last.GetRunId() != runID(due) || !last.GetScheduledTime().AsTime().Equal(due) {
		t.Errorf("recorded run %s due %v, want %s due %v", last.GetRunId(), last.GetScheduledTime().AsTime(), runID(due), due)
	}
}

func TestRunTheServiceRefusesCallsNothing(t *testing.T) {
	e := newEnv(t)
	e.schedules.refuseStart = connect.NewError(connect.CodeFailedPrecondition, errors.New("run refused: schedule "+scheduleID+" is paused"))
	got := e.run(t, runInput("hello", 0), start)
	if got.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED || got.GetDomainCode() != "conflict" ||
		!strings.Contains(got.GetResult().GetFields()["message"].GetStringValue(), "is paused") {
		t.Errorf("refused run = %v, want failed as conflict with the service's reason", got)
	}
	if n := e.backend.Calls("Echo"); n != 0 {
		t.Errorf("a refused run called the tool %d times", n)
	}
	if len(e.schedules.records) != 0 {
		t.Errorf("records = %v: the service records a refused run itself", e.schedules.records)
	}
}

func TestRunRetriesAnUnavailableServiceThenRecordsTheFailure(t *testing.T) {
	e := newEnv(t)
	got := e.run(t, runInput("hello", testingv1.Failure_FAILURE_UNAVAILABLE), start)
	if got.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED || got.GetDomainCode() != "unavailable" ||
		got.GetAttempts() != schedules.CallAttempts {
		t.Errorf("run = %v, want failed as unavailable after %d attempts", got, schedules.CallAttempts)
	}
	if n := e.backend.Calls("Echo"); n != schedules.CallAttempts {
		t.Errorf("the tool was called %d times, want %d", n, schedules.CallAttempts)
	}
}

func TestRunRecordsAToolErrorWithoutRetrying(t *testing.T) {
	e := newEnv(t)
	got := e.run(t, runInput("hello", testingv1.Failure_FAILURE_RATE_LIMITED), start)
	if got.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED || got.GetDomainCode() != "rate_limited" || got.GetAttempts() != 1 {
		t.Errorf("run = %v, want failed as rate_limited after one attempt", got)
	}
	if msg := got.GetResult().GetFields()["message"].GetStringValue(); !strings.Contains(msg, "Rate limit exceeded") {
		t.Errorf("recorded envelope message %q, want the tool's", msg)
	}
	// Arguments that no longer fit the tool's contract fail the run, not the
	// worker.
	bad := newEnv(t).run(t, runInput("", 0), start)
	if bad.GetDomainCode() != "invalid_argument" {
		t.Errorf("run with bad arguments = %v, want invalid_argument", bad)
	}
}

func startOptions(id string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: schedules.TaskQueue()}
}
