// Package sqldbtest runs tests on both engines sqldb opens: SQLite, in a
// file in the test's temporary directory, and PostgreSQL, in a throwaway
// pgtest cluster. A store's suite is one set of tests run on each:
//
//	func TestStore(t *testing.T) {
//		sqldbtest.Run(t, pgtest.Start(t), []sqldbtest.Test{
//			{Name: "create and get", Test: testCreateGet},
//			...
//		})
//	}
//
// A test binary whose several tests need PostgreSQL shares one cluster, a
// pgtest.Shared started from TestMain, and passes it instead.
//
// Under -short (make test-short) the PostgreSQL engine's subtests are
// skipped and the SQLite ones still run.
package sqldbtest

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
)

// Databases hands out fresh, empty PostgreSQL databases: a *pgtest.Cluster
// or a *pgtest.Shared.
type Databases interface {
	NewDatabase(tb testing.TB) string
}

// Engine is a database engine tests run on.
type Engine struct {
	// Name is "sqlite" or "postgres", the name of the engine's subtest.
	Name string
	// NewDSN returns the DSN of a fresh, empty database for tb.
	NewDSN func(tb testing.TB) string
	// needsServer is set for an engine that -short does not run.
	needsServer bool
}

// SQLite is the SQLite engine: each database a file in the test's
// temporary directory.
func SQLite() Engine {
	return Engine{Name: "sqlite", NewDSN: func(tb testing.TB) string {
		return filepath.Join(tb.TempDir(), "test.db")
	}}
}

// Postgres is the PostgreSQL engine, its databases from pg.
func Postgres(pg Databases) Engine {
	return Engine{Name: "postgres", NewDSN: pg.NewDatabase, needsServer: true}
}

// Open opens a fresh, empty database of e, closed when tb ends.
func (e Engine) Open(tb testing.TB) *sqldb.DB {
	tb.Helper()
	return Open(tb, e.NewDSN(tb))
}

