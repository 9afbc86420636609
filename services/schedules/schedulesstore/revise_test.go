package schedulesstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulesstore"
)

// change is the next revision of from as the service builds it: a new
// description, pending approval, no spec hash, no decision.
func change(from *schedulesv1.Schedule, description string, at time.Time) *schedulesv1.Schedule {
	next := proto.Clone(from).(*schedulesv1.Schedule)
	next.Description = description
	next.Cron, next.IntervalSeconds = "", 900
	next.Depth = from.GetDepth() + 1
	next.Status = pending
	next.SpecHash = ""
	next.Decision = nil
	next.PausedBy = ""
	next.Revision = from.GetRevision() + 1
	next.UpdateTime = timestamppb.New(at.Truncate(time.Millisecond))
	return next
}

// revise is Store.Revise of next as agent-a's call with key, with the
// request digest the service makes.
func revise(t *testing.T, s *schedulesstore.Store, next, from *schedulesv1.Schedule, key string) (*schedulesv1.Schedule, int32, bool, error) {
	req := &schedulesv1.UpdateRequest{ScheduleId: next.GetId(), Description: proto.String(next.GetDescription()), IntervalSeconds: next.GetIntervalSeconds()}
	return s.Revise(t.Context(), next, from, agentA, idempotency.Call{Key: key, Digest: idempotency.Digest(req)})
}

// approve records an approval of sch under hash, as the service does.
func approve(t *testing.T, s *schedulesstore.Store, sch *schedulesv1.Schedule, hash string) *schedulesv1.Schedule {
	t.Helper()
	asked := proto.Clone(sch).(*schedulesv1.Schedule)
	asked.SpecHash, asked.ApprovalWorkflowId = hash, "schedule-approval/"+sch.GetId()+"/"+hash
	got, err := s.Update(t.Context(), asked, sch)
	if err != nil {
		t.Fatal(err)
	}
	approved := proto.Clone(got).(*schedulesv1.Schedule)
	approved.Status = active
	approved.Decision = &schedulesv1.Decision{DecidedBy: "owner", DecideTime: timestamppb.New(day1.Add(time.Minute))}
	if got, err = s.Update(t.Context(), approved, got); err != nil {
		t.Fatal(err)
	}
	return got
}

func testRevise(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	sch := approve(t, s, create(t, s, newSchedule(t, agentA, day1), noKey), "0123456789abcdef0123456789abcdef")

	// A change takes the schedule back to pending approval with its new
	// spec, and forgets the decision.
	next := change(sch, "every quarter hour", day1.Add(time.Hour))
	got, rev, created, err := revise(t, s, next, sch, "k1")
	if err != nil || !created || rev != 1 {
		t.Fatalf("Revise = revision %d, created %v, %v; want revision 1 created", rev, created, err)
	}
	want(t, "the changed schedule", got, next)

	// The same key and request again changes nothing and names the
	// revision it made; another request with the key is refused.
	again := change(got, "every quarter hour", day1.Add(2*time.Hour))
	if got2, rev, created, err := revise(t, s, again, got, "k1"); err != nil || created || rev != 1 || got2.GetRevision() != 1 {
		t.Errorf("Revise retried = revision %d (stored %d), created %v, %v; want revision 1 as stored, not created", rev, got2.GetRevision(), created, err)
	}
	other := change(got, "something else", day1.Add(2*time.Hour))
	_, _, _, err = revise(t, s, other, got, "k1")
	sqldbtest.WantErr(t, "Revise with a used key and another request", err, idempotency.ErrKeyReused)

	// A change from a state the schedule left (an old revision, another
	// spec hash) is stale and changes nothing; its key stays unused.
	_, _, _, err = revise(t, s, change(sch, "from the approved revision", day1.Add(3*time.Hour)), sch, "k2")
	sqldbtest.WantErr(t, "Revise from an old revision", err, schedules.ErrStale)
	hashed := proto.Clone(got).(*schedulesv1.Schedule)
	hashed.SpecHash = "ffffffffffffffffffffffffffffffff"
	_, _, _, err = revise(t, s, change(hashed, "from another hash", day1.Add(3*time.Hour)), hashed, "k2")
	sqldbtest.WantErr(t, "Revise from another spec hash", err, schedules.ErrStale)
	if now, _ := s.Get(t.Context(), sch.GetId()); now.GetRevision() != 1 || now.GetDescription() != "every quarter hour" {
		t.Errorf("after stale changes the schedule is %v", now)
	}
	if _, rev, created, err := revise(t, s, change(got, "second change", day1.Add(4*time.Hour)), got, "k2"); err != nil || !created || rev != 2 {
		t.Errorf("Revise with the key a stale change left unused = revision %d, created %v, %v; want revision 2", rev, created, err)
	}

	// An approval recorded from the state before a change is stale.
	cur, _ := s.Get(t.Context(), sch.GetId())
	late := proto.Clone(sch).(*schedulesv1.Schedule)
	late.Status = active
	_, err = s.Update(t.Context(), late, sch)
	sqldbtest.WantErr(t, "an approval of the schedule before its changes", err, schedules.ErrStale)
	if now, _ := s.Get(t.Context(), sch.GetId()); now.GetStatus() != pending || now.GetRevision() != cur.GetRevision() {
		t.Errorf("after a stale approval the schedule is %v, %d; want pending at revision %d", now.GetStatus(), now.GetRevision(), cur.GetRevision())
	}

	// Two changes from one state with different keys: one is made, the
	// other is stale.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, _, _, errs[i] = revise(t, s, change(cur, fmt.Sprintf("racer %d", i), day1.Add(5*time.Hour)), cur, fmt.Sprintf("race-%d", i))
		})
	}
	wg.Wait()
	made, stale := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, schedules.ErrStale):
			stale++
		default:
			t.Errorf("racing change: %v", err)
		}
	}
	if made != 1 || stale != 1 {
		t.Errorf("two racing changes: %d made, %d stale; want one of each", made, stale)
	}
}

// testStressRevise races changes of one schedule with one key per round:
// one change is made per round, every racer with its request gets its
// revision, and the others are refused.
func testStressRevise(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	sch := create(t, s, newSchedule(t, agentA, day1), noKey)
	var mu sync.Mutex
	from, round0 := sch, -1
	answered := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		mu.Lock()
		if round != round0 { // the first racer of a round reads the stored state
			cur, err := s.Get(t.Context(), sch.GetId())
			if err != nil {
				mu.Unlock()
				return sqldbtest.Outcome{Err: err}
			}
			from, round0 = cur, round
		}
		base := from
		mu.Unlock()
		next := change(base, fmt.Sprintf("round %d, request %d", round, variant), day1.Add(time.Duration(round)*time.Minute))
		_, rev, created, err := revise(t, s, next, base, fmt.Sprintf("key-%d", round))
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		}
		return sqldbtest.Outcome{ID: strconv.Itoa(int(rev)), Created: created}
	})
	got, err := s.Get(t.Context(), sch.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if int(got.GetRevision()) != len(answered) || answered[len(answered)-1] != strconv.Itoa(len(answered)) {
		t.Errorf("after %d rounds the schedule is at revision %d, the rounds made %v", len(answered), got.GetRevision(), answered)
	}
}
