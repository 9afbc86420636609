package workflowsstore_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/services/workflows"
	"github.com/toolmesh/toolmesh/services/workflows/workflowsstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the workflows store on SQLite and on PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create and get a workflow", Test: testCreateGet},
		{Name: "create is idempotent by the agent's key; names are unique per agent", Test: testCreateOnce},
		{Name: "updates make versions; old versions stay readable", Test: testVersions},
		{Name: "racing updates make consecutive versions", Test: testRacingUpdates},
		{Name: "list and delete", Test: testListDelete},
		{Name: "runs: create once, list, record until ended", Test: testRuns},
	})
}

var day1 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *workflowsstore.Store {
	return sqldbtest.OpenStore(t, db, workflowsstore.Open)
}

// definition is a small graph whose action's argument says which one it is.
func definition(tag string) *workflowsv1.Definition {
	args, _ := structpb.NewStruct(map[string]any{"description": tag})
	return &workflowsv1.Definition{Nodes: []*workflowsv1.Node{
		{Id: "start", Kind: &workflowsv1.Node_Start{Start: &workflowsv1.StartNode{Next: "act"}}},
		{Id: "act", Kind: &workflowsv1.Node_Action{Action: &workflowsv1.ActionNode{Tool: "tasks_create", Arguments: args, Next: "done"}}},
		{Id: "done", Kind: &workflowsv1.Node_End{End: &workflowsv1.EndNode{}}},
	}}
}

func newWorkflow(agent, name string, at time.Time) *workflowsv1.Workflow {
	at = at.Truncate(time.Millisecond)
	return &workflowsv1.Workflow{WorkflowId: ids.NewAt("wf", at), AgentId: agent, Name: name, Description: "does " + name,
		Version: 1, LatestVersion: 1, Definition: definition(name + "-v1"), CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at)}
}

func create(t *testing.T, s *workflowsstore.Store, w *workflowsv1.Workflow) *workflowsv1.Workflow {
	t.Helper()
	got, created, err := s.CreateWorkflow(t.Context(), w, idempotency.Call{Digest: "d-" + w.GetName()})
	if err != nil || !created {
		t.Fatalf("CreateWorkflow(%s) = created %v, %v", w.GetName(), created, err)
	}
	return got
}

func testCreateGet(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	w := create(t, s, newWorkflow("agent-a", "report", day1))
	got, err := s.GetWorkflow(t.Context(), w.GetWorkflowId(), 0)
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "workflow", got, w)
	if _, err := s.GetWorkflow(t.Context(), ids.New("wf"), 0); err != workflows.ErrNotFound {
		t.Errorf("GetWorkflow(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetWorkflow(t.Context(), w.GetWorkflowId(), 2); err != workflows.ErrNotFound {
		t.Errorf("GetWorkflow(version 2 of 1) = %v, want ErrNotFound", err)
	}
}

func testCreateOnce(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := newWorkflow("agent-a", "report", day1)
	call := idempotency.Call{Key: "k1", Digest: "d1"}
	if _, created, err := s.CreateWorkflow(t.Context(), first, call); err != nil || !created {
		t.Fatalf("first create = %v, %v", created, err)
	}
	again, created, err := s.CreateWorkflow(t.Context(), newWorkflow("agent-a", "report", day1.Add(time.Second)), call)
	if err != nil || created || again.GetWorkflowId() != first.GetWorkflowId() {
		t.Errorf("retry = %v (created %v), %v; want the first workflow", again, created, err)
	}
	prototest.Equal(t, "retried create", again, first)
	_, _, err = s.CreateWorkflow(t.Context(), newWorkflow("agent-a", "other", day1), idempotency.Call{Key: "k1", Digest: "d2"})
	sqldbtest.WantErr(t, "the key with another request", err, idempotency.ErrKeyReused)
	_, _, err = s.CreateWorkflow(t.Context(), newWorkflow("agent-a", "report", day1), idempotency.Call{Key: "k2", Digest: "d3"})
	sqldbtest.WantErr(t, "a second workflow named report", err, workflows.ErrNameTaken)
	// Another agent: its own key space and its own names.
	if _, created, err := s.CreateWorkflow(t.Context(), newWorkflow("agent-b", "report", day1), call); err != nil || !created {
		t.Errorf("agent-b's create with agent-a's key and name = %v, %v; want created", created, err)
	}
}

