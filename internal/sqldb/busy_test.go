package sqldb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

// TestIsBusyOnSQLite forces real SQLite failures: a write while another
// connection holds the lock is busy; a missing table and a trigger that
// refuses are not.
func TestIsBusyOnSQLite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	db := sqldbtest.Open(t, path)
	if _, err := db.ExecContext(ctx, `CREATE TABLE notes (body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// Another process's connection, holding the write lock.
	holder := sqldbtest.Open(t, path)
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	// A writer that waits 50 ms for the lock, not the default 10 s.
	writer := sqldbtest.Open(t, path)
	writer.SetMaxOpenConns(1)
	if _, err := writer.ExecContext(ctx, `PRAGMA busy_timeout = 50`); err != nil {
		t.Fatal(err)
	}
	err = writer.InTx(ctx, func(tx *sqldb.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO notes (body) VALUES ('x')`)
		return err
	})
	if err == nil || !sqldb.IsBusy(fmt.Errorf("create note: %w", err)) {
		t.Errorf("write under another connection's lock: %v; IsBusy false, want a busy error", err)
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	if _, err := db.ExecContext(ctx, `CREATE TRIGGER refuse BEFORE INSERT ON notes BEGIN SELECT RAISE(ABORT, 'refused by /srv/hooks/notes.sh'); END`); err != nil {
		t.Fatal(err)
	}
	err = exec(ctx, db, `INSERT INTO notes (body) VALUES ('x')`)
	notBusy(t, "trigger", err)
	if !strings.Contains(fmt.Sprint(err), "/srv/hooks/notes.sh") {
		t.Errorf("trigger error %v does not carry the trigger's text", err)
	}
	notBusy(t, "missing table", exec(ctx, db, `SELECT body FROM missing`))
}

// TestIsBusyOnPostgres forces real PostgreSQL failures: a lock timeout and
// a server that hangs up are busy; a missing table is not.
func TestIsBusyOnPostgres(t *testing.T) {
	ctx := t.Context()
	dsn := pg.NewDatabase(t)
	db := sqldbtest.Open(t, dsn)
	if _, err := db.ExecContext(ctx, `CREATE TABLE notes (body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, `LOCK TABLE notes IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	err = db.InTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '50ms'`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO notes (body) VALUES ('x')`)
		return err
	})
	if err == nil || !sqldb.IsBusy(err) {
		t.Errorf("write behind a held table lock: %v; IsBusy false, want a lock timeout", err)
	}
	notBusy(t, "missing table", exec(ctx, db, `SELECT body FROM missing`))

	// A server that hangs up on every connection.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = sqldb.Open(ctx, "postgres://nobody@"+lis.Addr().String()+"/none?sslmode=disable&connect_timeout=5")
	if err == nil || !sqldb.IsBusy(err) {
		t.Errorf("open a server that hangs up: %v; IsBusy false, want a connection failure", err)
	}
}

// TestIsBusyByCode pins the PostgreSQL codes that are busy.
func TestIsBusyByCode(t *testing.T) {
	for code, want := range map[string]bool{
		"40001": true, "40P01": true, "55P03": true, "53300": true, "57P01": true, "57P03": true, "08006": true,
		"23505": false, "42P01": false, "P0001": false, "57014": false,
	} {
		if got := sqldb.IsBusy(fmt.Errorf("store: %w", &pgconn.PgError{Code: code})); got != want {
			t.Errorf("IsBusy(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
	// What the chaos run saw on PostgreSQL when the server crashed under a
	// transaction's statement: the connection's read ended mid-message.
	if !sqldb.IsBusy(fmt.Errorf("count today's tasks: %w", io.ErrUnexpectedEOF)) {
		t.Error("IsBusy is false for a connection lost under a statement (unexpected EOF)")
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	if !sqldb.IsBusy(fmt.Errorf("read task: %w", reset)) {
		t.Error("IsBusy is false for a connection the server reset under a statement")
	}
	if sqldb.IsBusy(nil) || sqldb.IsBusy(errors.New("database is locked")) || sqldb.IsBusy(context.Canceled) {
		t.Error("IsBusy is true for nil, a bare message or a cancellation")
	}
}

func exec(ctx context.Context, db *sqldb.DB, query string) error {
	_, err := db.ExecContext(ctx, query)
	return err
}

func notBusy(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || sqldb.IsBusy(err) {
		t.Errorf("%s: %v; want an error that is not busy", what, err)
	}
}
