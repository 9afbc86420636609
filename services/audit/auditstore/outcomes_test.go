package auditstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
)

func outcome(id, agent, tool, code string, at time.Time) *auditv1.CallOutcome {
	return &auditv1.CallOutcome{Id: id, Time: timestamppb.New(at), Agent: agent, Subject: agent, Tool: tool, DomainCode: code, DurationMs: 12}
}

// testOutcomes: a retried batch counts once; calls that achieved something
// are counted apart by what they achieved; a summary names the position
// it counted through, and asking again at that position gives the same
// counts after more outcomes arrive; the retention removes by age, then
// all but the newest.
func testOutcomes(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	ctx := t.Context()
	var batch []*auditv1.CallOutcome
	for i := range 6 {
		code := "ok"
		if i == 0 {
			code = "invalid_argument"
		}
		batch = append(batch, outcome(fmt.Sprintf("out_a%d", i), "alice", "tasks_create", code, day1.Add(time.Duration(i)*time.Hour)))
	}
	batch[4].Accomplishment, batch[5].Accomplishment = "task_completed", "task_completed"
	batch = append(batch, outcome("out_b0", "bob", "tasks_create", "ok", day1), outcome("out_a9", "alice", "memory_save", "ok", day1.Add(25*time.Hour)))
	if n, err := s.RecordOutcomes(ctx, batch); err != nil || n != 8 {
		t.Fatalf("record 8 outcomes: %d, %v", n, err)
	}
	if n, err := s.RecordOutcomes(ctx, batch[:3]); err != nil || n != 0 {
		t.Fatalf("record the same batch again: %d new, %v; want 0", n, err)
	}
	want := &auditv1.SummarizeOutcomesResponse{Through: 8, ActiveDays: 2, Counts: []*auditv1.OutcomeCount{
		{Tool: "memory_save", DomainCode: "ok", Count: 1},
		{Tool: "tasks_create", DomainCode: "invalid_argument", Count: 1},
		{Tool: "tasks_create", DomainCode: "ok", Count: 3},
		{Tool: "tasks_create", DomainCode: "ok", Accomplishment: "task_completed", Count: 2},
	}}
	got, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("alice's outcomes (-want +got):\n%s", diff)
	}
	// More outcomes later; the summary through 8 stands.
	if _, err := s.RecordOutcomes(ctx, []*auditv1.CallOutcome{outcome("out_a10", "alice", "tasks_create", "ok", day1.Add(2*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if again, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "alice", Through: 8}); err != nil || !cmp.Equal(want, again, protocmp.Transform()) {
		t.Errorf("alice's outcomes through 8 again = %v, %v; want %v", again, err, want)
	}
	// A window: the first day only.
	day, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "alice", Since: day1, Until: day1.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range day.GetCounts() {
		n += c.GetCount()
	}
	if n != 7 || day.GetActiveDays() != 1 || day.GetThrough() <= 8 {
		t.Errorf("alice's first day = %v, want 7 outcomes on 1 day, through the newest", day)
	}
	// Retention: older than day1+3h goes (out_a0..a2, out_a10, out_b0),
	// then all but the newest 3 (out_a3 goes).
	removed, err := s.PruneOutcomes(ctx, day1.Add(3*time.Hour), 3)
	if err != nil || removed != 6 {
		t.Fatalf("prune = %d, %v; want 6 removed", removed, err)
	}
	left, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	n = 0
	for _, c := range left.GetCounts() {
		n += c.GetCount()
	}
	if n != 3 {
		t.Errorf("alice's outcomes after the prune = %v, want the newest 3", left)
	}
}

// testOutcomesInBulk: a batch larger than one statement inserts, which
// repeats outcomes stored before and within itself, stores every new
// outcome once, and every field of the last one as sent.
func testOutcomesInBulk(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	ctx := t.Context()
	var first []*auditv1.CallOutcome
	for i := range 100 {
		first = append(first, outcome(fmt.Sprintf("out_%04d", i), "alice", "tasks_get", "ok", day1.Add(time.Duration(i)*time.Second)))
	}
	if n, err := s.RecordOutcomes(ctx, first); err != nil || n != 100 {
		t.Fatalf("record 100 outcomes: %d, %v", n, err)
	}
	// 600 outcomes: the first 100 stored already, 50 sent twice within
	// the batch, 450 new.
	var batch []*auditv1.CallOutcome
	for i := range 550 {
		batch = append(batch, outcome(fmt.Sprintf("out_%04d", i), "alice", "tasks_get", "ok", day1.Add(time.Duration(i)*time.Second)))
	}
	batch = append(batch, batch[300:350]...)
	last := outcome("out_9999", "bob", "memory_save", "invalid_argument", day1.Add(time.Hour))
	last.Accomplishment = "memory_saved"
	batch = append(batch, last)
	if n, err := s.RecordOutcomes(ctx, batch); err != nil || n != 451 {
		t.Fatalf("record a batch of %d with 100 stored and 50 repeated: %d new, %v; want 451", len(batch), n, err)
	}
	alice, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	// Through is a position, not a count: a skipped outcome may use one.
	ignoreThrough := protocmp.IgnoreFields(&auditv1.SummarizeOutcomesResponse{}, "through")
	want := &auditv1.SummarizeOutcomesResponse{ActiveDays: 1, Counts: []*auditv1.OutcomeCount{{Tool: "tasks_get", DomainCode: "ok", Count: 550}}}
	if diff := cmp.Diff(want, alice, protocmp.Transform(), ignoreThrough); diff != "" {
		t.Errorf("alice's outcomes (-want +got):\n%s", diff)
	}
	bob, err := s.SummarizeOutcomes(ctx, audit.OutcomeFilter{Agent: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	want = &auditv1.SummarizeOutcomesResponse{ActiveDays: 1, Counts: []*auditv1.OutcomeCount{{Tool: "memory_save", DomainCode: "invalid_argument", Accomplishment: "memory_saved", Count: 1}}}
	if diff := cmp.Diff(want, bob, protocmp.Transform(), ignoreThrough); diff != "" {
		t.Errorf("bob's outcomes (-want +got):\n%s", diff)
	}
}
