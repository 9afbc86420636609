package sqldb

import (
	"context"
	"database/sql"
)

// Querier runs statements written with ? placeholders, rebound for the
// database's dialect: a *DB, or a *Tx of one.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	Query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*DB)(nil)
	_ Querier = (*Tx)(nil)
)

// Exec runs a statement written with ? placeholders, as one writer (see
// awaitWriter). Inside InTx, use the Tx's Exec.
func (db *DB) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	done, err := db.awaitWriter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return db.ExecContext(ctx, db.Rebind(query), args...)
}

// Query runs a query written with ? placeholders.
func (db *DB) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return db.QueryContext(ctx, db.Rebind(query), args...)
}

// QueryRow runs a query written with ? placeholders that returns at most
// one row.
func (db *DB) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return db.QueryRowContext(ctx, db.Rebind(query), args...)
}

// Tx is a transaction of a DB (see InTx).
type Tx struct {
	*sql.Tx
	db *DB
}

// Exec runs a statement written with ? placeholders (prepared once on
// SQLite: stmt.go).
func (tx *Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query = tx.db.Rebind(query)
	if st := tx.db.txPrepared(ctx, query); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// Query runs a query written with ? placeholders (prepared once on
// SQLite).
func (tx *Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query = tx.db.Rebind(query)
	if st := tx.db.txPrepared(ctx, query); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, query, args...)
}

// QueryRow runs a query written with ? placeholders that returns at most
// one row (prepared once on SQLite).
func (tx *Tx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query = tx.db.Rebind(query)
	if st := tx.db.txPrepared(ctx, query); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}
