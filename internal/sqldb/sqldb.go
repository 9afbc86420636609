// Package sqldb opens a service's database and runs its embedded migrations.
// A service gets SQLite (pure Go, WAL, synchronous=FULL) by default and
// PostgreSQL when it is given a postgres:// DSN. Stores write their SQL once,
// with ? placeholders, which the Exec, Query and QueryRow of a DB and of a
// Tx rebind for the dialect; One, All and Page read rows, InsertOnce writes
// a row idempotently and Update changes one from a given state, the same
// way in every store; Millis and Timestamp store times.
package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"modernc.org/sqlite"               // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect names the SQL flavour of a DB.
type Dialect string

// The supported dialects; they are also the folder names of migrations.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// DB is an open database with its dialect.
type DB struct {
	*sql.DB
	Dialect Dialect

	// writer is held by the one writer of a SQLite database in this
	// process (see awaitWriter); nil for PostgreSQL.
	writer chan struct{}
	// stmts are the prepared statements of QueryRowContext, QueryContext
	// and ExecContext (stmt.go).
	stmts statements
}

// Open opens the database named by dsn: a postgres:// or postgresql:// URL
// opens PostgreSQL; anything else is a SQLite file path (its directory is
// created). The connection is checked before Open returns.
func Open(ctx context.Context, dsn string) (*DB, error) {
	if dsn == "" {
		return nil, errors.New("open database: empty DSN")
	}
	var db *DB
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sdb, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		sdb.SetMaxOpenConns(16)
		sdb.SetMaxIdleConns(16) // the default, 2, reconnects under any concurrency
		sdb.SetConnMaxIdleTime(5 * time.Minute)
		db = &DB{DB: sdb, Dialect: Postgres}
	} else {
		sdb, err := openSQLite(dsn)
		if err != nil {
			return nil, err
		}
		db = &DB{DB: sdb, Dialect: SQLite, writer: make(chan struct{}, 1)}
	}
	return connected(ctx, db)
}

// OpenReadOnly opens an existing database to read it, as evidence: a SQLite
// file is opened read-only (and must exist); PostgreSQL sessions default to
// read-only transactions. Nothing is migrated.
func OpenReadOnly(ctx context.Context, dsn string) (*DB, error) {
	if dsn == "" {
		return nil, errors.New("open database: empty DSN")
	}
	var db *DB
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		sdb, err := sql.Open("pgx", dsn+sep+"default_transaction_read_only=on")
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		db = &DB{DB: sdb, Dialect: Postgres}
	} else {
		if _, err := os.Stat(dsn); err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		sdb, err := sql.Open("sqlite", "file:"+dsn+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		db = &DB{DB: sdb, Dialect: SQLite}
	}
	return connected(ctx, db)
}

// connected checks the connection to db, and closes it when there is none.
func connected(ctx context.Context, db *DB) (*DB, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to %s database: %w", db.Dialect, err)
	}
	return db, nil
}

func openSQLite(path string) (*sql.DB, error) {
	if path != ":memory:" {
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("create database directory: %w", err)
			}
		}
	}
	// WAL lets readers run beside the writer; synchronous=FULL makes every
	// commit durable; immediate transactions take the write lock up front so
	// a writer never fails mid-way. This process's writers queue for it in
	// awaitWriter; busy_timeout covers writers of other processes.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)" +
		"&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	if path == ":memory:" {
		// Every connection to :memory: is a separate, empty database.
		sdb.SetMaxOpenConns(1)
	} else {
		// database/sql keeps 2 idle connections by default: under any
		// concurrency it would open (and prepare statements on) new ones
		// for most calls.
		sdb.SetMaxIdleConns(16)
	}
	return sdb, nil
}

