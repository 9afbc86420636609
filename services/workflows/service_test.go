package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
	"github.com/toolmesh/toolmesh/services/workflows"
	"github.com/toolmesh/toolmesh/services/workflows/workflowsstore"
)

// env is one workflows service under test.
type env struct {
	svc *workflows.Service
	c   workflowsv1connect.WorkflowsServiceClient
	srv *servertest.Server
	wf  *fakeEngine
}

// start serves the workflows service on SQLite with fake runs, and a
// Connect client of it.
func start(t *testing.T, cfg workflows.Config) *env {
	t.Helper()
	st, err := workflowsstore.Open(context.Background(), sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	wf := newFakeEngine()
	svc, err := workflows.New(st, wf, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc.Registration())
	return &env{svc: svc, c: workflowsv1connect.NewWorkflowsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...), srv: srv, wf: wf}
}

// eachProtocol runs fn against a fresh service once over Connect and once
// over gRPC.
func eachProtocol(t *testing.T, cfg workflows.Config, fn func(t *testing.T, e *env)) {
	var e *env
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		e = start(t, cfg)
		return e.srv
	}, workflowsv1connect.NewWorkflowsServiceClient, func(t *testing.T, c workflowsv1connect.WorkflowsServiceClient) {
		e.c = c
		fn(t, e)
	})
}

// as is a caller: an agent with the grants its token carries, at a depth.
func as(agent string, depth int, grants ...string) context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent + "-subject", Agent: agent, Depth: depth, Grants: grants}})
}
func agentA() context.Context { return as("agent-a", 0, "toolmesh:read", "toolmesh:write") }
func agentB() context.Context { return as("agent-b", 0, "toolmesh:read", "toolmesh:write") }
func theOwner() context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "alice", Agent: "local", Roles: []string{mesh.RoleOwner}, Grants: []string{mesh.GrantAll}}})
}

func wantCode(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); got != want {
		t.Errorf("%s: code %v (err %v), want %v", what, got, err, want)
	}
}

func waitNone() *int32 { var z int32; return &z }

func TestWorkflowsAreVersioned(t *testing.T) {
	eachProtocol(t, workflows.Config{}, func(t *testing.T, e *env) {
		created, err := e.c.Create(servertest.WithIdempotencyKey(agentA(), "k1"), example(t))
		if err != nil {
			t.Fatal(err)
		}
		w := created.GetWorkflow()
		if w.GetVersion() != 1 || w.GetAgentId() != "agent-a" || w.GetName() != "triage" || len(w.GetDefinition().GetNodes()) != 12 {
			t.Fatalf("created = %v", w)
		}
		again, err := e.c.Create(servertest.WithIdempotencyKey(agentA(), "k1"), example(t))
		if err != nil || again.GetWorkflow().GetWorkflowId() != w.GetWorkflowId() {
			t.Errorf("retried create = %v, %v; want the first workflow", again, err)
		}
		_, err = e.c.Create(agentA(), example(t))
		wantCode(t, "a second workflow with the name", err, connect.CodeAlreadyExists)

		def := graph(t, startAt+`,`+action("a", "tasks_create", `{"description":"v2"}`, "done")+`,`+end)
		up, err := e.c.Update(agentA(), &workflowsv1.UpdateRequest{WorkflowId: w.GetWorkflowId(), Definition: def, ExpectedVersion: 1})
		if err != nil || up.GetWorkflow().GetVersion() != 2 || len(up.GetWorkflow().GetDefinition().GetNodes()) != 3 {
			t.Fatalf("update = %v, %v; want version 2", up, err)
		}
		_, err = e.c.Update(agentA(), &workflowsv1.UpdateRequest{WorkflowId: w.GetWorkflowId(), Definition: def, ExpectedVersion: 1})
		wantCode(t, "an update of a stale version", err, connect.CodeAborted)
		v1, err := e.c.Get(agentA(), &workflowsv1.GetRequest{WorkflowId: w.GetWorkflowId(), Version: 1})
		if err != nil || len(v1.GetWorkflow().GetDefinition().GetNodes()) != 12 || v1.GetWorkflow().GetLatestVersion() != 2 {
			t.Errorf("version 1 = %v, %v", v1, err)
		}

		// Another agent neither sees nor changes it; the owner sees it.
		_, err = e.c.Get(agentB(), &workflowsv1.GetRequest{WorkflowId: w.GetWorkflowId()})
		wantCode(t, "another agent's get", err, connect.CodeNotFound)
		_, err = e.c.Update(agentB(), &workflowsv1.UpdateRequest{WorkflowId: w.GetWorkflowId(), Definition: def})
		wantCode(t, "another agent's update", err, connect.CodeNotFound)
		if _, err := e.c.Get(theOwner(), &workflowsv1.GetRequest{WorkflowId: w.GetWorkflowId()}); err != nil {
			t.Errorf("the owner's get: %v", err)
		}
		_, err = e.c.Update(theOwner(), &workflowsv1.UpdateRequest{WorkflowId: w.GetWorkflowId(), Definition: def})
		wantCode(t, "the owner changing an agent's workflow", err, connect.CodePermissionDenied)

		list, err := e.c.List(agentA(), &workflowsv1.ListRequest{})
		if err != nil || list.GetPage().GetTotal() != 1 || list.GetWorkflows()[0].GetDefinition() != nil {
			t.Errorf("list = %v, %v; want one workflow without its definition", list, err)
		}
		if _, err := e.c.Delete(agentA(), &workflowsv1.DeleteRequest{WorkflowId: w.GetWorkflowId()}); err != nil {
			t.Fatal(err)
		}
		_, err = e.c.Run(agentA(), &workflowsv1.RunRequest{WorkflowId: w.GetWorkflowId(), WaitSeconds: waitNone()})
		wantCode(t, "running a deleted workflow", err, connect.CodeNotFound)
	})
}