func testVersions(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	w := create(t, s, newWorkflow("agent-a", "report", day1))
	desc := "weekly"
	v2, err := s.UpdateWorkflow(t.Context(), w.GetWorkflowId(), 1, &desc, definition("v2"), day1.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if v2.GetVersion() != 2 || v2.GetLatestVersion() != 2 || v2.GetDescription() != "weekly" || !proto.Equal(v2.GetDefinition(), definition("v2")) ||
		!v2.GetUpdateTime().AsTime().Equal(day1.Add(time.Hour)) {
		t.Errorf("update = %v, want version 2 with the new definition and description", v2)
	}
	_, err = s.UpdateWorkflow(t.Context(), w.GetWorkflowId(), 1, nil, definition("stale"), day1.Add(2*time.Hour))
	sqldbtest.WantErr(t, "an update expecting version 1 of 2", err, workflows.ErrVersionConflict)
	v3, err := s.UpdateWorkflow(t.Context(), w.GetWorkflowId(), 0, nil, definition("v3"), day1.Add(3*time.Hour))
	if err != nil || v3.GetVersion() != 3 || v3.GetDescription() != "weekly" {
		t.Errorf("update without expected version or description = %v, %v; want version 3, description kept", v3, err)
	}
	old, err := s.GetWorkflow(t.Context(), w.GetWorkflowId(), 1)
	if err != nil || old.GetVersion() != 1 || old.GetLatestVersion() != 3 || !proto.Equal(old.GetDefinition(), w.GetDefinition()) {
		t.Errorf("version 1 = %v, %v; want the first definition", old, err)
	}
	_, err = s.UpdateWorkflow(t.Context(), ids.New("wf"), 0, nil, definition("x"), day1)
	sqldbtest.WantErr(t, "updating an unknown workflow", err, workflows.ErrNotFound)
}

func testRacingUpdates(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	w := create(t, s, newWorkflow("agent-a", "report", day1))
	const n = 8
	var mu sync.Mutex
	var versions []int32
	sqldbtest.Race(t, db, n, func(i int) {
		got, err := s.UpdateWorkflow(t.Context(), w.GetWorkflowId(), 0, nil, definition(fmt.Sprint(i)), day1.Add(time.Minute))
		if err != nil {
			t.Errorf("update %d: %v", i, err)
			return
		}
		mu.Lock()
		versions = append(versions, got.GetVersion())
		mu.Unlock()
	})
	slices.Sort(versions)
	if want := []int32{2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(versions, want) {
		t.Errorf("racing updates made versions %v, want %v", versions, want)
	}
}

func testListDelete(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a1 := create(t, s, newWorkflow("agent-a", "one", day1))
	a2 := create(t, s, newWorkflow("agent-a", "two", day1.Add(time.Minute)))
	create(t, s, newWorkflow("agent-b", "three", day1.Add(2*time.Minute)))
	list, total, err := s.ListWorkflows(t.Context(), "agent-a", 0, 10)
	if err != nil || total != 2 || len(list) != 2 || list[0].GetWorkflowId() != a2.GetWorkflowId() || list[0].GetDefinition() != nil || list[0].GetVersion() != 1 {
		t.Fatalf("agent-a's list = %v (total %d), %v; want two, newest first, without definitions", list, total, err)
	}
	if _, total, _ := s.ListWorkflows(t.Context(), "", 0, 10); total != 3 {
		t.Errorf("every agent's list has %d, want 3", total)
	}
	gone, err := s.DeleteWorkflow(t.Context(), a1.GetWorkflowId(), day1.Add(time.Hour))
	if err != nil || gone.GetWorkflowId() != a1.GetWorkflowId() {
		t.Fatalf("DeleteWorkflow = %v, %v", gone, err)
	}
	if _, err := s.GetWorkflow(t.Context(), a1.GetWorkflowId(), 0); err != workflows.ErrNotFound {
		t.Errorf("get after delete = %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteWorkflow(t.Context(), a1.GetWorkflowId(), day1.Add(time.Hour)); err != workflows.ErrNotFound {
		t.Errorf("second delete = %v, want ErrNotFound", err)
	}
	if _, total, _ := s.ListWorkflows(t.Context(), "agent-a", 0, 10); total != 1 {
		t.Errorf("after a delete agent-a lists %d, want 1", total)
	}
	// The name is free again.
	create(t, s, newWorkflow("agent-a", "one", day1.Add(2*time.Hour)))
}

func newRun(w *workflowsv1.Workflow, at time.Time) *workflowsv1.Run {
	at = at.Truncate(time.Millisecond)
	id := ids.NewAt("run", at)
	input, _ := structpb.NewStruct(map[string]any{"topic": "x"})
	return &workflowsv1.Run{RunId: id, WorkflowId: w.GetWorkflowId(), Version: w.GetVersion(), WorkflowName: w.GetName(), AgentId: w.GetAgentId(),
		Status: workflowsv1.RunStatus_RUN_STATUS_RUNNING, Input: input, CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at),
		Deadline: timestamppb.New(at.Add(time.Hour)), TemporalWorkflowId: "workflow-run/" + w.GetAgentId() + "/" + id,
		Nodes: []*workflowsv1.NodeExecution{{NodeId: "start", Status: workflowsv1.NodeStatus_NODE_STATUS_PENDING}}}
}

func testRuns(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	w := create(t, s, newWorkflow("agent-a", "report", day1))
	r := newRun(w, day1.Add(time.Minute))
	got, created, err := s.CreateRun(t.Context(), r, "d1")
	if err != nil || !created {
		t.Fatalf("CreateRun = %v, %v", created, err)
	}
	prototest.Equal(t, "created run", got, r)
	again, created, err := s.CreateRun(t.Context(), r, "d1")
	if err != nil || created {
		t.Errorf("second CreateRun = created %v, %v; want the first run", created, err)
	}
	prototest.Equal(t, "retried run", again, r)
	_, _, err = s.CreateRun(t.Context(), r, "d2")
	sqldbtest.WantErr(t, "the run's key with another request", err, idempotency.ErrKeyReused)

	other := newRun(w, day1.Add(2*time.Minute))
	if _, _, err := s.CreateRun(t.Context(), other, "d3"); err != nil {
		t.Fatal(err)
	}
	// Suspended, then completed: the end is recorded once.
	suspended := &workflowsv1.RunOutcome{Status: workflowsv1.RunStatus_RUN_STATUS_SUSPENDED, Deadline: timestamppb.New(day1.Add(3 * time.Hour)),
		Nodes: []*workflowsv1.NodeExecution{{NodeId: "ok", Status: workflowsv1.NodeStatus_NODE_STATUS_WAITING_APPROVAL, AskId: "ask_1"}}}
	if got, changed, err := s.RecordRun(t.Context(), r.GetRunId(), suspended, day1.Add(5*time.Minute)); err != nil || !changed ||
		got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_SUSPENDED || !got.GetDeadline().AsTime().Equal(day1.Add(3*time.Hour)) || got.GetNodes()[0].GetAskId() != "ask_1" {
		t.Errorf("record suspended = %v (changed %v), %v", got, changed, err)
	}
	done := &workflowsv1.RunOutcome{Status: workflowsv1.RunStatus_RUN_STATUS_COMPLETED, Output: structpb.NewNumberValue(7), EndTime: timestamppb.New(day1.Add(10 * time.Minute))}
	if got, changed, err := s.RecordRun(t.Context(), r.GetRunId(), done, day1.Add(10*time.Minute)); err != nil || !changed ||
		got.GetOutput().GetNumberValue() != 7 || !got.GetEndTime().AsTime().Equal(day1.Add(10*time.Minute)) || !got.GetDeadline().AsTime().Equal(day1.Add(3*time.Hour)) {
		t.Errorf("record completed = %v (changed %v), %v", got, changed, err)
	}
	late := &workflowsv1.RunOutcome{Status: workflowsv1.RunStatus_RUN_STATUS_FAILED, EndTime: timestamppb.New(day1.Add(11 * time.Minute))}
	if got, changed, err := s.RecordRun(t.Context(), r.GetRunId(), late, day1.Add(11*time.Minute)); err != nil || changed || got.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("record after the end = %v (changed %v), %v; want the first end kept", got, changed, err)
	}
	if _, _, err := s.RecordRun(t.Context(), ids.New("run"), done, day1); err != workflows.ErrNotFound {
		t.Errorf("record of an unknown run = %v, want ErrNotFound", err)
	}

	list, total, err := s.ListRuns(t.Context(), "agent-a", w.GetWorkflowId(), workflowsv1.RunStatus_RUN_STATUS_UNSPECIFIED, 0, 10)
	if err != nil || total != 2 || list[0].GetRunId() != other.GetRunId() || list[0].GetNodes() != nil {
		t.Errorf("runs = %v (total %d), %v; want both, newest first, without nodes", list, total, err)
	}
	if _, total, _ := s.ListRuns(t.Context(), "agent-a", "", workflowsv1.RunStatus_RUN_STATUS_COMPLETED, 0, 10); total != 1 {
		t.Errorf("completed runs: %d, want 1", total)
	}
	if _, total, _ := s.ListRuns(t.Context(), "agent-b", "", workflowsv1.RunStatus_RUN_STATUS_UNSPECIFIED, 0, 10); total != 0 {
		t.Errorf("agent-b's runs: %d, want 0", total)
	}
	// DeleteRun removes a run that never started, never one that ended.
	if err := s.DeleteRun(t.Context(), r.GetRunId()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(t.Context(), r.GetRunId()); err != nil {
		t.Errorf("an ended run was deleted: %v", err)
	}
	if err := s.DeleteRun(t.Context(), other.GetRunId()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(t.Context(), other.GetRunId()); err != workflows.ErrNotFound {
		t.Errorf("get of a deleted run = %v, want ErrNotFound", err)
	}
}
