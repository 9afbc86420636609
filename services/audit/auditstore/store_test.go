package auditstore_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the audit store on each database engine.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "empty trail", Test: testEmpty},
		{Name: "append chains records", Test: testAppendChains},
		{Name: "reopen keeps the chain", Test: testReopen},
		{Name: "replay by call id", Test: testReplay},
		{Name: "a failed seal stores nothing", Test: testSealFails},
		{Name: "missing head", Test: testHeadMissing},
		{Name: "record past the head", Test: testChainConflict},
		{Name: "list filters and pages", Test: testList},
		{Name: "concurrent appends are serialised", Test: testConcurrentAppends},
		{Name: "concurrent replays of one call", Test: testConcurrentReplays},
		{Name: "walk reads one snapshot", Test: testWalkSnapshot},
		{Name: "walk stops when asked", Test: testWalkStops},
		{Name: "walk from a record", Test: testWalkFrom},
		{Name: "records are append-only", Test: testAppendOnly},
		{Name: "call outcomes are counted once and pruned", Test: testOutcomes},
		{Name: "a large batch of outcomes is stored in bulk, each once", Test: testOutcomesInBulk},
	})
}

// day1 is an arbitrary UTC day.
var day1 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *auditstore.Store {
	return sqldbtest.OpenStore(t, db, auditstore.Open)
}

// entry is what one admin call records; seal turns it into the record at a
// position of the chain, as the service does.
type entry struct {
	callID, actor, tool, reason string
	at                          time.Time
}

func call(i int) entry {
	return entry{
		callID: fmt.Sprintf("mcp-call-%03d", i),
		actor:  fmt.Sprintf("owner-%d", i%2),
		tool:   []string{"credits_grant", "agents_register"}[i%2],
		reason: fmt.Sprintf("reason %d: Grüße ✓ 'quoted' ?", i),
		at:     day1.Add(time.Duration(i) * time.Hour),
	}
}

func (e entry) seal(seq int64, prevHash string) (*auditv1.Record, error) {
	r := &auditv1.Record{
		Seq:        seq,
		Time:       timestamppb.New(e.at.Truncate(time.Millisecond)),
		Actor:      e.actor,
		Tool:       e.tool,
		Reason:     e.reason,
		ArgsDigest: "sha256:" + strings.Repeat("ab", 32),
		Outcome:    auditv1.Outcome_OUTCOME_SUCCEEDED,
		CallId:     e.callID,
		PrevHash:   prevHash,
	}
	return r, audit.Seal(r)
}

func appendEntry(t *testing.T, s *auditstore.Store, e entry) *auditv1.Record {
	t.Helper()
	r, replayed, err := s.Append(t.Context(), e.callID, e.seal)
	if err != nil {
		t.Fatalf("Append(%s): %v", e.callID, err)
	}
	if replayed {
		t.Fatalf("Append(%s) was a replay, want a new record", e.callID)
	}
	return r
}

// appendN appends calls 1..n and returns their records in chain order.
func appendN(t *testing.T, s *auditstore.Store, n int) []*auditv1.Record {
	t.Helper()
	out := make([]*auditv1.Record, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, appendEntry(t, s, call(i)))
	}
	return out
}

// walk returns the head and every record Walk hands out.
func walk(t *testing.T, s *auditstore.Store) (*auditv1.Checkpoint, []*auditv1.Record) {
	t.Helper()
	return walkFrom(t, s, 0)
}

