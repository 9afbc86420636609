package creditsstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the credits store on each database engine.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "apply, refuse overdraft, dedupe references", Test: testApply},
		{Name: "concurrent changes keep the exact balance", Test: testConcurrentChanges},
		{Name: "concurrent retries of one grant apply it once", Test: testConcurrentGrantRetries},
		{Name: "ledger pages newest first, per wallet", Test: testLedgerPages},
		{Name: "references: retries answer, reuses and refusals record nothing", Test: testReferences},
		{Name: "concurrent retries of one spend apply it once", Test: testConcurrentSpendRetries},
		{Name: "concurrent settings report what they replaced", Test: testConcurrentSettings},
		{Name: "settings", Test: testSettings},
		{Name: "idempotency keys: retries answer, reuses are refused", Test: testIdempotencyKeys},
		{Name: "stress: racing grants of one reference", Test: testStressGrants},
		{Name: "stress: racing spends of one reference", Test: testStressSpends},
		{Name: "stress: racing grants with one idempotency key", Test: testStressKeyedGrants},
	})
}

func openStore(t *testing.T, db *sqldb.DB) *creditsstore.Store {
	return sqldbtest.OpenStore(t, db, creditsstore.Open)
}

func entry(kind creditsv1.EntryKind, wallet string, amount int64, ref string) *creditsv1.LedgerEntry {
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	return &creditsv1.LedgerEntry{Id: ids.NewAt("led", now), Wallet: wallet, Kind: kind, Amount: amount,
		Reference: ref, Actor: "test", CreateTime: timestamppb.New(now)}
}

func grant(wallet string, amount int64, ref string) *creditsv1.LedgerEntry {
	return entry(creditsv1.EntryKind_ENTRY_KIND_GRANT, wallet, amount, ref)
}

func spend(wallet string, amount int64, ref string) *creditsv1.LedgerEntry {
	return entry(creditsv1.EntryKind_ENTRY_KIND_SPEND, wallet, -amount, ref)
}

// request is the request that makes e, as the service digests it.
func request(e *creditsv1.LedgerEntry) proto.Message {
	if e.GetKind() == creditsv1.EntryKind_ENTRY_KIND_GRANT {
		return &creditsv1.GrantRequest{Wallet: e.GetWallet(), Amount: e.GetAmount(), Reference: e.GetReference(), Note: e.GetNote()}
	}
	return &creditsv1.SpendRequest{Amount: -e.GetAmount(), Reference: e.GetReference(), Note: e.GetNote()}
}

// apply applies e as a call without an idempotency key.
func apply(ctx context.Context, st *creditsstore.Store, e *creditsv1.LedgerEntry) (*creditsv1.LedgerEntry, error) {
	return applyKeyed(ctx, st, e, "")
}