// privileged is a workflow whose one action calls a privileged WRITE tool.
func privileged(t *testing.T) *workflowsv1.CreateRequest {
	return &workflowsv1.CreateRequest{Name: "star", Definition: graph(t, startAt+`,`+
		action("a", "github_star_repo", `{"owner":"temporalio","repo":"sdk-go"}`, "done")+`,`+end)}
}

func TestRunsCarryTheStartersGrantsAndDepth(t *testing.T) {
	eachProtocol(t, workflows.Config{CallTimeout: 42 * time.Second}, func(t *testing.T, e *env) {
		w, err := e.c.Create(agentA(), privileged(t))
		if err != nil {
			t.Fatal(err)
		}
		id := w.GetWorkflow().GetWorkflowId()
		input, _ := structpb.NewStruct(map[string]any{"topic": "x"})
		// Without the grant: the run starts, and knows the tool is refused.
		ctx := servertest.WithIdempotencyKey(as("agent-a", 1, "toolmesh:write"), "run-1")
		res, err := e.c.Run(ctx, &workflowsv1.RunRequest{WorkflowId: id, Input: input, WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		r := res.GetRun()
		in := e.wf.input(r.GetTemporalWorkflowId())
		if in == nil || !strings.Contains(in.GetRefusedTools()["github_star_repo"], "explicit grant") {
			t.Fatalf("run input %v, want github_star_repo refused for want of a grant", in)
		}
		st := in.GetStarter()
		if st.GetAgent() != "agent-a" || st.GetSubject() != "agent-a-subject" || st.GetDepth() != 1 || len(st.GetGrants()) != 1 {
			t.Errorf("starter = %v, want agent-a's identity, depth and grants", st)
		}
		if got := in.GetCallTimeout().AsDuration(); got != 42*time.Second {
			t.Errorf("the run's call timeout = %s, want the service's configured 42s", got)
		}
		if r.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_RUNNING || r.GetTemporalWorkflowId() != "workflow-run/agent-a/"+r.GetRunId() ||
			len(r.GetNodes()) != 3 || r.GetNodes()[1].GetStatus() != workflowsv1.NodeStatus_NODE_STATUS_PENDING {
			t.Errorf("run = %v, want running with every node pending", r)
		}
		// A retry with the same key is the same run, started once.
		again, err := e.c.Run(ctx, &workflowsv1.RunRequest{WorkflowId: id, Input: input, WaitSeconds: waitNone()})
		if err != nil || again.GetRun().GetRunId() != r.GetRunId() {
			t.Errorf("retried run = %v, %v; want the first run", again, err)
		}
		// With the grant: nothing is refused.
		res, err = e.c.Run(as("agent-a", 0, "toolmesh:write", "toolmesh:tool:github_star_repo"), &workflowsv1.RunRequest{WorkflowId: id, WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		if in := e.wf.input(res.GetRun().GetTemporalWorkflowId()); len(in.GetRefusedTools()) != 0 {
			t.Errorf("refused with the grant: %v", in.GetRefusedTools())
		}
		// Past the depth limit: refused.
		_, err = e.c.Run(as("agent-a", 3, "toolmesh:write"), &workflowsv1.RunRequest{WorkflowId: id, WaitSeconds: waitNone()})
		wantCode(t, "a run at depth 3", err, connect.CodeFailedPrecondition)
		// Another agent may not run it.
		_, err = e.c.Run(agentB(), &workflowsv1.RunRequest{WorkflowId: id, WaitSeconds: waitNone()})
		wantCode(t, "another agent's run", err, connect.CodeNotFound)
	})
}

func TestRunReturnsTheOutcomeWhenItEndsInTheWait(t *testing.T) {
	eachProtocol(t, workflows.Config{}, func(t *testing.T, e *env) {
		w, err := e.c.Create(agentA(), privileged(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := servertest.WithIdempotencyKey(agentA(), "k-wait")
		go func() {
			in := e.wf.waitStarted(t.Context(), workflows.WorkflowID("agent-a", workflows.RunID("agent-a", "k-wait", time.Time{})))
			if in != nil {
				e.wf.end(workflows.WorkflowID("agent-a", in.GetRunId()), &workflowsv1.RunOutcome{Status: workflowsv1.RunStatus_RUN_STATUS_COMPLETED,
					Output: structpb.NewStringValue("done")})
			}
		}()
		res, err := e.c.Run(ctx, &workflowsv1.RunRequest{WorkflowId: w.GetWorkflow().GetWorkflowId()})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED || res.GetRun().GetOutput().GetStringValue() != "done" {
			t.Errorf("run = %v, want completed with its output", res.GetRun())
		}
		got, err := e.c.GetRun(agentA(), &workflowsv1.GetRunRequest{RunId: res.GetRun().GetRunId()})
		if err != nil || got.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Errorf("get run = %v, %v; want the end recorded", got, err)
		}
		_, err = e.c.GetRun(agentB(), &workflowsv1.GetRunRequest{RunId: res.GetRun().GetRunId()})
		wantCode(t, "another agent's run", err, connect.CodeNotFound)
		list, err := e.c.ListRuns(agentA(), &workflowsv1.ListRunsRequest{Status: workflowsv1.RunStatus_RUN_STATUS_COMPLETED})
		if err != nil || list.GetPage().GetTotal() != 1 {
			t.Errorf("completed runs = %v, %v; want the one", list, err)
		}
		// The owner lists every agent's runs, or one agent's.
		all, err := e.c.ListRuns(theOwner(), &workflowsv1.ListRunsRequest{})
		if err != nil || len(all.GetRuns()) != 1 || all.GetRuns()[0].GetAgentId() != "agent-a" {
			t.Errorf("the owner's runs = %v, %v; want agent-a's run", all, err)
		}
		onlyB, err := e.c.ListRuns(theOwner(), &workflowsv1.ListRunsRequest{AgentId: "agent-b"})
		if err != nil || len(onlyB.GetRuns()) != 0 {
			t.Errorf("the owner's runs of agent-b = %v, %v; want none", onlyB, err)
		}
		_, err = e.c.ListRuns(agentB(), &workflowsv1.ListRunsRequest{AgentId: "agent-a"})
		wantCode(t, "an agent listing another's runs", err, connect.CodePermissionDenied)
	})
}

func TestOnlyTheStarterExtendsOrCancelsARun(t *testing.T) {
	eachProtocol(t, workflows.Config{RunTimeout: time.Hour, MaxRunDuration: 4 * time.Hour}, func(t *testing.T, e *env) {
		w, err := e.c.Create(agentA(), privileged(t))
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.c.Run(agentA(), &workflowsv1.RunRequest{WorkflowId: w.GetWorkflow().GetWorkflowId(), WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		r := res.GetRun()
		ext, err := e.c.ExtendRun(servertest.WithIdempotencyKey(agentA(), "x1"), &workflowsv1.ExtendRunRequest{RunId: r.GetRunId(), ExtendSeconds: 3600, Reason: "slow owner"})
		if err != nil {
			t.Fatal(err)
		}
		if want := r.GetDeadline().AsTime().Add(time.Hour); !ext.GetRun().GetDeadline().AsTime().Equal(want) {
			t.Errorf("deadline after extending = %s, want %s", ext.GetRun().GetDeadline().AsTime(), want)
		}
		u := e.wf.extends[0]
		if u.GetRequestedBy() != "agent-a-subject" || u.GetReason() != "slow owner" || !strings.HasPrefix(u.GetCallId(), "ext_") || u.GetRequest().GetExtendSeconds() != 3600 {
			t.Errorf("extend update = %v, want the caller, reason, call id and request for the audit record", u)
		}
		_, err = e.c.ExtendRun(agentA(), &workflowsv1.ExtendRunRequest{RunId: r.GetRunId(), ExtendSeconds: 3 * 3600, Reason: "more"})
		wantCode(t, "extending past the longest run", err, connect.CodeInvalidArgument)
		_, err = e.c.ExtendRun(agentB(), &workflowsv1.ExtendRunRequest{RunId: r.GetRunId(), ExtendSeconds: 60, Reason: "mine"})
		wantCode(t, "another agent extending", err, connect.CodePermissionDenied)
		if err != nil && !strings.Contains(err.Error(), "only the agent that started a run may extend it") {
			t.Errorf("refusal %q does not say who may extend", err)
		}
		_, err = e.c.ExtendRun(theOwner(), &workflowsv1.ExtendRunRequest{RunId: r.GetRunId(), ExtendSeconds: 60, Reason: "owner"})
		wantCode(t, "the owner extending an agent's run", err, connect.CodePermissionDenied)
		_, err = e.c.CancelRun(agentB(), &workflowsv1.CancelRunRequest{RunId: r.GetRunId()})
		wantCode(t, "another agent cancelling", err, connect.CodePermissionDenied)

		// The owner may stop any agent's run (but not extend it, above).
		c, err := e.c.CancelRun(theOwner(), &workflowsv1.CancelRunRequest{RunId: r.GetRunId()})
		if err != nil || c.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_CANCELLED {
			t.Fatalf("the owner's cancel = %v, %v; want cancelled", c, err)
		}
		if again, err := e.c.CancelRun(agentA(), &workflowsv1.CancelRunRequest{RunId: r.GetRunId()}); err != nil || again.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_CANCELLED {
			t.Errorf("the agent cancelling its cancelled run = %v, %v; want it as it is", again, err)
		}
		_, err = e.c.ExtendRun(agentA(), &workflowsv1.ExtendRunRequest{RunId: r.GetRunId(), ExtendSeconds: 60, Reason: "late"})
		wantCode(t, "extending a cancelled run", err, connect.CodeFailedPrecondition)
	})
}

func TestRecordRunIsForTheWorker(t *testing.T) {
	e := start(t, workflows.Config{})
	w, err := e.c.Create(agentA(), privileged(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.c.Run(agentA(), &workflowsv1.RunRequest{WorkflowId: w.GetWorkflow().GetWorkflowId(), WaitSeconds: waitNone()})
	if err != nil {
		t.Fatal(err)
	}
	req := &workflowsv1.RecordRunRequest{RunId: res.GetRun().GetRunId(), Status: workflowsv1.RunStatus_RUN_STATUS_SUSPENDED}
	_, err = e.c.RecordRun(agentA(), req)
	wantCode(t, "an agent recording a run", err, connect.CodePermissionDenied)
	worker := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "toolmesh-worker-workflows", Agent: "toolmesh-worker-workflows", Roles: []string{mesh.RoleService}}})
	rec, err := e.c.RecordRun(worker, req)
	if err != nil || rec.GetRun().GetStatus() != workflowsv1.RunStatus_RUN_STATUS_SUSPENDED {
		t.Errorf("worker's record = %v, %v", rec, err)
	}
	list, err := e.c.ListRuns(agentA(), &workflowsv1.ListRunsRequest{Status: workflowsv1.RunStatus_RUN_STATUS_SUSPENDED})
	if err != nil || list.GetPage().GetTotal() != 1 {
		t.Errorf("suspended runs = %v, %v; want the one", list, err)
	}
}
