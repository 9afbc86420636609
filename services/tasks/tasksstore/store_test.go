package tasksstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the tasks store on SQLite and on
// PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create and get", Test: testCreateGet},
		{Name: "reopen keeps tasks", Test: testReopen},
		{Name: "list newest first", Test: testList},
		{Name: "daily cap", Test: testDailyCap},
		{Name: "daily cap counts UTC days", Test: testDailyCapUTC},
		{Name: "idempotency key", Test: testIdempotency},
		{Name: "refused create does not use up its key", Test: testRefusedKeepsKey},
		{Name: "concurrent creates with one key", Test: testConcurrentSameKey},
		{Name: "concurrent retries of the last create the cap allows", Test: testConcurrentSameKeyAtCap},
		{Name: "concurrent creates under the cap", Test: testConcurrentCap},
		{Name: "stress: racing creates with one key", Test: testStressCreate},
		{Name: "update compare-and-swap", Test: testUpdate},
		{Name: "a status change writes its event to the outbox", Test: testStatusEvents},
		{Name: "concurrent updates", Test: testConcurrentUpdate},
	})
}

const (
	agentA = "agent-a"
	agentB = "agent-b"
	noKey  = ""
	noCap  = 1000
)

// day1 is an arbitrary UTC day.
var day1 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *tasksstore.Store {
	return sqldbtest.OpenStore(t, db, tasksstore.Open)
}

// newTask is a pending task as the service builds it: times have
// millisecond precision and the id sorts by creation time.
func newTask(agent string, at time.Time) *tasksv1.Task {
	at = at.Truncate(time.Millisecond)
	return &tasksv1.Task{
		Id:          ids.NewAt("tsk", at),
		AgentId:     agent,
		Description: "do the thing at " + at.Format(time.RFC3339Nano),
		Status:      tasksv1.TaskStatus_TASK_STATUS_PENDING,
		Priority:    tasksv1.TaskPriority_TASK_PRIORITY_NORMAL,
		CreateTime:  timestamppb.New(at),
		UpdateTime:  timestamppb.New(at),
	}
}

// call is the idempotency key and request digest of a create of task with
// key, as the service makes them.
func call(task *tasksv1.Task, key string) idempotency.Call {
	return idempotency.Call{Key: key, Digest: idempotency.Digest(&tasksv1.CreateRequest{Description: task.GetDescription(), Priority: task.GetPriority()})}
}

// createTask is Store.Create of task as a call with key; it checks that
// created says whether the answer is task.
func createTask(ctx context.Context, s *tasksstore.Store, task *tasksv1.Task, key string, maxPerDay int) (*tasksv1.Task, error) {
	got, created, err := s.Create(ctx, task, call(task, key), maxPerDay)
	if err == nil && created != (got.GetId() == task.GetId()) {
		return nil, fmt.Errorf("Create says created %v, but answered task %s for task %s", created, got.GetId(), task.GetId())
	}
	return got, err
}

func create(t *testing.T, s *tasksstore.Store, task *tasksv1.Task, key string, maxPerDay int) *tasksv1.Task {
	t.Helper()
	got, err := createTask(t.Context(), s, task, key, maxPerDay)
	if err != nil {
		t.Fatalf("Create(%s, key %q, cap %d): %v", task.GetId(), key, maxPerDay, err)
	}
	return got
}

func testCreateGet(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	task := newTask(agentA, day1.Add(9*time.Hour+123*time.Millisecond))
	task.Description = "Résumé prüfen ✓ — 'quotes' and \"double quotes\""
	task.Priority = tasksv1.TaskPriority_TASK_PRIORITY_HIGH
	prototest.Equal(t, "Create returned", create(t, s, proto.Clone(task).(*tasksv1.Task), noKey, noCap), task)

	got, err := s.Get(t.Context(), agentA, task.GetId())
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "Get returned", got, task)

	_, err = s.Get(t.Context(), agentB, task.GetId())
	sqldbtest.WantErr(t, "another agent's Get", err, tasks.ErrNotFound)
	_, err = s.Get(t.Context(), agentA, ids.NewAt("tsk", day1))
	sqldbtest.WantErr(t, "Get of an unknown id", err, tasks.ErrNotFound)
}

