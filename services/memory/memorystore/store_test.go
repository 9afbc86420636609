package memorystore_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/services/memory"
	"github.com/toolmesh/toolmesh/services/memory/memorystore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the memory store on each database engine.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, append([]sqldbtest.Test{
		{Name: "keyring is recorded once", Test: testKeyring},
		{Name: "save upserts and search follows", Test: testSaveUpserts},
		{Name: "search ranks and isolates agents", Test: testSearch},
		{Name: "list pages most recent first", Test: testList},
		{Name: "get reads one agent's key", Test: testGet},
		{Name: "delete removes from the index", Test: testDelete},
		{Name: "every word is one term", Test: testWordIsOneTerm},
		{Name: "a very long word does not stop a save", Test: testLongWord},
		{Name: "concurrent saves of one key keep one memory", Test: testConcurrentSaves},
	}, rankingTests()...))
}

func openStore(t *testing.T, db *sqldb.DB) *memorystore.Store {
	return sqldbtest.OpenStore(t, db, memorystore.Open)
}

// t0 is an arbitrary UTC time.
var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

func rec(agent, key, terms string, at time.Time) memory.Record {
	return memory.Record{AgentID: agent, Key: key, Body: []byte("body of " + key), Terms: terms, CreateTime: at, UpdateTime: at}
}

// ranked returns the keys Search finds for terms, best first.
func ranked(t *testing.T, st *memorystore.Store, agent string, terms ...string) []string {
	t.Helper()
	ms, err := st.Search(t.Context(), agent, terms, 10)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for i, m := range ms {
		out = append(out, m.Key)
		if m.Score <= 0 {
			t.Errorf("search %v: %s has score %v, want a positive relevance", terms, m.Key, m.Score)
		}
		if i > 0 && m.Score > ms[i-1].Score {
			t.Errorf("search %v: scores not in descending order: %v then %v", terms, ms[i-1].Score, m.Score)
		}
	}
	return out
}