// applyKeyed applies e as a call with idempotency key key.
func applyKeyed(ctx context.Context, st *creditsstore.Store, e *creditsv1.LedgerEntry, key string) (*creditsv1.LedgerEntry, error) {
	got, err := st.Apply(ctx, e, idempotency.Call{Key: key, Digest: idempotency.Digest(request(e))}, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if got.Replayed == (got.Entry.GetId() == e.GetId()) {
		return nil, fmt.Errorf("Apply says replayed %v, but answered entry %s for entry %s", got.Replayed, got.Entry.GetId(), e.GetId())
	}
	return got.Entry, nil
}

func balance(t *testing.T, st *creditsstore.Store, wallet string) int64 {
	t.Helper()
	b, err := st.Balance(t.Context(), wallet)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func refs(list []*creditsv1.LedgerEntry) []string {
	out := []string{}
	for _, e := range list {
		out = append(out, e.GetReference())
	}
	return out
}

func testApply(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	g, err := apply(ctx, st, grant("a", 100, "inv-1"))
	if err != nil || g.GetBalanceAfter() != 100 {
		t.Fatalf("grant = %v, %v; want balance_after 100", g, err)
	}
	again, err := apply(ctx, st, grant("a", 100, "inv-1"))
	if err != nil || !proto.Equal(again, g) {
		t.Errorf("repeated grant = %v, %v; want the first entry", again, err)
	}
	var reused *credits.ReusedError
	if _, err := apply(ctx, st, grant("b", 100, "inv-1")); !errors.As(err, &reused) || reused.First.GetId() != g.GetId() {
		t.Errorf("grant reference reused for another wallet: %v, want ReusedError with the first entry", err)
	}
	var short *credits.InsufficientError
	if _, err := apply(ctx, st, spend("a", 101, "job")); !errors.As(err, &short) || short.Balance != 100 {
		t.Errorf("overdraft: %v, want InsufficientError with balance 100", err)
	}
	if _, err := apply(ctx, st, spend("nobody", 1, "job")); !errors.As(err, &short) || short.Balance != 0 {
		t.Errorf("spend from a new wallet: %v, want InsufficientError with balance 0", err)
	}
	s, err := apply(ctx, st, spend("a", 100, "job"))
	if err != nil || s.GetBalanceAfter() != 0 {
		t.Errorf("spend of the whole balance = %v, %v; want balance_after 0", s, err)
	}
	if _, err := apply(ctx, st, spend("b", 1, "job")); !errors.As(err, &short) {
		t.Errorf("spend reference of another wallet is not shared, so this is an overdraft: %v", err)
	}
	if _, err := apply(ctx, st, grant("big", math.MaxInt64, "max")); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(ctx, st, grant("big", 1, "over")); !errors.Is(err, credits.ErrBalanceLimit) {
		t.Errorf("grant past the largest balance: %v, want ErrBalanceLimit", err)
	}
	list, total, err := st.Ledger(ctx, "a", 0, 10)
	if err != nil || total != 2 || list[0].GetReference() != "job" || list[1].GetReference() != "inv-1" {
		t.Errorf("ledger = %v (total %d, %v), want [job inv-1]", list, total, err)
	}
	if b := balance(t, st, "a"); b != 0 {
		t.Errorf("balance = %d, want 0", b)
	}
}

func testConcurrentChanges(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	if _, err := apply(ctx, st, grant("c", 500, "seed")); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 100)
	sqldbtest.Race(t, db, 100, func(i int) {
		_, err := apply(ctx, st, spend("c", 10, fmt.Sprintf("s-%d", i)))
		results <- err
	})
	close(results)
	won := 0
	for err := range results {
		var short *credits.InsufficientError
		switch {
		case err == nil:
			won++
		case !errors.As(err, &short):
			t.Errorf("concurrent spend: %v", err)
		}
	}
	if won != 50 || balance(t, st, "c") != 0 {
		t.Errorf("100 spends of 10 on 500: %d won, balance %d; want 50 and 0", won, balance(t, st, "c"))
	}
}

func testConcurrentGrantRetries(t *testing.T, db *sqldb.DB) {
	st := openStore(t, db)
	distinct := concurrentRetries(t, db, st, func() *creditsv1.LedgerEntry { return grant("d", 30, "inv-same") })
	if distinct != 1 || balance(t, st, "d") != 30 {
		t.Errorf("10 concurrent retries: %d distinct entries, balance %d; want 1 and 30", distinct, balance(t, st, "d"))
	}
}

func testLedgerPages(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	var want []string // newest first
	for i, e := range []*creditsv1.LedgerEntry{
		grant("a", 50, "g1"), grant("b", 7, "g-b"), spend("a", 20, "s1"), grant("a", 5, "g2"), spend("a", 35, "s2"), grant("a", 1, "g3"),
	} {
		got, err := apply(ctx, st, e)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if e.GetWallet() == "a" {
			want = append([]string{got.GetReference()}, want...)
		}
	}
	// want is g3 s2 g2 s1 g1.
	for _, tc := range []struct {
		offset, limit int
		want          []string
	}{
		{0, 50, want}, {0, 2, want[:2]}, {2, 2, want[2:4]}, {4, 2, want[4:]}, {5, 2, []string{}},
	} {
		list, total, err := st.Ledger(ctx, "a", tc.offset, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := refs(list); !cmp.Equal(got, tc.want) || total != 5 {
			t.Errorf("Ledger(a, offset %d, limit %d) = %v of %d, want %v of 5", tc.offset, tc.limit, got, total, tc.want)
		}
	}
	list, total, err := st.Ledger(ctx, "a", 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	// Each entry carries the balance after it, oldest to newest.
	var after []int64
	for i := len(list) - 1; i >= 0; i-- {
		after = append(after, list[i].GetBalanceAfter())
	}
	if !cmp.Equal(after, []int64{50, 30, 35, 0, 1}) {
		t.Errorf("balances after each change = %v, want [50 30 35 0 1]", after)
	}
	if b := balance(t, st, "a"); b != 1 || total != 5 {
		t.Errorf("balance %d over %d entries, want 1 over 5", b, total)
	}
	if list, total, err := st.Ledger(ctx, "nobody", 0, 50); err != nil || len(list) != 0 || total != 0 {
		t.Errorf("Ledger of an unused wallet = %v of %d, %v; want nothing", refs(list), total, err)
	}
	if b := balance(t, st, "nobody"); b != 0 {
		t.Errorf("balance of an unused wallet = %d, want 0", b)
	}
}

func testReferences(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	g, err := apply(ctx, st, grant("a", 100, "inv-1"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := apply(ctx, st, spend("a", 30, "job-1"))
	if err != nil {
		t.Fatal(err)
	}
	// A retried spend answers with the first entry, balance as it was then.
	if _, err := apply(ctx, st, grant("a", 5, "inv-2")); err != nil {
		t.Fatal(err)
	}
	again, err := apply(ctx, st, spend("a", 30, "job-1"))
	if err != nil || !proto.Equal(again, s) {
		t.Errorf("retried spend = %v, %v; want the first entry %v", again, err, s)
	}
	var reused *credits.ReusedError
	if _, err := apply(ctx, st, spend("a", 31, "job-1")); !errors.As(err, &reused) || reused.First.GetId() != s.GetId() {
		t.Errorf("spend reference reused with another amount: %v, want ReusedError with the first spend", err)
	}
	if _, err := apply(ctx, st, grant("a", 99, "inv-1")); !errors.As(err, &reused) || reused.First.GetId() != g.GetId() {
		t.Errorf("grant reference reused with another amount: %v, want ReusedError with the first grant", err)
	}
	// A spend may carry a grant's reference, and another wallet's spend
	// reference: they are separate namespaces.
	if _, err := apply(ctx, st, spend("a", 1, "inv-1")); err != nil {
		t.Errorf("a spend with a grant's reference: %v", err)
	}
	if _, err := apply(ctx, st, grant("b", 10, "inv-b")); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(ctx, st, spend("b", 1, "job-1")); err != nil {
		t.Errorf("wallet b's spend with wallet a's spend reference: %v", err)
	}
	var short *credits.InsufficientError
	if _, err := apply(ctx, st, spend("a", 1000, "job-2")); !errors.As(err, &short) || short.Balance != 74 {
		t.Errorf("overdraft: %v, want InsufficientError with balance 74", err)
	}
	// The refused spend did not use up its reference.
	if _, err := apply(ctx, st, spend("a", 4, "job-2")); err != nil {
		t.Errorf("the refused spend's reference, for a smaller amount: %v", err)
	}
	list, total, err := st.Ledger(ctx, "a", 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := refs(list), []string{"job-2", "inv-1", "inv-2", "job-1", "inv-1"}; !cmp.Equal(got, want) || total != 5 {
		t.Errorf("ledger = %v of %d, want %v: retries and refusals record nothing", got, total, want)
	}
	if b := balance(t, st, "a"); b != 70 {
		t.Errorf("balance = %d, want 70", b)
	}
}

func testConcurrentSpendRetries(t *testing.T, db *sqldb.DB) {
	st := openStore(t, db)
	if _, err := apply(t.Context(), st, grant("e", 100, "seed")); err != nil {
		t.Fatal(err)
	}
	distinct := concurrentRetries(t, db, st, func() *creditsv1.LedgerEntry { return spend("e", 60, "job-same") })
	if distinct != 1 || balance(t, st, "e") != 40 {
		t.Errorf("10 concurrent retries of a spend: %d distinct entries, balance %d; want 1 and 40", distinct, balance(t, st, "e"))
	}
}

// concurrentRetries applies the change entry makes from 10 goroutines at
// once and returns how many distinct entries they were answered with.
func concurrentRetries(t *testing.T, db *sqldb.DB, st *creditsstore.Store, entry func() *creditsv1.LedgerEntry) int {
	t.Helper()
	got := make(chan string, 10)
	sqldbtest.Race(t, db, 10, func(int) {
		e, err := apply(t.Context(), st, entry())
		if err != nil {
			t.Errorf("concurrent retry: %v", err)
			return
		}
		got <- e.GetId()
	})
	close(got)
	seen := map[string]bool{}
	for id := range got {
		seen[id] = true
	}
	return len(seen)
}

// Concurrent sets of one setting each report the value they replaced:
// together the reports form one chain from the first value to the last,
// with no value reported replaced twice.
func testConcurrentSettings(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	const n = 12
	for round, first := range []bool{true, false} {
		name := fmt.Sprintf("setting_%d", round)
		if !first {
			if _, _, err := st.SetSetting(ctx, credits.Setting{Name: name, Value: 0, UpdateTime: at, UpdatedBy: "ops"}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu       sync.Mutex
			replaced = map[int64]int{} // value -> how many reported replacing it
			fresh    int
		)
		sqldbtest.Race(t, db, n, func(i int) {
			v := int64(i + 1)
			prev, existed, err := st.SetSetting(ctx, credits.Setting{Name: name, Value: v, UpdateTime: at, UpdatedBy: fmt.Sprintf("admin-%d", v)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("SetSetting %d: %v", v, err)
			case existed:
				replaced[prev.Value]++
			default:
				fresh++
			}
		})
		all, err := st.Settings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var last int64 = -1
		for _, s := range all {
			if s.Name == name {
				last = s.Value
			}
		}
		want := map[int64]int{}
		for v := int64(0); v <= n; v++ {
			if v != last && (v > 0 || !first) {
				want[v] = 1
			}
		}
		wantFresh := 0
		if first {
			wantFresh = 1
		}
		if !cmp.Equal(replaced, want) || fresh != wantFresh {
			t.Errorf("%s, set first = %v: values reported replaced %v (and %d sets found nothing), want each value but the last (%d) once %v (and %d)",
				name, first, replaced, fresh, last, want, wantFresh)
		}
	}
}

func testSettings(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if _, ok, err := st.SetSetting(ctx, credits.Setting{Name: "max_grant_amount", Value: 5, UpdateTime: at, UpdatedBy: "ops"}); err != nil || ok {
		t.Fatalf("first SetSetting: existed %v, %v", ok, err)
	}
	prev, ok, err := st.SetSetting(ctx, credits.Setting{Name: "max_grant_amount", Value: 7, UpdateTime: at.Add(time.Second), UpdatedBy: "root"})
	if err != nil || !ok || prev.Value != 5 || prev.UpdatedBy != "ops" || !prev.UpdateTime.Equal(at) {
		t.Errorf("second SetSetting previous = %+v, %v, %v; want 5 by ops", prev, ok, err)
	}
	all, err := st.Settings(ctx)
	if err != nil || len(all) != 1 || all[0].Value != 7 || all[0].UpdatedBy != "root" {
		t.Errorf("Settings = %+v, %v; want one setting of 7 by root", all, err)
	}
}

func testIdempotencyKeys(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	g, err := applyKeyed(ctx, st, grant("a", 100, "inv-1"), "k1")
	if err != nil {
		t.Fatal(err)
	}
	// The same key with another reference is another request: refused,
	// naming the first entry.
	var reused *credits.ReusedError
	if _, err := applyKeyed(ctx, st, grant("a", 100, "inv-2"), "k1"); !errors.As(err, &reused) || reused.First.GetId() != g.GetId() {
		t.Errorf("key k1 with another reference: %v, want ReusedError with the first grant", err)
	}
	// The same request with the same key is a retry.
	if again, err := applyKeyed(ctx, st, grant("a", 100, "inv-1"), "k1"); err != nil || !proto.Equal(again, g) {
		t.Errorf("retry with key k1 = %v, %v; want the first grant", again, err)
	}
	// The same reference under a new key is a retry too: the reference
	// names the grant.
	if again, err := applyKeyed(ctx, st, grant("a", 100, "inv-1"), "k2"); err != nil || !proto.Equal(again, g) {
		t.Errorf("retry with a new key = %v, %v; want the first grant", again, err)
	}
	// A different note makes a different request.
	other := grant("a", 100, "inv-1")
	other.Note = "changed"
	if _, err := applyKeyed(ctx, st, other, "k3"); !errors.As(err, &reused) {
		t.Errorf("reference inv-1 with another note: %v, want ReusedError", err)
	}
	// Keys are the actor's own: another actor's k1 is another call.
	theirs := grant("a", 5, "inv-3")
	theirs.Actor = "someone-else"
	if _, err := applyKeyed(ctx, st, theirs, "k1"); err != nil {
		t.Errorf("another actor's key k1: %v", err)
	}
	// A spend whose first attempt was refused did not take its key.
	if _, err := applyKeyed(ctx, st, spend("a", 1000, "job-1"), "k4"); !errors.As(err, new(*credits.InsufficientError)) {
		t.Fatalf("overdraft: %v, want InsufficientError", err)
	}
	if _, err := applyKeyed(ctx, st, spend("a", 10, "job-1"), "k4"); err != nil {
		t.Errorf("the refused spend's key and reference for a smaller amount: %v", err)
	}
	if b := balance(t, st, "a"); b != 95 {
		t.Errorf("balance = %d, want 95", b)
	}

	// The maximum refuses a new change and records nothing; a retry of a
	// change made under a higher maximum still gets the first entry.
	big := grant("m", 10, "max-1")
	call := idempotency.Call{Digest: idempotency.Digest(request(big))}
	if _, err := st.Apply(ctx, big, call, 9); !errors.Is(err, credits.ErrOverMax) {
		t.Errorf("a grant of 10 under a maximum of 9: %v, want ErrOverMax", err)
	}
	first, err := st.Apply(ctx, big, call, 10)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := st.Apply(ctx, grant("m", 10, "max-1"), call, 9); err != nil || !again.Replayed || again.Entry.GetId() != first.Entry.GetId() {
		t.Errorf("a retry after the maximum was lowered = %+v, %v; want the first entry", again, err)
	}
}

// stress races the changes change(round, variant) makes, under the key
// key(round) ("" for none), on wallet, which holds start from seeds entries
// before; then it checks that the ledger holds exactly the entries the
// racers were answered with and the balance is start plus their amounts.
func stress(t *testing.T, db *sqldb.DB, st *creditsstore.Store, wallet string, start int64, seeds int,
	change func(round, variant int) *creditsv1.LedgerEntry, key func(round int) string) {
	t.Helper()
	var (
		mu  sync.Mutex
		sum = start
	)
	stored := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		e := change(round, variant)
		got, err := applyKeyed(t.Context(), st, e, key(round))
		switch {
		case errors.As(err, new(*credits.ReusedError)):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		case got.GetId() == e.GetId():
			mu.Lock()
			sum += e.GetAmount()
			mu.Unlock()
		}
		return sqldbtest.Outcome{ID: got.GetId(), Created: got.GetId() == e.GetId()}
	})
	list, total, err := st.Ledger(t.Context(), wallet, 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range list[:len(list)-seeds] {
		ids = append(ids, e.GetId())
	}
	if diff := cmp.Diff(stored, ids, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" || total != len(stored)+seeds {
		t.Errorf("ledger entries are not the ones answered (-answered +ledger):\n%s", diff)
	}
	if b := balance(t, st, wallet); b != sum {
		t.Errorf("balance = %d, want %d", b, sum)
	}
}

func noKey(int) string { return "" }

func testStressGrants(t *testing.T, db *sqldb.DB) {
	stress(t, db, openStore(t, db), "w", 0, 0, func(round, variant int) *creditsv1.LedgerEntry {
		return grant("w", int64(10+variant), fmt.Sprintf("inv-%d", round))
	}, noKey)
}

func testStressSpends(t *testing.T, db *sqldb.DB) {
	st := openStore(t, db)
	const seed = 100_000
	if _, err := apply(t.Context(), st, grant("w", seed, "seed")); err != nil {
		t.Fatal(err)
	}
	stress(t, db, st, "w", seed, 1, func(round, variant int) *creditsv1.LedgerEntry {
		return spend("w", int64(10+variant), fmt.Sprintf("job-%d", round))
	}, noKey)
}

// One key per round; the other request names another reference.
func testStressKeyedGrants(t *testing.T, db *sqldb.DB) {
	stress(t, db, openStore(t, db), "w", 0, 0, func(round, variant int) *creditsv1.LedgerEntry {
		return grant("w", 7, fmt.Sprintf("inv-%d-%d", round, variant))
	}, func(round int) string { return fmt.Sprintf("key-%d", round) })
}