// Open opens the database at dsn, closed when tb ends.
func Open(tb testing.TB, dsn string) *sqldb.DB {
	tb.Helper()
	db, err := sqldb.Open(tb.Context(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// OpenStore opens a store over db with open (a store package's Open, which
// migrates db), failing the test when it cannot.
func OpenStore[S any](tb testing.TB, db *sqldb.DB, open func(context.Context, *sqldb.DB) (S, error)) S {
	tb.Helper()
	s, err := open(tb.Context(), db)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// WantErr reports, as a test error naming what was done, an err that is
// not want (errors.Is): a store's sentinel errors are its contract.
func WantErr(tb testing.TB, what string, err, want error) {
	tb.Helper()
	if !errors.Is(err, want) {
		tb.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// Each runs fn once on SQLite and once on PostgreSQL (databases from pg),
// as subtests named for the engine; under -short the PostgreSQL subtest is
// skipped.
func Each(t *testing.T, pg Databases, fn func(t *testing.T, e Engine)) {
	for _, e := range []Engine{SQLite(), Postgres(pg)} {
		t.Run(e.Name, func(t *testing.T) {
			if e.needsServer {
				pgtest.SkipShort(t)
			}
			fn(t, e)
		})
	}
}

// Test is one test of a store suite.
type Test struct {
	Name string
	// Test checks the store on db, a fresh, empty database.
	Test func(t *testing.T, db *sqldb.DB)
}

// Run runs a store suite on SQLite and on PostgreSQL (databases from pg):
// each test as a subtest, in parallel with the others, on a database of
// its own.
func Run(t *testing.T, pg Databases, suite []Test) {
	Each(t, pg, func(t *testing.T, e Engine) {
		for _, tc := range suite {
			t.Run(tc.Name, func(t *testing.T) {
				t.Parallel()
				tc.Test(t, e.Open(t))
			})
		}
	})
}

// WarmPool opens up to n connections of db ahead of a race, so that the
// racers meet in the database rather than one at a time as their
// connections open.
func WarmPool(tb testing.TB, db *sqldb.DB, n int) {
	tb.Helper()
	if limit := db.Stats().MaxOpenConnections; limit > 0 {
		n = min(n, limit)
	}
	db.SetMaxIdleConns(n)
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(tb.Context())
		if err != nil {
			tb.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Close()
	}
}

// Race runs racer(0), ..., racer(n-1) at the same moment, each in a
// goroutine of its own, over the n connections of db it opens first
// (WarmPool), and returns when every racer has.
func Race(tb testing.TB, db *sqldb.DB, n int, racer func(i int)) {
	tb.Helper()
	WarmPool(tb, db, n)
	together(n, racer)
}

// OneWinner checks the errors of racing conditional updates of one row
// from one state: exactly one succeeded, and every other lost with lost
// (the store's ErrStale). It returns the index of the winner.
func OneWinner(tb testing.TB, errs []error, lost error) int {
	tb.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner < 0:
			winner = i
		case err == nil:
			tb.Errorf("racers %d and %d both made the update", winner, i)
		case !errors.Is(err, lost):
			tb.Errorf("racer %d: %v, want success or %v", i, err, lost)
		}
	}
	if winner < 0 {
		tb.Fatal("no racer made the update")
	}
	return winner
}

// together runs racer(0), ..., racer(n-1), released at once, and waits for
// them.
func together(n int, racer func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			racer(i)
		})
	}
	close(start)
	wg.Wait()
}

// Outcome is what one idempotent write answered, for Stress.
type Outcome struct {
	// ID names the result (the stored row) the write answered with.
	ID string
	// Created is true when this write stored it; false for a replay.
	Created bool
	// Reused is true when the write was refused because its key is held by
	// a different request.
	Reused bool
	// Err is any other error.
	Err error
}

// Stress rounds and racers: each idempotent write of a store is raced from
// StressRacers goroutines, StressRounds times, on each engine. Under -short
// (make test-short) it is raced StressShortRounds times: the same rule
// checked, with fewer chances to catch a rare interleaving; make test runs
// every round.
const (
	StressRounds      = 50
	StressShortRounds = 5
	StressRacers      = 32
)

// Stress races an idempotent write: in each of StressRounds rounds (under
// -short StressShortRounds),
// StressRacers goroutines call write(round, racer, variant) at the same
// moment with one key that is new in that round. Racers of variant 0 send
// one request, racers of variant 1 (every fourth) another. The rule says:
// exactly one write stores a result, every racer that sent the same request
// as that write gets that result, and every other racer is refused (Reused).
// Stress returns the ids of the results stored, one per round.
func Stress(t *testing.T, db *sqldb.DB, write func(round, racer, variant int) Outcome) []string {
	t.Helper()
	WarmPool(t, db, StressRacers)
	variant := func(racer int) int {
		if racer%4 == 3 {
			return 1
		}
		return 0
	}
	rounds := StressRounds
	if testing.Short() {
		rounds = StressShortRounds
	}
	var stored []string
	for round := range rounds {
		got := make([]Outcome, StressRacers)
		together(StressRacers, func(racer int) { got[racer] = write(round, racer, variant(racer)) })

		winner, created := -1, 0
		for racer, o := range got {
			if o.Err != nil {
				t.Fatalf("round %d, racer %d: %v", round, racer, o.Err)
			}
			if o.Created {
				created++
				winner = racer
			}
		}
		if created != 1 {
			t.Fatalf("round %d: %d racers stored a result, want exactly 1: %+v", round, created, got)
		}
		for racer, o := range got {
			same := variant(racer) == variant(winner)
			switch {
			case same && (o.Reused || o.ID != got[winner].ID):
				t.Fatalf("round %d, racer %d sent the stored request and got %+v, want the stored result %s", round, racer, o, got[winner].ID)
			case !same && !o.Reused:
				t.Fatalf("round %d, racer %d sent another request with the key and got %+v, want it refused", round, racer, o)
			}
		}
		stored = append(stored, got[winner].ID)
	}
	return stored
}