func testReopen(t *testing.T, db *sqldb.DB) {
	task := newTask(agentA, day1)
	create(t, openStore(t, db), task, noKey, noCap)
	s := openStore(t, db) // migrations run again: a no-op
	got, err := s.Get(t.Context(), agentA, task.GetId())
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "Get after reopening", got, task)
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	// Five tasks a minute apart, created out of order; 1 and 3 running;
	// 0, 1 and 2 in project A, 4 in project B, 3 in none.
	projectA, projectB := ids.NewAt("prj", day1), ids.NewAt("prj", day1.Add(time.Second))
	var all [5]*tasksv1.Task
	for _, i := range []int{2, 0, 4, 1, 3} {
		task := newTask(agentA, day1.Add(time.Duration(i)*time.Minute))
		switch i {
		case 0, 1, 2:
			task.ProjectId = projectA
		case 4:
			task.ProjectId = projectB
		}
		all[i] = create(t, s, task, noKey, noCap)
	}
	for _, i := range []int{1, 3} {
		running := proto.Clone(all[i]).(*tasksv1.Task)
		running.Status = tasksv1.TaskStatus_TASK_STATUS_RUNNING
		running.UpdateTime = timestamppb.New(day1.Add(time.Hour))
		updated, err := s.Update(ctx, running, tasksv1.TaskStatus_TASK_STATUS_PENDING)
		if err != nil {
			t.Fatal(err)
		}
		all[i] = updated
	}
	theirs := []*tasksv1.Task{
		create(t, s, newTask(agentB, day1.Add(10*time.Second)), noKey, noCap),
		create(t, s, newTask(agentB, day1.Add(time.Hour)), noKey, noCap),
	}

	any, running := tasks.Filter{}, tasks.Filter{Status: tasksv1.TaskStatus_TASK_STATUS_RUNNING}
	inA, inB := tasks.Filter{ProjectID: projectA}, tasks.Filter{ProjectID: projectB}
	for _, tc := range []struct {
		agent         string
		filter        tasks.Filter
		offset, limit int
		want          []*tasksv1.Task
		total         int
	}{
		{agentA, any, 0, 50, []*tasksv1.Task{all[4], all[3], all[2], all[1], all[0]}, 5},
		{agentA, any, 1, 2, []*tasksv1.Task{all[3], all[2]}, 5},
		{agentA, any, 4, 2, []*tasksv1.Task{all[0]}, 5},
		{agentA, any, 5, 2, []*tasksv1.Task{}, 5},
		{agentA, running, 0, 50, []*tasksv1.Task{all[3], all[1]}, 2},
		{agentA, running, 1, 1, []*tasksv1.Task{all[1]}, 2},
		{agentA, tasks.Filter{Status: tasksv1.TaskStatus_TASK_STATUS_COMPLETED}, 0, 50, []*tasksv1.Task{}, 0},
		{agentA, inA, 0, 50, []*tasksv1.Task{all[2], all[1], all[0]}, 3},
		{agentA, inA, 1, 1, []*tasksv1.Task{all[1]}, 3},
		{agentA, inB, 0, 50, []*tasksv1.Task{all[4]}, 1},
		{agentA, tasks.Filter{Status: tasksv1.TaskStatus_TASK_STATUS_RUNNING, ProjectID: projectA}, 0, 50, []*tasksv1.Task{all[1]}, 1},
		{agentB, inA, 0, 50, []*tasksv1.Task{}, 0},
		{agentB, any, 0, 50, []*tasksv1.Task{theirs[1], theirs[0]}, 2},
		{"agent-without-tasks", any, 0, 50, []*tasksv1.Task{}, 0},
	} {
		what := fmt.Sprintf("List(%s, %+v, offset %d, limit %d)", tc.agent, tc.filter, tc.offset, tc.limit)
		got, total, err := s.List(ctx, tc.agent, tc.filter, tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: tasks (-want +got):\n%s", what, diff)
		}
		if total != tc.total {
			t.Errorf("%s: total = %d, want %d", what, total, tc.total)
		}
	}
}

