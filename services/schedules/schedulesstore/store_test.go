package schedulesstore_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulesstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the schedules store on SQLite and on
// PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create and get", Test: testCreateGet},
		{Name: "reopen keeps schedules", Test: testReopen},
		{Name: "idempotency key", Test: testIdempotency},
		{Name: "stress: racing creates with one key", Test: testStressSameKey},
		{Name: "list newest first, by agent and status", Test: testList},
		{Name: "update compare-and-swap", Test: testUpdate},
		{Name: "revise: a change, its key and its revision", Test: testRevise},
		{Name: "stress: racing changes of one schedule", Test: testStressRevise},
		{Name: "delete", Test: testDelete},
		{Name: "record executions", Test: testRecordExecution},
		{Name: "an ended run is never reopened", Test: testEndedRunStays},
		{Name: "list executions most recently due first", Test: testListExecutions},
	})
}

const (
	agentA = "agent-a"
	agentB = "agent-b"
	noKey  = ""
)

// day1 is an arbitrary UTC day.
var day1 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

var (
	pending = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL
	active  = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE
	paused  = schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED
	running = schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	ok      = schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	failed  = schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED
)

func openStore(t *testing.T, db *sqldb.DB) *schedulesstore.Store {
	return sqldbtest.OpenStore(t, db, schedulesstore.Open)
}

func args(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSchedule is a pending schedule as the service builds it: times have
// millisecond precision and the id sorts by creation time.
func newSchedule(t *testing.T, agent string, at time.Time) *schedulesv1.Schedule {
	at = at.Truncate(time.Millisecond)
	id := ids.NewAt("sch", at)
	return &schedulesv1.Schedule{
		Id:          id,
		AgentId:     agent,
		Description: "report at " + at.Format(time.RFC3339Nano),
		Cron:        "0 9 * * MON-FRI",
		Timezone:    "Europe/Paris",
		Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{
			"description": "weekly report", "priority": "TASK_PRIORITY_HIGH", "n": 1.5, "tags": []any{"a", true, nil},
		})},
		Status:             pending,
		TemporalScheduleId: "schedule/" + id,
		Depth:              2,
		CreateTime:         timestamppb.New(at),
		UpdateTime:         timestamppb.New(at),
	}
}

// createKeyed is Store.Create of sch as a call with key, with the request
// digest the service makes.
func createKeyed(t *testing.T, s *schedulesstore.Store, sch *schedulesv1.Schedule, key string) (*schedulesv1.Schedule, bool, error) {
	req := &schedulesv1.CreateRequest{Cron: sch.GetCron(), IntervalSeconds: sch.GetIntervalSeconds(), Timezone: sch.GetTimezone(),
		Action: sch.GetAction(), Description: sch.GetDescription()}
	return s.Create(t.Context(), sch, idempotency.Call{Key: key, Digest: idempotency.Digest(req)})
}

func create(t *testing.T, s *schedulesstore.Store, sch *schedulesv1.Schedule, key string) *schedulesv1.Schedule {
	t.Helper()
	got, _, err := createKeyed(t, s, sch, key)
	if err != nil {
		t.Fatalf("Create(%s, key %q): %v", sch.GetId(), key, err)
	}
	return got
}

func want[M proto.Message](t *testing.T, what string, got, want M) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func testCreateGet(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	sch := newSchedule(t, agentA, day1.Add(9*time.Hour+123*time.Millisecond))
	sch.Description = "Résumé prüfen ✓ — 'quotes' and \"double quotes\""
	got, created, err := createKeyed(t, s, proto.Clone(sch).(*schedulesv1.Schedule), noKey)
	if err != nil || !created {
		t.Fatalf("Create = created %v, %v; want created", created, err)
	}
	want(t, "Create returned", got, sch)
	stored, err := s.Get(t.Context(), sch.GetId())
	if err != nil {
		t.Fatal(err)
	}
	want(t, "Get returned", stored, sch)

	interval := newSchedule(t, agentA, day1)
	interval.Cron, interval.IntervalSeconds, interval.Timezone = "", 300, "UTC"
	interval.Action.Arguments = nil
	create(t, s, interval, noKey)
	stored, err = s.Get(t.Context(), interval.GetId())
	if err != nil {
		t.Fatal(err)
	}
	interval.Action.Arguments = &structpb.Struct{} // no arguments read back as the empty object
	want(t, "Get of an interval schedule without arguments", stored, interval)

	_, err = s.Get(t.Context(), ids.NewAt("sch", day1))
	sqldbtest.WantErr(t, "Get of an unknown id", err, schedules.ErrNotFound)
}

