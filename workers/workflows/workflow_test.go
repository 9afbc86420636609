package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
	workflows "github.com/toolmesh/toolmesh/workers/workflows"
)

// start is when every test run starts (the test clock).
var start = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

// example is the documented example workflow (docs/agent-workflows.md).
func example(t *testing.T) *workflowsv1.CreateRequest {
	t.Helper()
	b, err := os.ReadFile("../../docs/examples/triage-workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var req workflowsv1.CreateRequest
	if err := protojson.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

// wfEnv is one run under the Temporal test suite, with the tool calls
// answered by fake tools and what the activities did recorded.
type wfEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu       sync.Mutex
	calls    []*callsv1.InvokeInput
	asks     []*workflowsv1.ApprovalInput
	withdraw []*workflowsv1.ApprovalInput
	records  []*workflowsv1.RecordRunRequest
	statuses []string
	// reply is how each tool answers (data as JSON, or an error envelope).
	reply map[string]func(args map[string]any) string
	// unreachable is how many of the first attempts find the service
	// unreachable (a retryable failure of the calls worker's activity).
	unreachable, attempts int
}

// owner answers every approval with answer, after a while (test time);
// without an answer the ask expires then.
func (e *wfEnv) owner(answer string, after time.Duration) {
	e.OnActivity(workflows.ActivityAwaitAnswer, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
			if answer == "" {
				return &workflowsv1.ApprovalOutcome{AskId: in.GetAskId(), Status: "expired"}, nil
			}
			return &workflowsv1.ApprovalOutcome{AskId: in.GetAskId(), Status: "answered", Answer: answer, AnsweredBy: "alice"}, nil
		}).After(after)
}

func newWfEnv(t *testing.T) *wfEnv {
	t.Helper()
	env := &wfEnv{TestWorkflowEnvironment: workflowtest.NewEnv(), reply: map[string]func(map[string]any) string{}}
	env.SetStartTime(start)
	workflows.Register(env, &workflows.Activities{})
	env.RegisterActivityWithOptions(func(context.Context, *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) { return nil, nil },
		activity.RegisterOptions{Name: calls.ActivityInvoke})
	env.OnActivity(calls.ActivityInvoke, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
			env.mu.Lock()
			env.attempts++
			if env.attempts <= env.unreachable {
				env.mu.Unlock()
				return nil, temporal.NewApplicationError("the service is unreachable", "Unavailable")
			}
			env.calls = append(env.calls, in)
			reply := env.reply[in.GetTool()]
			env.mu.Unlock()
			var args map[string]any
			if err := json.Unmarshal([]byte(in.GetArguments()), &args); err != nil {
				return nil, err
			}
			if reply == nil {
				return &callsv1.InvokeOutput{Envelope: `{"status":"ok","data":{}}`}, nil
			}
			return &callsv1.InvokeOutput{Envelope: reply(args)}, nil
		})
	env.OnActivity(workflows.ActivityAsk, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *workflowsv1.ApprovalInput) (*workflowsv1.ApprovalOutcome, error) {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.asks = append(env.asks, in)
			return &workflowsv1.ApprovalOutcome{AskId: "ask_" + in.GetNodeId(), Status: "pending"}, nil
		})
	env.OnActivity(workflows.ActivityWithdrawAsk, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *workflowsv1.ApprovalInput) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.withdraw = append(env.withdraw, in)
			return nil
		})
	env.OnActivity(workflows.ActivityRecordRun, mock.Anything, mock.Anything).Return(
		func(_ context.Context, req *workflowsv1.RecordRunRequest) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.records = append(env.records, req)
			return nil
		})
	workflowtest.OnStatus(env.TestWorkflowEnvironment, func(status string) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.statuses = append(env.statuses, status)
	})
	return env
}

// tools answers the example's tools as the services would.
func (e *wfEnv) tools() {
	e.reply["memory_save"] = func(a map[string]any) string {
		return fmt.Sprintf(`{"status":"ok","data":{"memory":{"key":%q,"content":%q},"created":true}}`, a["key"], a["content"])
	}
	e.reply["memory_get"] = func(a map[string]any) string {
		return fmt.Sprintf(`{"status":"ok","data":{"memory":{"key":%q,"content":"flaky deploys"}}}`, a["key"])
	}
	e.reply["tasks_create"] = func(a map[string]any) string {
		return fmt.Sprintf(`{"status":"ok","data":{"task":{"id":"tsk_1","description":%q,"status":"TASK_STATUS_PENDING","priority":%q}}}`, a["description"], a["priority"])
	}
	e.reply["tasks_update_status"] = func(a map[string]any) string {
		return fmt.Sprintf(`{"status":"ok","data":{"task":{"id":%q,"status":%q}}}`, a["task_id"], a["status"])
	}
}

