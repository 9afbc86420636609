package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestOpenPicksTheDialectFromTheDSN(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		dsn := e.NewDSN(t)
		want := sqldb.SQLite
		if strings.HasPrefix(dsn, "postgres://") {
			want = sqldb.Postgres
		}
		if got := sqldbtest.Open(t, dsn).Dialect; got != want {
			t.Errorf("Open(%q).Dialect = %s, want %s", dsn, got, want)
		}
	})
	t.Run("postgresql scheme", func(t *testing.T) {
		dsn := strings.Replace(pg.NewDatabase(t), "postgres://", "postgresql://", 1)
		if got := sqldbtest.Open(t, dsn).Dialect; got != sqldb.Postgres {
			t.Errorf("Open(%q).Dialect = %s, want postgres", dsn, got)
		}
	})
}

// migrations builds a migration tree with the same files for both dialects.
func migrations(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, body := range files {
		for _, d := range []sqldb.Dialect{sqldb.SQLite, sqldb.Postgres} {
			fsys[string(d)+"/"+name] = &fstest.MapFile{Data: []byte(body)}
		}
	}
	return fsys
}

func count(t *testing.T, db *sqldb.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestMigrateAppliesEachMigrationOnce(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		files := map[string]string{
			"0001_items.sql": `CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
				CREATE INDEX items_name ON items (name);`,
			"0002_seed.sql": `INSERT INTO items (id, name) VALUES (1, 'first');`,
			"README.md":     `not a migration`,
		}
		for range 2 {
			if err := db.Migrate(ctx, migrations(files)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 1 {
			t.Errorf("after migrating twice items has %d rows, want 1 (the seed ran again?)", n)
		}

		// A failing migration changes nothing and is not recorded; once
		// fixed, it applies and the earlier ones do not run again.
		files["0003_more.sql"] = `INSERT INTO items (id, name) VALUES (2, 'second'); INSERT INTO nowhere VALUES (1);`
		err := db.Migrate(ctx, migrations(files))
		if err == nil || !strings.Contains(err.Error(), "0003_more.sql") {
			t.Fatalf("Migrate with a broken migration: err = %v, want an error naming 0003_more.sql", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 1 {
			t.Errorf("a failed migration left %d rows, want 1", n)
		}
		files["0003_more.sql"] = `INSERT INTO items (id, name) VALUES (2, 'second');`
		if err := db.Migrate(ctx, migrations(files)); err != nil {
			t.Fatalf("Migrate with the fixed migration: %v", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 2 {
			t.Errorf("items has %d rows, want 2", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM schema_migrations`); n != 3 {
			t.Errorf("schema_migrations has %d rows, want 3", n)
		}
	})
}

// Two services pointed at one database would both have a migration 0001;
// the second must not take the first's for its own and start without its
// tables.
func TestMigrateRefusesAnotherServicesDatabase(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		if err := db.Migrate(ctx, migrations(map[string]string{"0001_agents.sql": `CREATE TABLE agents (id TEXT PRIMARY KEY);`})); err != nil {
			t.Fatal(err)
		}
		err := db.Migrate(ctx, migrations(map[string]string{"0001_messages.sql": `CREATE TABLE messages (id TEXT PRIMARY KEY);`}))
		if err == nil || !strings.Contains(err.Error(), "0001_agents.sql") || !strings.Contains(err.Error(), "database of its own") {
			t.Errorf("Migrate of a database another service migrated: err = %v, want a refusal naming its migration", err)
		}
	})
}

// Replicas of a service start at the same time and all migrate one database.
func TestConcurrentMigrateAppliesOnce(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		dsn := e.NewDSN(t)
		files := migrations(map[string]string{
			"0001_items.sql": `CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);`,
			"0002_seed.sql":  `INSERT INTO items (id, name) VALUES (1, 'first');`,
		})
		const replicas = 6
		dbs := make([]*sqldb.DB, replicas)
		for i := range dbs {
			dbs[i] = sqldbtest.Open(t, dsn)
		}
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Go(func() { errs[i] = db.Migrate(t.Context(), files) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("replica %d: Migrate: %v", i, err)
			}
		}
		if n := count(t, dbs[0], `SELECT COUNT(*) FROM items`); n != 1 {
			t.Errorf("items has %d rows after concurrent migrations, want 1", n)
		}
	})
}

func TestRebind(t *testing.T) {
	const query = `SELECT ? || ? || ?`
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := e.Open(t)
		want := map[sqldb.Dialect]string{
			sqldb.SQLite:   query,
			sqldb.Postgres: `SELECT $1 || $2 || $3`,
		}[db.Dialect]
		if got := db.Rebind(query); got != want {
			t.Errorf("Rebind(%q) = %q, want %q", query, got, want)
		}
		var got string
		if err := db.QueryRowContext(t.Context(), db.Rebind(query), "a", "b", "c").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != "abc" {
			t.Errorf("placeholders bound as %q, want abc (in order)", got)
		}
	})
}

func TestIsUniqueViolation(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		if _, err := db.ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tag TEXT);
			CREATE UNIQUE INDEX items_tag ON items (tag) WHERE tag IS NOT NULL;`); err != nil {
			t.Fatal(err)
		}
		insert := func(id int, name, tag any) error {
			_, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO items (id, name, tag) VALUES (?, ?, ?)`), id, name, tag)
			return err
		}
		if err := insert(1, "a", "x"); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			err  error
			want bool
		}{
			{"duplicate primary key", insert(1, "b", nil), true},
			{"duplicate in a partial unique index", insert(2, "b", "x"), true},
			{"wrapped", fmt.Errorf("insert item: %w", insert(1, "b", nil)), true},
			{"not null violation", insert(3, nil, nil), false},
			{"syntax error", func() error { _, err := db.ExecContext(ctx, `INSERT INTO`); return err }(), false},
			{"no rows", sql.ErrNoRows, false},
			{"nil", nil, false},
		} {
			if tc.err == nil && tc.name != "nil" {
				t.Fatalf("%s: the statement succeeded", tc.name)
			}
			if got := sqldb.IsUniqueViolation(tc.err); got != tc.want {
				t.Errorf("%s: IsUniqueViolation(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
			}
		}
	})
}

func TestInTxRollsBackOnError(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		if _, err := db.ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		err := db.InTx(ctx, func(tx *sqldb.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES (1)`); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v, want the function's error", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 0 {
			t.Errorf("a failed transaction left %d rows", n)
		}
	})
}

// An in-memory SQLite database is one database, whichever pooled connection
// a query lands on.
func TestSQLiteInMemoryIsOneDatabase(t *testing.T) {
	ctx := t.Context()
	db := sqldbtest.Open(t, ":memory:")
	if err := db.Migrate(ctx, migrations(map[string]string{"0001_items.sql": `CREATE TABLE items (id INTEGER PRIMARY KEY);`})); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := db.ExecContext(context.WithoutCancel(ctx), `INSERT INTO items (id) VALUES (?)`, i)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 8 {
		t.Errorf("items has %d rows, want 8", n)
	}
}

// OpenReadOnly reads what is there and writes nothing: not a row, and not
// a new database for a path that does not exist.
func TestOpenReadOnlyReadsButNeverWrites(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		dsn := e.NewDSN(t)
		rw := sqldbtest.Open(t, dsn)
		if _, err := rw.Exec(t.Context(), `CREATE TABLE evidence (n INTEGER)`); err != nil {
			t.Fatal(err)
		}
		if _, err := rw.Exec(t.Context(), `INSERT INTO evidence (n) VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		ro, err := sqldb.OpenReadOnly(t.Context(), dsn)
		if err != nil {
			t.Fatalf("OpenReadOnly: %v", err)
		}
		defer ro.Close()
		if n := count(t, ro, `SELECT COUNT(*) FROM evidence`); n != 1 {
			t.Errorf("read-only count = %d, want 1", n)
		}
		if _, err := ro.Exec(t.Context(), `INSERT INTO evidence (n) VALUES (2)`); err == nil {
			t.Error("an insert through the read-only database succeeded")
		}
		if n := count(t, rw, `SELECT COUNT(*) FROM evidence`); n != 1 {
			t.Errorf("after the refused insert count = %d, want 1", n)
		}
	})
	missing := t.TempDir() + "/missing.db"
	if _, err := sqldb.OpenReadOnly(t.Context(), missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReadOnly of a missing SQLite file: %v, want not exist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReadOnly created %s", missing)
	}
}