func testDailyCap(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	const maxPerDay = 3
	for _, at := range []time.Duration{0, 12 * time.Hour, 24*time.Hour - time.Millisecond} {
		create(t, s, newTask(agentA, day1.Add(at)), noKey, maxPerDay)
	}
	refused := newTask(agentA, day1.Add(18*time.Hour))
	_, err := createTask(ctx, s, refused, noKey, maxPerDay)
	sqldbtest.WantErr(t, "create beyond the cap", err, tasks.ErrDailyCap)
	_, err = s.Get(ctx, agentA, refused.GetId())
	sqldbtest.WantErr(t, "Get of the refused task", err, tasks.ErrNotFound)
	if _, total, err := s.List(ctx, agentA, tasks.Filter{}, 0, 50); err != nil || total != maxPerDay {
		t.Errorf("List after a refused create: total = %d, %v; want %d", total, err, maxPerDay)
	}

	create(t, s, newTask(agentB, day1.Add(18*time.Hour)), noKey, maxPerDay) // another agent
	create(t, s, newTask(agentA, day1.Add(24*time.Hour)), noKey, maxPerDay) // the next UTC day
}

// The cap counts UTC days whatever the zone a creation time is given in.
func testDailyCapUTC(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	newYork := time.FixedZone("UTC-5", -5*3600)
	berlin := time.FixedZone("UTC+2", 2*3600)
	day2 := day1.Add(24 * time.Hour)

	create(t, s, newTask(agentA, day2.Add(30*time.Minute)), noKey, 1)
	// 20:00 on day 1 in New York is 01:00 on day 2 in UTC: over the cap.
	_, err := createTask(t.Context(), s, newTask(agentA, day2.Add(time.Hour).In(newYork)), noKey, 1)
	sqldbtest.WantErr(t, "create at 20:00 UTC-5 on the day before", err, tasks.ErrDailyCap)
	// 01:00 on day 2 in Berlin is 23:00 on day 1 in UTC: under it.
	create(t, s, newTask(agentA, day2.Add(-time.Hour).In(berlin)), noKey, 1)
}

func testIdempotency(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	first := newTask(agentA, day1)
	create(t, s, first, "key-1", noCap)

	// The same key with another request is refused and stores nothing.
	other := newTask(agentA, day1.Add(time.Second))
	other.Description = "a different description"
	got, err := createTask(ctx, s, other, "key-1", noCap)
	sqldbtest.WantErr(t, "the same key with another description", err, idempotency.ErrKeyReused)
	prototest.Equal(t, "the task holding the reused key", got, first)
	_, err = s.Get(ctx, agentA, other.GetId())
	sqldbtest.WantErr(t, "Get of the refused task", err, tasks.ErrNotFound)
	// The same key with the same request is a retry: the first task.
	retry := newTask(agentA, day1.Add(time.Second))
	retry.Description = first.GetDescription()
	prototest.Equal(t, "a second create with the same key", create(t, s, retry, "key-1", noCap), first)

	// The key is the agent's own: another agent's key-1 is a new task.
	theirs := newTask(agentB, day1.Add(time.Second))
	prototest.Equal(t, "another agent's create with the same key", create(t, s, theirs, "key-1", noCap), theirs)
	// Another key, or none, is a new task each time.
	for i, key := range []string{"key-2", noKey, noKey} {
		task := newTask(agentA, day1.Add(time.Duration(i+2)*time.Second))
		prototest.Equal(t, fmt.Sprintf("create with key %q", key), create(t, s, task, key, noCap), task)
	}
	// A retry once the cap is reached still answers with the first task.
	atCap := newTask(agentA, day1.Add(time.Minute))
	atCap.Description = first.GetDescription()
	prototest.Equal(t, "a retry at the cap", create(t, s, atCap, "key-1", 4), first)

	if _, total, err := s.List(ctx, agentA, tasks.Filter{}, 0, 50); err != nil || total != 4 {
		t.Errorf("agent A has %d tasks (%v), want 4", total, err)
	}
}

func testRefusedKeepsKey(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	create(t, s, newTask(agentA, day1), noKey, 1)
	_, err := createTask(t.Context(), s, newTask(agentA, day1.Add(time.Hour)), "late", 1)
	sqldbtest.WantErr(t, "create with a key beyond the cap", err, tasks.ErrDailyCap)
	next := newTask(agentA, day1.Add(24*time.Hour))
	prototest.Equal(t, "the same key on the next day", create(t, s, next, "late", 1), next)
}

