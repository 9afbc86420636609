package sqldb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

func TestInsertOnce(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		if _, err := db.Exec(ctx, `CREATE TABLE things (id TEXT PRIMARY KEY, owner TEXT NOT NULL, idem_key TEXT, digest TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `CREATE UNIQUE INDEX things_key ON things (owner, idem_key) WHERE idem_key IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		// insert inserts thing id of owner "o" under key with digest.
		insert := func(q sqldb.Querier, id string, key any, digest string) (string, bool, error) {
			return sqldb.InsertOnce(ctx, q, sqldb.Once[string]{
				What:       "thing",
				Insert:     `INSERT INTO things (id, owner, idem_key, digest) VALUES (?, ?, ?, ?)`,
				Args:       []any{id, "o", key, digest},
				Holders:    `SELECT id, digest FROM things WHERE owner = ? AND idem_key = ?`,
				HolderArgs: []any{"o", key},
				Scan: func(r sqldb.Scanner) (string, string, error) {
					var id, d string
					err := r.Scan(&id, &d)
					return id, d, err
				},
				Digest: digest,
			})
		}
		for _, tc := range []struct {
			name     string
			id       string
			key      any
			digest   string
			want     string
			inserted bool
			err      error
		}{
			{"a new key", "t1", "k1", "d1", "", true, nil},
			{"the same key and request", "t2", "k1", "d1", "t1", false, nil},
			{"the same key, another request", "t3", "k1", "d2", "t1", false, idempotency.ErrKeyReused},
			{"another key", "t4", "k2", "d2", "", true, nil},
			{"no key", "t5", nil, "d1", "", true, nil},
			{"no key and a taken id", "t5", nil, "d1", "", false, sqldb.ErrNotInserted},
			{"a new key and a taken id", "t1", "k3", "d1", "", false, sqldb.ErrNotInserted},
		} {
			got, inserted, err := insert(db, tc.id, tc.key, tc.digest)
			if got != tc.want || inserted != tc.inserted || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("%s: InsertOnce = %q, inserted %v, %v; want %q, %v, %v", tc.name, got, inserted, err, tc.want, tc.inserted, tc.err)
			}
		}
		// A row stored before digests were kept holds its key for any
		// request.
		if _, err := db.Exec(ctx, `INSERT INTO things (id, owner, idem_key, digest) VALUES ('old', 'o', 'k-old', '')`); err != nil {
			t.Fatal(err)
		}
		if got, inserted, err := insert(db, "t6", "k-old", "d9"); got != "old" || inserted || err != nil {
			t.Errorf("a key of a row without digest: %q, inserted %v, %v; want the row", got, inserted, err)
		}
		// In a transaction that rolls back, the claim goes with it.
		boom := errors.New("boom")
		err := db.InTx(ctx, func(tx *sqldb.Tx) error {
			if _, inserted, err := insert(tx, "t7", "k7", "d1"); err != nil || !inserted {
				t.Errorf("InsertOnce in a transaction: inserted %v, %v", inserted, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, inserted, err := insert(db, "t8", "k7", "d2"); !inserted || err != nil {
			t.Errorf("the key of a rolled back claim: inserted %v, %v; want it free", inserted, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM things`); n != 5 {
			t.Errorf("things has %d rows, want 5: t1, t4, t5, old and t8", n)
		}
	})
}

// On SQLite this process's writers queue for the one write lock; a writer
// that gives up waiting gets its context's error and writes nothing.
func TestSQLiteWritersQueue(t *testing.T) {
	ctx := t.Context()
	db := sqldbtest.SQLite().Open(t)
	if _, err := db.Exec(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- db.InTx(ctx, func(tx *sqldb.Tx) error {
			close(holding)
			<-release
			_, err := tx.Exec(ctx, `INSERT INTO items (id) VALUES (1)`)
			return err
		})
	}()
	<-holding
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := db.InTx(wctx, func(tx *sqldb.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO items (id) VALUES (2)`)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a writer that gave up waiting: %v, want its context's deadline", err)
	}
	if _, err := db.Exec(wctx, `INSERT INTO items (id) VALUES (3)`); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a statement that gave up waiting: %v, want its context's deadline", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM items`); n != 1 {
		t.Errorf("items has %d rows, want 1: only the writer that held the lock wrote", n)
	}
}
