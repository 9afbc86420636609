package sqldb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/sqldb"
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

// TestTransactionsRunPreparedStatements: a transaction's Exec, Query and
// QueryRow, which run the DB's prepared statements bound to the
// transaction, see its own writes, leave nothing behind when it rolls
// back, report bad SQL, and work on a database of one connection
// (:memory:), where a statement cannot be prepared beside the transaction.
func TestTransactionsRunPreparedStatements(t *testing.T) {
	check := func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			err := db.InTx(ctx, func(tx *sqldb.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, fmt.Sprint("k", round), round); err != nil {
					return err
				}
				var n int
				if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != round+1 {
					t.Errorf("round %d: the transaction sees %d rows (%v), want %d", round, n, err, round+1)
				}
				rows, err := tx.Query(ctx, `SELECT k FROM kv WHERE v <= ?`, round)
				if err != nil {
					return err
				}
				listed := 0
				for rows.Next() {
					listed++
				}
				if err := rows.Close(); err != nil || listed != round+1 {
					t.Errorf("round %d: listed %d rows (%v), want %d", round, listed, err, round+1)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		undo := errors.New("undo")
		if err := db.InTx(ctx, func(tx *sqldb.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, "gone", 9); err != nil {
				return err
			}
			return undo
		}); !errors.Is(err, undo) {
			t.Fatalf("the rolled back transaction returned %v", err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != 3 {
			t.Errorf("after a rollback %d rows (%v), want 3", n, err)
		}
		if err := db.InTx(ctx, func(tx *sqldb.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO nowhere VALUES (1)`)
			return err
		}); err == nil {
			t.Error("SQL on a missing table ran without error in a transaction")
		}
	}
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		check(t, e.Open(t))
	})
	t.Run("sqlite in memory", func(t *testing.T) {
		db, err := sqldb.Open(context.Background(), ":memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, db)
	})
}