func testReopen(t *testing.T, db *sqldb.DB) {
	sch := newSchedule(t, agentA, day1)
	create(t, openStore(t, db), sch, noKey)
	s := openStore(t, db) // migrations run again: a no-op
	got, err := s.Get(t.Context(), sch.GetId())
	if err != nil {
		t.Fatal(err)
	}
	want(t, "Get after reopening", got, sch)
}

func testIdempotency(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := create(t, s, newSchedule(t, agentA, day1), "key-1")
	retry := newSchedule(t, agentA, day1.Add(time.Minute))
	retry.Description = first.GetDescription()
	got, created, err := createKeyed(t, s, retry, "key-1")
	if err != nil || created {
		t.Fatalf("retry: created %v, %v; want the first schedule back", created, err)
	}
	want(t, "retry with the same key", got, first)
	// The same key with another request is refused.
	got, _, err = createKeyed(t, s, newSchedule(t, agentA, day1.Add(time.Minute)), "key-1")
	sqldbtest.WantErr(t, "the same key with another description", err, idempotency.ErrKeyReused)
	want(t, "the schedule holding the reused key", got, first)
	// The key is the agent's own: another agent's key does not collide.
	if _, created, err := createKeyed(t, s, newSchedule(t, agentB, day1), "key-1"); err != nil || !created {
		t.Errorf("another agent's create with the same key: created %v, %v; want created", created, err)
	}
	// Without a key every create stores a schedule.
	for range 2 {
		if _, created, err := createKeyed(t, s, newSchedule(t, agentA, day1), noKey); err != nil || !created {
			t.Errorf("create without key: created %v, %v; want created", created, err)
		}
	}
	if _, total, _ := s.List(t.Context(), agentA, 0, 0, 10); total != 3 {
		t.Errorf("agent A has %d schedules, want 3", total)
	}
}