// walkFrom returns the head and the records Walk hands out from seq from.
func walkFrom(t *testing.T, s *auditstore.Store, from int64) (*auditv1.Checkpoint, []*auditv1.Record) {
	t.Helper()
	var (
		head *auditv1.Checkpoint
		recs []*auditv1.Record
	)
	err := s.Walk(t.Context(), from, func(h *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error {
		head = h
		for r, err := range records {
			if err != nil {
				return err
			}
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	return head, recs
}

func wantChain(t *testing.T, what string, s *auditstore.Store, want []*auditv1.Record) {
	t.Helper()
	head, got := walk(t, s)
	wantHead := &auditv1.Checkpoint{Seq: 0, Hash: audit.GenesisHash}
	if n := len(want); n > 0 {
		wantHead = &auditv1.Checkpoint{Seq: want[n-1].GetSeq(), Hash: want[n-1].GetHash()}
	}
	if diff := cmp.Diff(wantHead, head, protocmp.Transform()); diff != "" {
		t.Errorf("%s: head (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s: records (-want +got):\n%s", what, diff)
	}
}

func testEmpty(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	wantChain(t, "an empty trail", s, nil)
	list, total, err := s.List(t.Context(), audit.Filter{}, 0, 50)
	if err != nil || len(list) != 0 || total != 0 {
		t.Errorf("List of an empty trail = %d records, total %d, %v; want none", len(list), total, err)
	}
}

func testAppendChains(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	var (
		recs []*auditv1.Record
		prev = audit.GenesisHash
	)
	for i := 1; i <= 4; i++ {
		e := call(i)
		var gotSeq int64
		var gotPrev string
		r, replayed, err := s.Append(t.Context(), e.callID, func(seq int64, prevHash string) (*auditv1.Record, error) {
			gotSeq, gotPrev = seq, prevHash
			return e.seal(seq, prevHash)
		})
		if err != nil || replayed {
			t.Fatalf("Append(%s) = replayed %v, %v", e.callID, replayed, err)
		}
		if gotSeq != int64(i) || gotPrev != prev {
			t.Errorf("append %d was sealed at seq %d after %s, want seq %d after %s", i, gotSeq, gotPrev, i, prev)
		}
		want, _ := e.seal(int64(i), prev)
		if diff := cmp.Diff(want, r, protocmp.Transform()); diff != "" {
			t.Errorf("Append %d returned (-want +got):\n%s", i, diff)
		}
		recs = append(recs, r)
		prev = r.GetHash()
	}
	wantChain(t, "after 4 appends", s, recs)
}

func testReopen(t *testing.T, db *sqldb.DB) {
	recs := appendN(t, openStore(t, db), 3)
	s := openStore(t, db) // migrations run again: the head is not reset
	wantChain(t, "after reopening", s, recs)
	next := appendEntry(t, s, call(4))
	if next.GetSeq() != 4 || next.GetPrevHash() != recs[2].GetHash() {
		t.Errorf("the append after reopening = seq %d after %s, want seq 4 after record 3", next.GetSeq(), next.GetPrevHash())
	}
}

func testReplay(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := appendEntry(t, s, call(1))

	// The same call again is answered with its record; seal is not asked.
	again := call(1)
	again.reason = "other contents"
	r, replayed, err := s.Append(t.Context(), again.callID, func(int64, string) (*auditv1.Record, error) {
		t.Error("a replayed call was sealed again")
		return again.seal(2, first.GetHash())
	})
	if err != nil || !replayed {
		t.Fatalf("Append of a recorded call = replayed %v, %v; want replayed", replayed, err)
	}
	if diff := cmp.Diff(first, r, protocmp.Transform()); diff != "" {
		t.Errorf("a replay returned (-want +got):\n%s", diff)
	}
	// The replay used up no position.
	second := appendEntry(t, s, call(2))
	if second.GetSeq() != 2 || second.GetPrevHash() != first.GetHash() {
		t.Errorf("the append after a replay = seq %d after %s, want seq 2 after record 1", second.GetSeq(), second.GetPrevHash())
	}
	wantChain(t, "after a replay", s, []*auditv1.Record{first, second})
}

func testSealFails(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := appendEntry(t, s, call(1))
	boom := errors.New("clock broke")
	_, _, err := s.Append(t.Context(), call(2).callID, func(int64, string) (*auditv1.Record, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Errorf("Append with a failing seal: err = %v, want %v", err, boom)
	}
	wantChain(t, "after a failed seal", s, []*auditv1.Record{first})
	// The call was not recorded, so it can still be.
	if r := appendEntry(t, s, call(2)); r.GetSeq() != 2 {
		t.Errorf("the call after a failed seal got seq %d, want 2", r.GetSeq())
	}
}

func exec(t *testing.T, db *sqldb.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func testHeadMissing(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	recs := appendN(t, s, 2)
	exec(t, db, `DELETE FROM audit_head`)
	_, _, err := s.Append(t.Context(), call(3).callID, call(3).seal)
	if !errors.Is(err, audit.ErrHeadMissing) {
		t.Errorf("Append without a head: err = %v, want %v", err, audit.ErrHeadMissing)
	}
	head, got := walk(t, s)
	if head != nil {
		t.Errorf("Walk without a head gave head %v, want nil", head)
	}
	if diff := cmp.Diff(recs, got, protocmp.Transform()); diff != "" {
		t.Errorf("records after a refused append (-want +got):\n%s", diff)
	}
}

func testChainConflict(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	recs := appendN(t, s, 2)
	// Someone wrote record 3 behind the store's back; the head still says 2.
	forged, _ := call(99).seal(3, recs[1].GetHash())
	exec(t, db, `INSERT INTO audit_records (seq, time_ms, actor, tool, reason, args_digest, outcome, call_id, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		forged.GetSeq(), forged.GetTime().AsTime().UnixMilli(), forged.GetActor(), forged.GetTool(), forged.GetReason(), forged.GetArgsDigest(),
		int32(forged.GetOutcome()), forged.GetCallId(), forged.GetPrevHash(), forged.GetHash())
	_, _, err := s.Append(t.Context(), call(3).callID, call(3).seal)
	if !errors.Is(err, audit.ErrChainConflict) {
		t.Errorf("Append onto a record past the head: err = %v, want %v", err, audit.ErrChainConflict)
	}
	head, got := walk(t, s)
	if head.GetSeq() != 2 || head.GetHash() != recs[1].GetHash() {
		t.Errorf("head after a refused append = %v, want record 2", head)
	}
	if len(got) != 3 || got[2].GetCallId() != forged.GetCallId() {
		t.Errorf("records after a refused append = %d, the last %s; want the two appended and the forged one", len(got), got[len(got)-1].GetCallId())
	}
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	// Records 1..6, one hour apart; odd ones by owner-1 with
	// agents_register, even ones by owner-0 with credits_grant.
	recs := appendN(t, s, 6)
	rec := func(seqs ...int) []*auditv1.Record {
		out := make([]*auditv1.Record, 0, len(seqs))
		for _, seq := range seqs {
			out = append(out, recs[seq-1])
		}
		return out
	}
	at := func(h int) time.Time { return day1.Add(time.Duration(h) * time.Hour) }
	for _, tc := range []struct {
		name          string
		f             audit.Filter
		offset, limit int
		want          []*auditv1.Record
		total         int
	}{
		{"everything, newest first", audit.Filter{}, 0, 50, rec(6, 5, 4, 3, 2, 1), 6},
		{"first page", audit.Filter{}, 0, 2, rec(6, 5), 6},
		{"middle page", audit.Filter{}, 2, 2, rec(4, 3), 6},
		{"past the end", audit.Filter{}, 6, 2, nil, 6},
		{"by actor", audit.Filter{Actor: "owner-1"}, 0, 50, rec(5, 3, 1), 3},
		{"by actor, second page", audit.Filter{Actor: "owner-1"}, 1, 1, rec(3), 3},
		{"by tool", audit.Filter{Tool: "credits_grant"}, 0, 50, rec(6, 4, 2), 3},
		{"since is inclusive, until exclusive", audit.Filter{Since: at(2), Until: at(5)}, 0, 50, rec(4, 3, 2), 3},
		{"until a millisecond after", audit.Filter{Until: at(2).Add(time.Millisecond)}, 0, 50, rec(2, 1), 2},
		{"since in another zone", audit.Filter{Since: at(5).In(time.FixedZone("UTC-5", -5*3600))}, 0, 50, rec(6, 5), 2},
		{"all filters together", audit.Filter{Actor: "owner-0", Tool: "credits_grant", Since: at(3)}, 0, 50, rec(6, 4), 2},
		{"unknown actor", audit.Filter{Actor: "nobody"}, 0, 50, nil, 0},
		{"actor in another case", audit.Filter{Actor: "OWNER-1"}, 0, 50, nil, 0},
	} {
		got, total, err := s.List(ctx, tc.f, tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: records (-want +got):\n%s", tc.name, diff)
		}
		if total != tc.total {
			t.Errorf("%s: total = %d, want %d", tc.name, total, tc.total)
		}
	}
}

// Appends hold the chain's lock from reading the head to writing the
// record: no two seals ever run at once, each record follows the one
// before, and no position is used twice.
func testConcurrentAppends(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	const writers, each = 8, 8
	sqldbtest.WarmPool(t, db, writers)
	var (
		sealing, overlaps atomic.Int32
		wg                sync.WaitGroup
		errs              = make(chan error, writers*each)
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := call(1 + w*each + i)
				_, replayed, err := s.Append(t.Context(), e.callID, func(seq int64, prevHash string) (*auditv1.Record, error) {
					if sealing.Add(1) > 1 {
						overlaps.Add(1)
					}
					defer sealing.Add(-1)
					time.Sleep(100 * time.Microsecond) // widen the window a second sealer would use
					return e.seal(seq, prevHash)
				})
				if err == nil && replayed {
					err = fmt.Errorf("append %s was a replay", e.callID)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent append: %v", err)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d seals ran while another append held the chain", n)
	}
	head, recs := walk(t, s)
	if len(recs) != writers*each || head.GetSeq() != writers*each {
		t.Fatalf("after %d concurrent appends: %d records, head %v", writers*each, len(recs), head)
	}
	prev, calls := audit.GenesisHash, map[string]bool{}
	for i, r := range recs {
		if r.GetSeq() != int64(i+1) || r.GetPrevHash() != prev {
			t.Fatalf("record %d = seq %d after %s, want seq %d after %s: the chain forked or has a gap", i+1, r.GetSeq(), r.GetPrevHash(), i+1, prev)
		}
		prev = r.GetHash()
		calls[r.GetCallId()] = true
	}
	if head.GetHash() != prev {
		t.Errorf("head hash %s, want the last record's %s", head.GetHash(), prev)
	}
	if len(calls) != writers*each {
		t.Errorf("%d distinct calls recorded, want %d", len(calls), writers*each)
	}
}

func testConcurrentReplays(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := appendEntry(t, s, call(1))
	const n = 12
	got, replays, errs := make([]*auditv1.Record, n), make([]bool, n), make([]error, n)
	sqldbtest.Race(t, db, n, func(i int) {
		got[i], replays[i], errs[i] = s.Append(t.Context(), call(2).callID, call(2).seal)
	})
	head, recs := walk(t, s)
	if len(recs) != 2 || head.GetSeq() != 2 {
		t.Fatalf("%d concurrent appends of one call: %d records, head %v; want 2 and record 2", n, len(recs), head)
	}
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("append %d: %v", i, errs[i])
			continue
		}
		if !replays[i] {
			fresh++
		}
		if diff := cmp.Diff(recs[1], got[i], protocmp.Transform()); diff != "" {
			t.Errorf("append %d returned (-want +got):\n%s", i, diff)
		}
	}
	if fresh != 1 {
		t.Errorf("%d appends of one call reported a new record, want 1 (the rest replays)", fresh)
	}
	if recs[1].GetPrevHash() != first.GetHash() {
		t.Errorf("record 2 follows %s, want record 1", recs[1].GetPrevHash())
	}
}

// Records appended while a walk is under way are not in it: the walk's head
// and records come from one snapshot, so a verify never sees a record past
// the head it read.
func testWalkSnapshot(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	recs := appendN(t, s, 3)
	var (
		head *auditv1.Checkpoint
		seen []*auditv1.Record
	)
	err := s.Walk(t.Context(), 0, func(h *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error {
		head = h
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, _, err := s.Append(ctx, call(4).callID, call(4).seal); err != nil {
			return fmt.Errorf("append during the walk: %w", err)
		}
		for r, err := range records {
			if err != nil {
				return err
			}
			seen = append(seen, r)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if head.GetSeq() != 3 {
		t.Errorf("head = %v, want record 3", head)
	}
	if diff := cmp.Diff(recs, seen, protocmp.Transform()); diff != "" {
		t.Errorf("records of a walk during an append (-want +got):\n%s", diff)
	}
	if head, all := walk(t, s); head.GetSeq() != 4 || len(all) != 4 {
		t.Errorf("the next walk = head %v, %d records; want the append it missed", head, len(all))
	}
}

func testWalkStops(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	appendN(t, s, 5)
	stop := errors.New("seen enough")
	var seen []int64
	err := s.Walk(t.Context(), 0, func(_ *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error {
		for r, err := range records {
			if err != nil {
				return err
			}
			if seen = append(seen, r.GetSeq()); len(seen) == 2 {
				break
			}
		}
		return stop
	})
	if !errors.Is(err, stop) {
		t.Errorf("Walk = %v, want visit's error %v", err, stop)
	}
	if diff := cmp.Diff([]int64{1, 2}, seen); diff != "" {
		t.Errorf("records seen before stopping (-want +got):\n%s", diff)
	}
	// The store is still usable: the walk let go of its connection.
	appendEntry(t, s, call(6))
}

// A walk from a sequence number hands out that record and the ones after
// it, with the head; the signer of checkpoints reads only what is new.
func testWalkFrom(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	recs := appendN(t, s, 5)
	for _, tc := range []struct {
		from int64
		want []*auditv1.Record
	}{{0, recs}, {1, recs}, {4, recs[3:]}, {5, recs[4:]}, {6, nil}} {
		head, got := walkFrom(t, s, tc.from)
		if head.GetSeq() != 5 || head.GetHash() != recs[4].GetHash() {
			t.Errorf("walk from %d: head %v, want record 5", tc.from, head)
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("walk from %d: records (-want +got):\n%s", tc.from, diff)
		}
	}
}

// The database itself refuses to change or remove a record, whoever asks.
func testAppendOnly(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	recs := appendN(t, s, 3)
	refused := []string{
		`UPDATE audit_records SET reason = 'nothing to see' WHERE seq = 2`,
		`UPDATE audit_records SET seq = seq + 10`,
		`DELETE FROM audit_records WHERE seq = 3`,
		`DELETE FROM audit_records`,
	}
	if db.Dialect == sqldb.Postgres {
		refused = append(refused, `TRUNCATE audit_records`)
	}
	for _, q := range refused {
		_, err := db.ExecContext(t.Context(), q)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want the append-only guard to refuse it", q, err)
		}
	}
	wantChain(t, "after refused edits", s, recs)
	// Appending is still allowed.
	appendEntry(t, s, call(4))
}
