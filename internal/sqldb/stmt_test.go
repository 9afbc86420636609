package sqldb_test

import (
	"context"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

// TestPreparedStatementsBehaveAsUnprepared: the prepared statements of
// QueryRowContext, QueryContext and ExecContext answer as database/sql's
// unprepared calls do — from many goroutines at once, for scripts, for
// missing rows and for bad SQL — on both engines.
func TestPreparedStatementsBehaveAsUnprepared(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := context.Background()
		db := sqldbtest.Open(t, e.NewDSN(t))
		// A script: every statement of it runs.
		if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL); CREATE TABLE other (x INTEGER)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO other (x) VALUES (1)`); err != nil {
			t.Fatalf("the script's second statement did not run: %v", err)
		}
		insert := db.Rebind(`INSERT INTO kv (k, v) VALUES (?, ?)`)
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				if _, err := db.ExecContext(ctx, insert, string(rune('a'+i%26))+string(rune('a'+i/26)), i); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		get := db.Rebind(`SELECT v FROM kv WHERE k = ?`)
		for i := range 40 {
			wg.Go(func() {
				var v int
				if err := db.QueryRowContext(ctx, get, string(rune('a'+i%26))+string(rune('a'+i/26))).Scan(&v); err != nil || v != i {
					t.Errorf("read %d: %d, %v", i, v, err)
				}
			})
		}
		wg.Wait()
		rows, err := db.QueryContext(ctx, `SELECT k FROM kv ORDER BY v`)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Close(); err != nil || n != 40 {
			t.Errorf("listed %d rows (%v), want 40", n, err)
		}
		if err := db.QueryRowContext(ctx, get, "missing").Scan(new(int)); err == nil {
			t.Error("a missing row scanned without error")
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO nowhere VALUES (1)`); err == nil {
			t.Error("SQL on a missing table ran without error")
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