func input(t *testing.T, def *workflowsv1.Definition, in map[string]any) *workflowsv1.RunWorkflowInput {
	t.Helper()
	s, err := structpb.NewStruct(in)
	if err != nil {
		t.Fatal(err)
	}
	return &workflowsv1.RunWorkflowInput{
		RunId: "run_1", WorkflowId: "wf_1", Version: 3, WorkflowName: "triage", Definition: def, Input: s,
		Starter:     &callsv1.Caller{Subject: "alice", Agent: "agent-a", Depth: 1, Grants: []string{"toolmesh:write"}},
		Deadline:    timestamppb.New(start.Add(time.Hour)),
		MaxDeadline: timestamppb.New(start.Add(24 * time.Hour)),
	}
}

func (e *wfEnv) result(t *testing.T) *workflowsv1.RunOutcome {
	t.Helper()
	if !e.IsWorkflowCompleted() {
		t.Fatal("the run did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	var out workflowsv1.RunOutcome
	if err := e.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func statuses(o *workflowsv1.RunOutcome) map[string]string {
	out := map[string]string{}
	for _, n := range o.GetNodes() {
		out[n.GetNodeId()] = strings.TrimPrefix(n.GetStatus().String(), "NODE_STATUS_")
	}
	return out
}

func TestTheExampleRunsEveryNodeKind(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner(workflows.AnswerApprove, 5*time.Minute)
	env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": "flaky deploys"}))
	got := env.result(t)

	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run = %v, want completed", got)
	}
	want := map[string]string{"start": "COMPLETED", "note": "COMPLETED", "check": "COMPLETED", "fan": "COMPLETED", "task": "COMPLETED",
		"recall": "COMPLETED", "both": "COMPLETED", "approve": "COMPLETED", "pause": "COMPLETED", "begin": "COMPLETED", "done": "COMPLETED", "skipped": "SKIPPED"}
	if diff := cmp.Diff(want, statuses(got)); diff != "" {
		t.Errorf("node statuses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"task": "tsk_1", "approved": true, "status": "TASK_STATUS_RUNNING"}, got.GetOutput().AsInterface()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	// Outputs flowed into later nodes' arguments, and every call acted as
	// the starter, one level deeper, with its grants and a key of its node.
	args := map[string]string{}
	for _, c := range env.calls {
		args[c.GetTool()] = c.GetArguments()
		if c.GetCaller().GetAgent() != "agent-a" || c.GetCaller().GetSubject() != "alice" || c.GetCaller().GetDepth() != 2 ||
			len(c.GetCaller().GetGrants()) != 1 {
			t.Errorf("%s called as %v, want agent-a (alice) at depth 2 with its grants", c.GetTool(), c.GetCaller())
		}
		if !strings.HasPrefix(c.GetIdempotencyKey(), "run:run_1:") {
			t.Errorf("%s called with key %q, want one of the run and node", c.GetTool(), c.GetIdempotencyKey())
		}
	}
	for tool, want := range map[string]string{
		"memory_save":         `{"content":"flaky deploys","key":"triage/run_1"}`,
		"tasks_create":        `{"description":"Look into flaky deploys","priority":"TASK_PRIORITY_HIGH"}`,
		"memory_get":          `{"key":"triage/run_1"}`,
		"tasks_update_status": `{"status":"TASK_STATUS_RUNNING","task_id":"tsk_1"}`,
	} {
		if args[tool] != want {
			t.Errorf("%s arguments = %s, want %s", tool, args[tool], want)
		}
	}
	if len(env.calls) != 4 {
		t.Errorf("%d tool calls, want 4 (one per action node)", len(env.calls))
	}
	if len(env.asks) != 1 || env.asks[0].GetQuestion() != `Start task tsk_1 on "flaky deploys"?` || env.asks[0].GetCaller().GetDepth() != 2 {
		t.Errorf("asks = %v, want the question with the task id and the note filled in, asked as the starter", env.asks)
	}
	if diff := cmp.Diff([]string{workflows.StatusSuspended, workflows.StatusRunning, workflows.StatusCompleted}, env.statuses); diff != "" {
		t.Errorf("ToolmeshStatus upserts (-want +got):\n%s", diff)
	}
	last := env.records[len(env.records)-1]
	if last.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED || len(env.records) != 3 {
		t.Errorf("records = %v, want suspended, running, completed", env.records)
	}
}

// Each action node's tool call has the call timeout the run carries; a run
// that carries none (started before it was carried) has the default.
func TestToolCallsHaveTheRunsCallTimeout(t *testing.T) {
	for _, c := range []struct {
		carried, want time.Duration
	}{{3 * time.Minute, 3 * time.Minute}, {0, toolcall.DefaultTimeout}} {
		env := newWfEnv(t)
		env.tools()
		env.owner(workflows.AnswerApprove, time.Minute)
		in := input(t, example(t).GetDefinition(), map[string]any{"topic": "x"})
		if c.carried > 0 {
			in.CallTimeout = durationpb.New(c.carried)
		}
		env.ExecuteWorkflow("workflows.run", in)
		env.result(t)
		if len(env.calls) == 0 {
			t.Fatal("no tool was called")
		}
		for _, call := range env.calls {
			if got := call.GetTimeout().AsDuration(); got != c.want {
				t.Errorf("run carrying %s: %s called with timeout %s, want %s", c.carried, call.GetTool(), got, c.want)
			}
		}
	}
}

func TestAToolTheStarterMayNotCallFailsItsNode(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner(workflows.AnswerApprove, time.Minute)
	in := input(t, example(t).GetDefinition(), map[string]any{"topic": "x"})
	in.RefusedTools = map[string]string{"tasks_create": "it needs scope toolmesh:write"}
	env.ExecuteWorkflow("workflows.run", in)
	got := env.result(t)
	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_FAILED || got.GetError().GetNodeId() != "task" ||
		got.GetError().GetDomainCode() != "permission_denied" || !strings.Contains(got.GetError().GetMessage(), `node "task"`) {
		t.Fatalf("run = %v, want failed with permission_denied naming node task", got.GetError())
	}
	for _, c := range env.calls {
		if c.GetTool() == "tasks_create" {
			t.Error("the refused tool was called")
		}
	}
	st := statuses(got)
	if st["task"] != "FAILED" || st["begin"] != "SKIPPED" || st["approve"] != "SKIPPED" {
		t.Errorf("node statuses = %v, want task failed, later nodes skipped", st)
	}
}

func TestAToolErrorFailsTheRunAndStopsTheOtherBranch(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner(workflows.AnswerApprove, time.Minute)
	env.reply["tasks_create"] = func(map[string]any) string {
		return `{"status":"error","tool":"tasks_create","domain_code":"rate_limited","message":"Rate limit exceeded: maximum 100 work tasks per day."}`
	}
	env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": "x"}))
	got := env.result(t)
	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_FAILED || got.GetError().GetDomainCode() != "rate_limited" ||
		!strings.Contains(got.GetError().GetMessage(), "maximum 100 work tasks") {
		t.Fatalf("run error = %v, want the tool's rate_limited naming the node", got.GetError())
	}
	if len(env.asks) != 0 {
		t.Error("the owner was asked after a node failed")
	}
}

func TestAConditionSkipsTheOtherWay(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner(workflows.AnswerApprove, time.Minute)
	env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": ""}))
	got := env.result(t)
	st := statuses(got)
	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED || st["skipped"] != "COMPLETED" || st["fan"] != "SKIPPED" || st["task"] != "SKIPPED" {
		t.Errorf("run = %v, nodes %v; want completed through the else branch", got.GetStatus(), st)
	}
	if cond := got.GetNodes()[2].GetOutput().AsInterface(); !cmp.Equal(cond, map[string]any{"result": false}) {
		t.Errorf("the condition's output = %v, want result false", cond)
	}
}

func TestARejectionTakesOnReject(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner(workflows.AnswerReject, time.Minute)
	env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": "x"}))
	got := env.result(t)
	st := statuses(got)
	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED || st["begin"] != "SKIPPED" || st["pause"] != "SKIPPED" {
		t.Errorf("run = %v, nodes %v; want completed without the delay and begin", got.GetStatus(), st)
	}
	if diff := cmp.Diff(map[string]any{"task": "tsk_1", "approved": false, "status": "TASK_STATUS_PENDING"}, got.GetOutput().AsInterface()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestARunPastItsDeadlineFailsUnlessExtended(t *testing.T) {
	for _, extend := range []bool{false, true} {
		t.Run(fmt.Sprintf("extended=%v", extend), func(t *testing.T) {
			env := newWfEnv(t)
			env.tools()
			env.owner("", 100*time.Hour) // nobody answers before the run's time is up
			var refused, accepted bool
			var after *workflowsv1.RunOutcome
			if extend {
				env.RegisterDelayedCallback(func() {
					env.UpdateWorkflow("extend", "x0", &testsuite.TestUpdateCallback{OnReject: func(error) { refused = true }, OnAccept: func() {}, OnComplete: func(any, error) {}},
						&workflowsv1.ExtendUpdate{Deadline: timestamppb.New(start.Add(48 * time.Hour)), Reason: "past the max"})
					env.UpdateWorkflow("extend", "x1", &testsuite.TestUpdateCallback{OnReject: func(error) {}, OnAccept: func() { accepted = true },
						OnComplete: func(v any, err error) {
							if o, ok := v.(*workflowsv1.RunOutcome); ok {
								after = o
							}
						}},
						&workflowsv1.ExtendUpdate{Deadline: timestamppb.New(start.Add(3 * time.Hour)), Reason: "the owner is away", RequestedBy: "alice",
							Request: &workflowsv1.ExtendRunRequest{RunId: "run_1", ExtendSeconds: 7200, Reason: "the owner is away"}})
				}, 30*time.Minute)
				env.OnActivity(workflows.ActivityRecordExtension, mock.Anything, mock.Anything).Return(nil)
			}
			env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": "x"}))
			got := env.result(t)
			if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_FAILED || got.GetError().GetDomainCode() != "deadline_exceeded" || got.GetError().GetNodeId() != "approve" {
				t.Fatalf("run = %v, want failed deadline_exceeded at the approval", got.GetError())
			}
			wantEnd := start.Add(time.Hour)
			if extend {
				wantEnd = start.Add(3 * time.Hour)
				if !refused || !accepted || !after.GetDeadline().AsTime().Equal(wantEnd) {
					t.Errorf("extensions: past the maximum refused %v, within accepted %v (deadline %v)", refused, accepted, after.GetDeadline())
				}
			}
			if !got.GetEndTime().AsTime().Equal(wantEnd) {
				t.Errorf("the run ended at %s, want its deadline %s", got.GetEndTime().AsTime(), wantEnd)
			}
			if statuses(got)["approve"] != "CANCELLED" || len(env.withdraw) != 1 || env.withdraw[0].GetAskId() != "ask_approve" {
				t.Errorf("approval = %s, withdrawn asks %v; want the waiting approval cancelled and its ask withdrawn", statuses(got)["approve"], env.withdraw)
			}
		})
	}
}

func TestACancelledRunWithdrawsItsApproval(t *testing.T) {
	env := newWfEnv(t)
	env.tools()
	env.owner("", 100*time.Hour)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 10*time.Minute)
	env.ExecuteWorkflow("workflows.run", input(t, example(t).GetDefinition(), map[string]any{"topic": "x"}))
	if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
		t.Fatalf("the run ended with %v, want cancelled", env.GetWorkflowError())
	}
	if len(env.withdraw) != 1 {
		t.Errorf("withdrawn asks %v, want the approval's", env.withdraw)
	}
	last := env.records[len(env.records)-1]
	if last.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_CANCELLED || statuses(&workflowsv1.RunOutcome{Nodes: last.GetNodes()})["approve"] != "CANCELLED" {
		t.Errorf("last record = %v, want the run cancelled with its approval", last)
	}
}

func TestAnExtensionGivesAToolCallBeingRetriedMoreTime(t *testing.T) {
	env := newWfEnv(t)
	env.reply["tasks_create"] = func(map[string]any) string { return `{"status":"ok","data":{"task":{"id":"tsk_1"}}}` }
	// The calls worker finds the service unreachable for its first ten
	// attempts: about three minutes of backoff, past the run's two-minute
	// deadline.
	env.unreachable = 10
	env.OnActivity(workflows.ActivityRecordExtension, mock.Anything, mock.Anything).Return(nil)
	def := &workflowsv1.Definition{}
	if err := protojson.Unmarshal([]byte(`{"nodes":[{"id":"start","start":{"next":"a"}},
		{"id":"a","action":{"tool":"tasks_create","arguments":{"description":"x"},"next":"done"}},{"id":"done","end":{}}]}`), def); err != nil {
		t.Fatal(err)
	}
	in := input(t, def, map[string]any{})
	in.Deadline = timestamppb.New(start.Add(2 * time.Minute))
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow("extend", "x1", &testsuite.TestUpdateCallback{OnReject: func(err error) { t.Errorf("extension refused: %v", err) },
			OnAccept: func() {}, OnComplete: func(any, error) {}},
			&workflowsv1.ExtendUpdate{Deadline: timestamppb.New(start.Add(time.Hour)), Reason: "the service is down", RequestedBy: "alice"})
	}, time.Minute)
	env.ExecuteWorkflow("workflows.run", in)
	got := env.result(t)
	if got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED || len(env.calls) != 1 {
		t.Errorf("run = %v after %d attempts, want completed once the service answered", got, env.attempts)
	}
}