// Rebind rewrites ? placeholders into the DB's dialect ($1, $2, ... for
// PostgreSQL). Queries must not contain a literal question mark.
func (db *DB) Rebind(query string) string {
	if db.Dialect != Postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// Migrate applies, in order, every migration in migrations/<dialect>/ that
// has not run yet. Files are named NNNN_description.sql; each runs in its own
// transaction and is recorded in schema_migrations. Several processes may
// migrate one database at once (replicas starting together): each migration
// still runs exactly once. A database migrated by another service (another
// migration under the same number) is refused, not silently skipped.
func (db *DB) Migrate(ctx context.Context, migrations fs.FS) error {
	dir := string(db.Dialect)
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return fmt.Errorf("read %s migrations: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if err := db.InTx(ctx, func(tx *Tx) error {
		if err := db.lockMigrations(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			name TEXT NOT NULL,
			applied_at TEXT NOT NULL)`)
		return err
	}); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, name := range names {
		version, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", name)
		}
		body, err := fs.ReadFile(migrations, dir+"/"+name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		if err := db.InTx(ctx, func(tx *Tx) error {
			if err := db.lockMigrations(ctx, tx); err != nil {
				return err
			}
			// Checked under the lock: another process may just have applied it.
			var applied string
			err := tx.QueryRow(ctx, `SELECT name FROM schema_migrations WHERE version = ?`, version).Scan(&applied)
			switch {
			case err == nil && applied == name:
				return nil
			case err == nil:
				// Services number their migrations alike; skipping this one
				// would leave the service without its tables.
				return fmt.Errorf("the database already has a migration %d, %s, from another service; each service needs a database of its own", version, applied)
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				version, name, time.Now().UTC().Format(time.RFC3339))
			return err
		}); err != nil {
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
	}
	return nil
}

// MigrateStore applies the migrations a store embeds as
//
//	//go:embed migrations
//
// (migrations/<dialect>/NNNN_description.sql), as Migrate does. name, the
// store's domain, names it in the error: "migrate <name> store: ...".
func (db *DB) MigrateStore(ctx context.Context, name string, files fs.FS) error {
	sub, err := fs.Sub(files, "migrations")
	if err != nil {
		return err
	}
	if err := db.Migrate(ctx, sub); err != nil {
		return fmt.Errorf("migrate %s store: %w", name, err)
	}
	return nil
}

// migrateLockKey names the PostgreSQL advisory lock that serialises
// migrations of one database ("toolmesh" in ASCII).
const migrateLockKey int64 = 0x746f6f6c6d657368

// lockMigrations holds tx until no other transaction is migrating this
// database. SQLite needs nothing: its transactions start with the write
// lock (_txlock=immediate), which already serialises them.
func (db *DB) lockMigrations(ctx context.Context, tx *Tx) error {
	if db.Dialect != Postgres {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	return nil
}

// InTx runs fn in a transaction, committing when it returns nil. On
// PostgreSQL the transaction is READ COMMITTED (the default): each statement
// sees what was committed before it started, which InsertOnce relies on.
func (db *DB) InTx(ctx context.Context, fn func(*Tx) error) error {
	done, err := db.awaitWriter(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer done()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(&Tx{Tx: tx, db: db}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// InSnapshot runs fn in a read-only transaction that sees the database as
// it was when the transaction began (REPEATABLE READ), so rows committed
// meanwhile are not half seen, and ends it after. It does not queue with
// this process's writers.
func (db *DB) InSnapshot(ctx context.Context, fn func(*Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(&Tx{Tx: tx, db: db})
}

// awaitWriter waits until this process has no other write in flight on a
// SQLite database, and returns the function that ends this one. SQLite lets
// one writer in at a time, and a writer that finds the database locked
// polls for it (busy_timeout) with sleeps that grow to 100 ms, so writers
// that race for it would mostly sleep; queued here, they take turns at
// once. Other processes on the same file still meet busy_timeout.
// PostgreSQL needs no queue: writers wait only on the rows they share.
func (db *DB) awaitWriter(ctx context.Context) (done func(), err error) {
	if db.writer == nil {
		return func() {}, nil
	}
	select {
	case db.writer <- struct{}{}:
		return func() { <-db.writer }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// IsUniqueViolation reports whether err is, or wraps, a unique-constraint
// (or primary-key) violation in either dialect.
func IsUniqueViolation(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code == "23505" // unique_violation
	}
	if sqliteErr, ok := errors.AsType[*sqlite.Error](err); ok {
		code := sqliteErr.Code()
		return code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// IsBusy reports whether err is, or wraps, a database that could not do the
// work now but may on a retry: SQLite busy or locked (another connection
// holds the lock past busy_timeout), or PostgreSQL refusing for contention
// (serialization failure, deadlock, lock timeout) or unreachable (connection
// failures, a server starting or shutting down, too many connections), or a
// pooled connection the server dropped under a statement (the server
// crashed or restarted: io.ErrUnexpectedEOF, or a connection pgconn knows
// closed before anything was sent). Callers answer "unavailable", not
// "internal": the statement did not take effect, or — a connection lost
// during a commit — its outcome is unknown, and the retry the caller is
// told to make, with the same idempotency key, finds it if it did.
func IsBusy(err error) bool {
	if err == nil {
		return false
	}
	if sqliteErr, ok := errors.AsType[*sqlite.Error](err); ok {
		switch sqliteErr.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"55P03", // lock_not_available (lock_timeout)
			"53300", // too_many_connections
			"57P01", // admin_shutdown
			"57P02", // crash_shutdown
			"57P03": // cannot_connect_now
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || pgconn.SafeToRetry(err)
}