// corpus opens a store on db holding recs and unrelated memories of the
// same agent, so that the query words are not common ones.
func corpus(t *testing.T, db *sqldb.DB, recs ...memory.Record) *memorystore.Store {
	t.Helper()
	st := openStore(t, db)
	for i := range 6 {
		recs = append(recs, rec("a", fmt.Sprintf("unrelated-%d", i), fmt.Sprintf("lunch menu number %d for the team", i), t0))
	}
	for _, r := range recs {
		if _, _, err := st.Save(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// rankingTests check the ranking contract, the same on both engines (bm25
// on SQLite, ts_rank on PostgreSQL): other things equal, a memory with more
// of the query's words, or with them more often, or a shorter one, ranks
// higher; equal matches come most recently updated first.
func rankingTests() []sqldbtest.Test {
	var tests []sqldbtest.Test
	for _, tc := range []struct {
		name  string
		recs  []memory.Record
		terms []string
		want  []string
	}{
		{"more of the words first", []memory.Record{
			rec("a", "one", "alpha f1 f2 f3 f4 f5", t0.Add(2*time.Minute)),
			rec("a", "both", "alpha beta f1 f2 f3 f4", t0),
			rec("a", "other", "beta f1 f2 f3 f4 f5", t0.Add(time.Minute)),
		}, []string{"alpha", "beta"}, []string{"both", "one", "other"}},
		{"more often first", []memory.Record{
			rec("a", "once", "alpha f1 f2 f3 f4 f5", t0.Add(time.Minute)),
			rec("a", "thrice", "alpha alpha alpha f1 f2 f3", t0),
			rec("a", "twice", "alpha f1 alpha f2 f3 f4", t0),
		}, []string{"alpha"}, []string{"thrice", "twice", "once"}},
		{"shorter first", []memory.Record{
			rec("a", "long", "alpha f1 f2 f3 f4 f5 f6 f7 f8 f9 f10 f11", t0.Add(time.Minute)),
			rec("a", "short", "alpha f1", t0),
			rec("a", "medium", "alpha f1 f2 f3 f4", t0),
		}, []string{"alpha"}, []string{"short", "medium", "long"}},
		{"equal matches newest first", []memory.Record{
			rec("a", "older", "alpha f1 f2", t0),
			rec("a", "newest", "alpha f3 f4", t0.Add(time.Hour)),
			rec("a", "newer", "alpha f5 f6", t0.Add(time.Minute)),
			rec("a", "saved-later", "alpha f7 f8", t0),
		}, []string{"alpha"}, []string{"newest", "newer", "saved-later", "older"}},
		{"whole words only", []memory.Record{
			rec("a", "word", "deploy now", t0.Add(time.Minute)),
			rec("a", "longer-word", "deployment now", t0.Add(time.Hour)),
			rec("a", "prefix", "re deploy", t0),
		}, []string{"deploy"}, []string{"word", "prefix"}},
	} {
		tests = append(tests, sqldbtest.Test{Name: "ranking: " + tc.name, Test: func(t *testing.T, db *sqldb.DB) {
			st := corpus(t, db, tc.recs...)
			if got := ranked(t, st, "a", tc.terms...); !cmp.Equal(got, tc.want) {
				t.Errorf("search %v = %v, want %v", tc.terms, got, tc.want)
			}
		}})
	}
	return tests
}

func testKeyring(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	first := memory.Keyring{KeyID: "aaaa", Check: []byte{1, 2, 3}}
	got, err := st.InitKeyring(ctx, first)
	if err != nil || !cmp.Equal(got, first) {
		t.Fatalf("first InitKeyring = %v, %v; want %v", got, err, first)
	}
	got, err = st.InitKeyring(ctx, memory.Keyring{KeyID: "bbbb", Check: []byte{9}})
	if err != nil || !cmp.Equal(got, first) {
		t.Errorf("second InitKeyring = %v, %v; want the first keyring %v kept", got, err, first)
	}
}

func testSaveUpserts(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	r, created, err := st.Save(ctx, rec("a", "k", "old words", t0))
	if err != nil || !created {
		t.Fatalf("first Save: created %v, err %v", created, err)
	}
	r2 := rec("a", "k", "new words", t0.Add(time.Hour))
	r2.Body = []byte("new body")
	got, created, err := st.Save(ctx, r2)
	if err != nil || created {
		t.Fatalf("second Save: created %v, err %v; want an update", created, err)
	}
	if !got.CreateTime.Equal(r.CreateTime) || !got.UpdateTime.Equal(t0.Add(time.Hour)) {
		t.Errorf("after update: create %v update %v; want create kept %v, update %v", got.CreateTime, got.UpdateTime, r.CreateTime, t0.Add(time.Hour))
	}
	if m, _ := st.Search(ctx, "a", []string{"old"}, 10); len(m) != 0 {
		t.Errorf("search for a replaced term found %d memories", len(m))
	}
	m, err := st.Search(ctx, "a", []string{"new"}, 10)
	if err != nil || len(m) != 1 || string(m[0].Body) != "new body" || !m[0].CreateTime.Equal(t0) {
		t.Errorf("search for the new term = %+v, %v; want the updated memory", m, err)
	}
	list, total, err := st.List(ctx, "a", 0, 10)
	if err != nil || total != 1 || len(list) != 1 {
		t.Errorf("List = %d of %d, %v; want exactly one memory", len(list), total, err)
	}
}

func testSearch(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	for _, r := range []memory.Record{
		rec("a", "both", "deploy to staging with the deploy script", t0),
		rec("a", "one", "the staging cluster is blue and big today", t0),
		rec("a", "tf3", "apple apple apple pie", t0),
		rec("a", "tf1", "apple tart with cream", t0),
		rec("a", "none", "lunch menu", t0),
		rec("b", "theirs", "deploy staging deploy staging", t0),
	} {
		if _, _, err := st.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(agent string, terms ...string) []string {
		t.Helper()
		ms, err := st.Search(ctx, agent, terms, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for i, m := range ms {
			out = append(out, m.Key)
			if i > 0 && m.Score > ms[i-1].Score {
				t.Errorf("scores not in descending order: %v then %v", ms[i-1].Score, m.Score)
			}
		}
		return out
	}
	if got := keys("a", "deploy", "staging"); !cmp.Equal(got, []string{"both", "one"}) {
		t.Errorf("search deploy|staging = %v, want [both one]", got)
	}
	if got := keys("a", "apple"); !cmp.Equal(got, []string{"tf3", "tf1"}) {
		t.Errorf("search apple = %v, want [tf3 tf1]", got)
	}
	if got := keys("b", "apple", "deploy"); !cmp.Equal(got, []string{"theirs"}) {
		t.Errorf("agent b's search = %v, want only its own memory", got)
	}
	if ms, err := st.Search(ctx, "a", []string{"apple"}, 1); err != nil || len(ms) != 1 {
		t.Errorf("search with limit 1 = %d matches, %v", len(ms), err)
	}
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	for i := range 5 {
		if _, _, err := st.Save(ctx, rec("a", fmt.Sprintf("k%d", i), "x", t0.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	list, total, err := st.List(ctx, "a", 1, 2)
	if err != nil || total != 5 {
		t.Fatalf("List total %d, %v; want 5", total, err)
	}
	if got := []string{list[0].Key, list[1].Key}; !cmp.Equal(got, []string{"k3", "k2"}) {
		t.Errorf("List offset 1 limit 2 = %v, want [k3 k2]", got)
	}
}

func testGet(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	saved, _, err := st.Save(ctx, rec("a", "project/roadmap", "otter", t0))
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "a", "project/roadmap")
	if err != nil || string(got.Body) != "body of project/roadmap" || got.AgentID != "a" || !got.CreateTime.Equal(saved.CreateTime) || !got.UpdateTime.Equal(saved.UpdateTime) {
		t.Errorf("Get = %+v, %v; want the saved record %+v", got, err, saved)
	}
	if _, err := st.Get(ctx, "b", "project/roadmap"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("another agent's Get: %v, want ErrNotFound", err)
	}
}

func testDelete(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	if _, _, err := st.Save(ctx, rec("a", "k", "otter", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(ctx, "b", "k"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("another agent's Delete: %v, want ErrNotFound", err)
	}
	r, err := st.Delete(ctx, "a", "k")
	if err != nil || string(r.Body) != "body of k" {
		t.Fatalf("Delete = %+v, %v; want the deleted record", r, err)
	}
	if ms, _ := st.Search(ctx, "a", []string{"otter"}, 10); len(ms) != 0 {
		t.Errorf("search after delete found %d memories", len(ms))
	}
	if _, err := st.Delete(ctx, "a", "k"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
}

// The service splits words itself (runs of letters and digits); each is
// one term to the index, whatever a full-text parser would make of it.
func testWordIsOneTerm(t *testing.T, db *sqldb.DB) {
	words := []string{"1e10x", "12e5", "x2y", "123", "ölçü", "日本語", "v2", "e5"}
	var recs []memory.Record
	for i, w := range words {
		recs = append(recs, rec("a", fmt.Sprintf("w%d", i), w+" filler", t0))
	}
	st := corpus(t, db, recs...)
	for i, w := range words {
		if got, want := ranked(t, st, "a", w), []string{fmt.Sprintf("w%d", i)}; !cmp.Equal(got, want) {
			t.Errorf("search %q = %v, want %v", w, got, want)
		}
	}
	for _, part := range []string{"x", "1e10", "12", "y", "ölç", "日本"} {
		if got := ranked(t, st, "a", part); len(got) != 0 {
			t.Errorf("search %q, a part of a word = %v, want nothing", part, got)
		}
	}
}

func testLongWord(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	long := strings.Repeat("ü", 3000)
	if _, _, err := st.Save(ctx, rec("a", "long", "before "+long+" after", t0)); err != nil {
		t.Fatalf("Save with a %d-byte word: %v", len(long), err)
	}
	for _, w := range []string{"before", "after"} {
		if got := ranked(t, st, "a", w); !cmp.Equal(got, []string{"long"}) {
			t.Errorf("search %q = %v, want [long]", w, got)
		}
	}
	// And a word repeated more often than PostgreSQL keeps positions.
	if _, _, err := st.Save(ctx, rec("a", "repeated", strings.Repeat("again ", 3000)+"end", t0)); err != nil {
		t.Fatalf("Save with a word repeated 3000 times: %v", err)
	}
	if got := ranked(t, st, "a", "again", "end"); !cmp.Equal(got, []string{"repeated"}) {
		t.Errorf("search again end = %v, want [repeated]", got)
	}
}

func testConcurrentSaves(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	st := openStore(t, db)
	errs := make(chan error, 20)
	sqldbtest.Race(t, db, 20, func(i int) {
		_, _, err := st.Save(ctx, rec("a", "same", fmt.Sprintf("word%d", i), t0))
		errs <- err
	})
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Save: %v", err)
		}
	}
	_, total, err := st.List(ctx, "a", 0, 50)
	if err != nil || total != 1 {
		t.Errorf("after concurrent saves of one key: %d memories (err %v), want 1", total, err)
	}
	hits := 0
	for i := range 20 {
		ms, _ := st.Search(ctx, "a", []string{fmt.Sprintf("word%d", i)}, 10)
		hits += len(ms)
	}
	if hits != 1 {
		t.Errorf("the index holds terms of %d saves, want only the last one", hits)
	}
}