// createConcurrently runs n creates for agentA at once: distinct tasks of
// one request.
func createConcurrently(t *testing.T, db *sqldb.DB, s *tasksstore.Store, n int, key string, maxPerDay int) ([]*tasksv1.Task, []error) {
	t.Helper()
	got, errs := make([]*tasksv1.Task, n), make([]error, n)
	sqldbtest.Race(t, db, n, func(i int) {
		task := newTask(agentA, day1.Add(time.Duration(i)*time.Millisecond))
		task.Description = "one request"
		got[i], errs[i] = createTask(t.Context(), s, task, key, maxPerDay)
	})
	return got, errs
}

func wantOneTask(t *testing.T, s *tasksstore.Store, got []*tasksv1.Task, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	list, total, err := s.List(t.Context(), agentA, tasks.Filter{}, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 {
		t.Fatalf("%d creates with one key stored %d tasks, want 1", len(got), total)
	}
	for i, task := range got {
		prototest.Equal(t, fmt.Sprintf("create %d returned", i), task, list[0])
	}
}

func testConcurrentSameKey(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	got, errs := createConcurrently(t, db, s, 20, "same-key", noCap)
	wantOneTask(t, s, got, errs)
}

// A client retrying while its first create is still in flight, on the last
// task the cap allows, gets that task, not a rate-limit error.
func testConcurrentSameKeyAtCap(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	got, errs := createConcurrently(t, db, s, 10, "same-key", 1)
	wantOneTask(t, s, got, errs)
}

func testConcurrentCap(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	const maxPerDay = 5
	got, errs := createConcurrently(t, db, s, 20, noKey, maxPerDay)
	var created []string
	for i, err := range errs {
		switch {
		case err == nil:
			created = append(created, got[i].GetId())
		case !errors.Is(err, tasks.ErrDailyCap):
			t.Errorf("create %d: %v, want success or ErrDailyCap", i, err)
		}
	}
	if len(created) != maxPerDay {
		t.Errorf("%d concurrent creates under a cap of %d: %d succeeded", len(errs), maxPerDay, len(created))
	}
	list, total, err := s.List(t.Context(), agentA, tasks.Filter{}, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if total != maxPerDay {
		t.Errorf("stored %d tasks, want %d", total, maxPerDay)
	}
	if diff := cmp.Diff(created, prototest.IDs(list), cmpSorted); diff != "" {
		t.Errorf("stored tasks are not the ones whose create succeeded (-created +stored):\n%s", diff)
	}
}

var cmpSorted = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func testUpdate(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	task := create(t, s, newTask(agentA, day1), noKey, noCap)
	pending, running := tasksv1.TaskStatus_TASK_STATUS_PENDING, tasksv1.TaskStatus_TASK_STATUS_RUNNING

	want := proto.Clone(task).(*tasksv1.Task)
	want.Status = running
	want.UpdateTime = timestamppb.New(day1.Add(time.Minute))
	got, err := s.Update(ctx, proto.Clone(want).(*tasksv1.Task), pending)
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "Update pending → running returned", got, want)

	// A writer that still believes the task is pending loses.
	stale := proto.Clone(task).(*tasksv1.Task)
	stale.Status = tasksv1.TaskStatus_TASK_STATUS_CANCELLED
	stale.CancelReason = "too late"
	_, err = s.Update(ctx, stale, pending)
	sqldbtest.WantErr(t, "Update from a stale status", err, tasks.ErrStale)

	done := proto.Clone(want).(*tasksv1.Task)
	done.Status = tasksv1.TaskStatus_TASK_STATUS_COMPLETED
	done.Result = "all done"
	done.UpdateTime = timestamppb.New(day1.Add(2 * time.Minute))
	if _, err := s.Update(ctx, proto.Clone(done).(*tasksv1.Task), running); err != nil {
		t.Fatal(err)
	}

	unknown := newTask(agentA, day1)
	unknown.Status = running
	_, err = s.Update(ctx, unknown, pending)
	sqldbtest.WantErr(t, "Update of an unknown id", err, tasks.ErrNotFound)

	// Another agent can neither change nor see the task.
	foreign := proto.Clone(done).(*tasksv1.Task)
	foreign.AgentId = agentB
	foreign.Status = tasksv1.TaskStatus_TASK_STATUS_FAILED
	_, err = s.Update(ctx, foreign, tasksv1.TaskStatus_TASK_STATUS_COMPLETED)
	sqldbtest.WantErr(t, "another agent's Update", err, tasks.ErrNotFound)
	_, err = s.Get(ctx, agentB, task.GetId())
	sqldbtest.WantErr(t, "another agent's Get", err, tasks.ErrNotFound)
	if list, total, err := s.List(ctx, agentB, tasks.Filter{}, 0, 50); err != nil || total != 0 || len(list) != 0 {
		t.Errorf("another agent's List = %v, total %d, %v; want nothing", prototest.IDs(list), total, err)
	}

	stored, err := s.Get(ctx, agentA, task.GetId())
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "stored task", stored, done)
}