func testStressSameKey(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	answered := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		sch := newSchedule(t, agentA, day1.Add(time.Duration(racer)*time.Millisecond))
		sch.Description = fmt.Sprintf("round %d, request %d", round, variant)
		got, created, err := createKeyed(t, s, sch, fmt.Sprintf("key-%d", round))
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		}
		return sqldbtest.Outcome{ID: got.GetId(), Created: created}
	})
	list, total, err := s.List(t.Context(), agentA, 0, 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(answered, prototest.IDs(list), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" || total != len(answered) {
		t.Errorf("stored schedules are not the ones answered (-answered +stored):\n%s", diff)
	}
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	// Four of agent A's schedules a minute apart, created out of order; 1
	// and 3 active; and two of agent B's.
	var a [4]*schedulesv1.Schedule
	for _, i := range []int{2, 0, 3, 1} {
		a[i] = create(t, s, newSchedule(t, agentA, day1.Add(time.Duration(i)*time.Minute)), noKey)
	}
	for _, i := range []int{1, 3} {
		next := proto.Clone(a[i]).(*schedulesv1.Schedule)
		next.Status = active
		updated, err := s.Update(ctx, next, a[i])
		if err != nil {
			t.Fatal(err)
		}
		a[i] = updated
	}
	b0 := create(t, s, newSchedule(t, agentB, day1.Add(30*time.Second)), noKey)
	b1 := create(t, s, newSchedule(t, agentB, day1.Add(time.Hour)), noKey)

	for _, tc := range []struct {
		agent         string
		status        schedulesv1.ScheduleStatus
		offset, limit int
		want          []*schedulesv1.Schedule
		total         int
	}{
		{agentA, 0, 0, 10, []*schedulesv1.Schedule{a[3], a[2], a[1], a[0]}, 4},
		{agentA, 0, 1, 2, []*schedulesv1.Schedule{a[2], a[1]}, 4},
		{agentA, active, 0, 10, []*schedulesv1.Schedule{a[3], a[1]}, 2},
		{agentA, paused, 0, 10, []*schedulesv1.Schedule{}, 0},
		{"", 0, 0, 10, []*schedulesv1.Schedule{b1, a[3], a[2], a[1], b0, a[0]}, 6},
		{"", pending, 0, 2, []*schedulesv1.Schedule{b1, a[2]}, 4},
	} {
		got, total, err := s.List(ctx, tc.agent, tc.status, tc.offset, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("List(agent %q, %v, offset %d, limit %d)", tc.agent, tc.status, tc.offset, tc.limit)
		if total != tc.total {
			t.Errorf("%s total = %d, want %d", what, total, tc.total)
		}
		if diff := cmp.Diff(prototest.IDs(tc.want), prototest.IDs(got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
}

func testUpdate(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	sch := create(t, s, newSchedule(t, agentA, day1), noKey)

	next := proto.Clone(sch).(*schedulesv1.Schedule)
	next.SpecHash = "0123456789abcdef0123456789abcdef"
	next.ApprovalWorkflowId = "schedule-approval/" + sch.GetId() + "/" + next.SpecHash
	next.UpdateTime = timestamppb.New(day1.Add(time.Second))
	got, err := s.Update(ctx, next, sch)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "Update recording the approval request", got, next)

	// A decision about another spec hash than the stored one is stale.
	otherHash := proto.Clone(got).(*schedulesv1.Schedule)
	otherHash.SpecHash = "ffffffffffffffffffffffffffffffff"
	approved := proto.Clone(got).(*schedulesv1.Schedule)
	approved.Status = active
	approved.Decision = &schedulesv1.Decision{DecidedBy: "owner", Note: "fine", DecideTime: timestamppb.New(day1.Add(time.Minute))}
	approved.UpdateTime = timestamppb.New(day1.Add(time.Minute))
	_, err = s.Update(ctx, approved, otherHash)
	sqldbtest.WantErr(t, "Update from another spec hash", err, schedules.ErrStale)
	if got, err = s.Update(ctx, approved, got); err != nil {
		t.Fatal(err)
	}
	want(t, "Update approving", got, approved)

	// A change from a status the schedule is no longer in is stale and
	// changes nothing.
	stale := proto.Clone(approved).(*schedulesv1.Schedule)
	stale.Status = paused
	stale.PausedBy = "agent-a"
	_, err = s.Update(ctx, stale, next)
	sqldbtest.WantErr(t, "Update from a stale status", err, schedules.ErrStale)
	if got, _ := s.Get(ctx, sch.GetId()); got.GetStatus() != active {
		t.Errorf("after a stale Update the status is %v, want active", got.GetStatus())
	}
	if got, err = s.Update(ctx, stale, approved); err != nil || got.GetPausedBy() != "agent-a" {
		t.Errorf("pause = %v, %v; want paused by agent-a", got, err)
	}
	missing := newSchedule(t, agentA, day1)
	_, err = s.Update(ctx, missing, missing)
	sqldbtest.WantErr(t, "Update of an unknown schedule", err, schedules.ErrNotFound)
}

func testDelete(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	sch := create(t, s, newSchedule(t, agentA, day1), "key")
	if err := s.Delete(t.Context(), sch.GetId()); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(t.Context(), sch.GetId())
	sqldbtest.WantErr(t, "Get after Delete", err, schedules.ErrNotFound)
	// The key is free again: a retry of a create that was rolled back
	// creates anew.
	if _, created, err := createKeyed(t, s, newSchedule(t, agentA, day1), "key"); err != nil || !created {
		t.Errorf("create after Delete with the same key: created %v, %v; want created", created, err)
	}
}

func runOf(sch string, due time.Time) string {
	return "schedule-run/" + sch + "-" + due.UTC().Format(time.RFC3339)
}

func testRecordExecution(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	sch := ids.NewAt("sch", day1)
	due := day1.Add(9 * time.Hour)
	start := &schedulesv1.Execution{
		RunId: runOf(sch, due), ScheduleId: sch, ScheduledTime: timestamppb.New(due),
		StartTime: timestamppb.New(due.Add(20 * time.Millisecond)), Status: running, Attempts: 0,
	}
	got, err := s.RecordExecution(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "recorded start", got, start)
	// The start reported again (an activity retry) is still one run.
	if _, err := s.RecordExecution(ctx, start); err != nil {
		t.Fatal(err)
	}

	end := proto.Clone(start).(*schedulesv1.Execution)
	end.EndTime = timestamppb.New(due.Add(time.Second))
	end.Status = ok
	end.Attempts = 2
	end.Result = args(t, map[string]any{"status": "ok", "data": map[string]any{"task": map[string]any{"id": "tsk_1"}}})
	if got, err = s.RecordExecution(ctx, end); err != nil {
		t.Fatal(err)
	}
	want(t, "recorded end", got, end)
	list, total, err := s.ListExecutions(ctx, sch, 0, 10)
	if err != nil || total != 1 || len(list) != 1 {
		t.Fatalf("ListExecutions = %d of %d, %v; want the one run", len(list), total, err)
	}
	want(t, "listed run", list[0], end)
}

func testEndedRunStays(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	sch := ids.NewAt("sch", day1)
	due := day1.Add(time.Hour)
	end := &schedulesv1.Execution{
		RunId: runOf(sch, due), ScheduleId: sch, ScheduledTime: timestamppb.New(due),
		StartTime: timestamppb.New(due), EndTime: timestamppb.New(due.Add(time.Second)), Status: failed,
		DomainCode: "rate_limited", Attempts: 1, Result: args(t, map[string]any{"status": "error", "domain_code": "rate_limited"}),
	}
	if _, err := s.RecordExecution(ctx, end); err != nil {
		t.Fatal(err)
	}
	// A late start report, or a different outcome reported for the same
	// run, changes nothing.
	for _, late := range []*schedulesv1.Execution{
		{RunId: end.GetRunId(), ScheduleId: sch, ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), Status: running},
		{RunId: end.GetRunId(), ScheduleId: sch, ScheduledTime: timestamppb.New(due), Status: ok, EndTime: timestamppb.New(due.Add(time.Hour))},
	} {
		got, err := s.RecordExecution(ctx, late)
		if err != nil {
			t.Fatal(err)
		}
		want(t, "an ended run reported again", got, end)
	}
	// A run id reported under another schedule does not touch this one.
	other := proto.Clone(end).(*schedulesv1.Execution)
	other.ScheduleId = ids.NewAt("sch", day1.Add(time.Second))
	other.Status = running
	if got, err := s.RecordExecution(ctx, other); err != nil || got.GetScheduleId() != sch {
		t.Errorf("a run id under another schedule = %v, %v; want the stored run unchanged", got, err)
	}
}

func testListExecutions(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	sch, other := ids.NewAt("sch", day1), ids.NewAt("sch", day1.Add(time.Millisecond))
	var runs []string
	for _, h := range []int{3, 1, 2, 0} {
		due := day1.Add(time.Duration(h) * time.Hour)
		e := &schedulesv1.Execution{RunId: runOf(sch, due), ScheduleId: sch, ScheduledTime: timestamppb.New(due), Status: running}
		if _, err := s.RecordExecution(ctx, e); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, e.GetRunId())
	}
	if _, err := s.RecordExecution(ctx, &schedulesv1.Execution{RunId: runOf(other, day1), ScheduleId: other,
		ScheduledTime: timestamppb.New(day1), Status: running}); err != nil {
		t.Fatal(err)
	}
	list, total, err := s.ListExecutions(ctx, sch, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.GetRunId())
	}
	// runs holds the runs due at 3, 1, 2 and 0 o'clock; the page is the
	// second and third most recently due.
	if diff := cmp.Diff([]string{runs[2], runs[1]}, got); diff != "" || total != 4 {
		t.Errorf("ListExecutions(offset 1, limit 2) = %d total (-want +got):\n%s", total, diff)
	}
}
