package sqldb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

func TestUpdate(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		db := e.Open(t)
		if _, err := db.Exec(ctx, `CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO jobs (id, status) VALUES (?, ?)`, "j1", "working"); err != nil {
			t.Fatal(err)
		}
		errNotFound := errors.New("not found")
		read := func(id string) func(context.Context) (string, error) {
			return func(ctx context.Context) (string, error) {
				return sqldb.One(db.QueryRow(ctx, `SELECT status FROM jobs WHERE id = ?`, id), func(r sqldb.Scanner) (string, error) {
					var s string
					err := r.Scan(&s)
					return s, err
				}, errNotFound)
			}
		}
		end := func(id, to string) (string, bool, error) {
			return sqldb.Update(ctx, db, "end job", read(id), `UPDATE jobs SET status = ? WHERE id = ? AND status = ?`, to, id, "working")
		}
		if got, changed, err := end("j1", "done"); err != nil || !changed || got != "done" {
			t.Errorf("first end = %q, changed %v, %v; want done, changed", got, changed, err)
		}
		// The first outcome wins: a second leaves the row as it is.
		if got, changed, err := end("j1", "cancelled"); err != nil || changed || got != "done" {
			t.Errorf("second end = %q, changed %v, %v; want done, unchanged", got, changed, err)
		}
		if _, _, err := end("j2", "done"); !errors.Is(err, errNotFound) {
			t.Errorf("end of a missing job: %v, want the read's not found", err)
		}
		if _, _, err := sqldb.Update(ctx, db, "end job", read("j1"), `UPDATE nothing SET x = ?`, 1); err == nil {
			t.Error("a failing statement: no error")
		}
	})
}