func testConcurrentUpdate(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	task := create(t, s, newTask(agentA, day1), noKey, noCap)
	const writers = 10
	results, errs := make([]*tasksv1.Task, writers), make([]error, writers)
	sqldbtest.Race(t, db, writers, func(i int) {
		next := proto.Clone(task).(*tasksv1.Task)
		next.Status = tasksv1.TaskStatus_TASK_STATUS_RUNNING
		if i%2 == 1 {
			next.Status = tasksv1.TaskStatus_TASK_STATUS_CANCELLED
			next.CancelReason = fmt.Sprintf("writer %d", i)
		}
		results[i], errs[i] = s.Update(ctx, next, tasksv1.TaskStatus_TASK_STATUS_PENDING)
	})
	winner := sqldbtest.OneWinner(t, errs, tasks.ErrStale)
	stored, err := s.Get(ctx, agentA, task.GetId())
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "stored task", stored, results[winner])
}

func testStressCreate(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	stored := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		task := newTask(agentA, day1.Add(time.Duration(racer)*time.Millisecond))
		task.Description = fmt.Sprintf("request %d of round %d", variant, round)
		got, err := createTask(t.Context(), s, task, fmt.Sprintf("key-%d", round), noCap)
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		}
		return sqldbtest.Outcome{ID: got.GetId(), Created: got.GetId() == task.GetId()}
	})
	list, total, err := s.List(t.Context(), agentA, tasks.Filter{}, 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stored, prototest.IDs(list), cmpSorted); diff != "" || total != len(stored) {
		t.Errorf("stored tasks are not the ones answered (-answered +stored):\n%s", diff)
	}
}

func testStatusEvents(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	task := create(t, s, newTask(agentA, day1), noKey, noCap)
	running := proto.Clone(task).(*tasksv1.Task)
	running.Status, running.UpdateTime = tasksv1.TaskStatus_TASK_STATUS_RUNNING, timestamppb.New(day1.Add(time.Minute))
	if _, err := s.Update(ctx, running, tasksv1.TaskStatus_TASK_STATUS_PENDING); err != nil {
		t.Fatal(err)
	}
	// A stale update changes nothing and writes nothing.
	if _, err := s.Update(ctx, running, tasksv1.TaskStatus_TASK_STATUS_PENDING); !errors.Is(err, tasks.ErrStale) {
		t.Fatalf("stale update: %v", err)
	}
	occs, err := outbox.Pull(ctx, db, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(occs) != 1 {
		t.Fatalf("the outbox holds %d events, want 1", len(occs))
	}
	o := occs[0]
	var got tasksv1.WorkTaskStatusChanged
	if err := o.GetPayload().UnmarshalTo(&got); err != nil {
		t.Fatal(err)
	}
	want := &tasksv1.WorkTaskStatusChanged{TaskId: task.GetId(), AgentId: agentA, Status: tasksv1.TaskStatus_TASK_STATUS_RUNNING,
		PreviousStatus: tasksv1.TaskStatus_TASK_STATUS_PENDING, Task: running}
	prototest.Equal(t, "the event's payload", &got, want)
	if o.GetName() != tasks.EventStatusChanged || o.GetEventId() != outbox.ID(tasks.EventStatusChanged, task.GetId(), "TASK_STATUS_RUNNING") ||
		!o.GetTime().AsTime().Equal(day1.Add(time.Minute)) {
		t.Errorf("event %s %s at %s", o.GetName(), o.GetEventId(), o.GetTime().AsTime())
	}
}
