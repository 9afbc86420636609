package sqldb

import (
	"context"
	"database/sql"
	"sync"
)

// A store's SQL is a small, fixed set of query texts, run over and over.
// SQLite (the pure Go driver) compiles a query text on every call unless it
// is prepared: for a point read, compiling costs more than running it. So
// on SQLite, QueryRowContext, QueryContext and ExecContext run a statement
// prepared once per query text (and per connection, by database/sql).
// PostgreSQL's driver keeps its own statement cache per connection; there
// they go straight to database/sql. A transaction's Exec, Query and
// QueryRow run the same statements, bound to the transaction
// (sql.Tx.StmtContext), so a write transaction compiles nothing either.

// maxStatements bounds the prepared statements a DB keeps; a query text
// beyond them runs unprepared.
const maxStatements = 256

// statements are a DB's prepared statements by query text.
type statements struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// prepared returns the prepared statement of query, preparing it on first
// use, or nil when query is to run unprepared (PostgreSQL, too many query
// texts, or a query that does not prepare: the unprepared call then
// reports its error).
func (db *DB) prepared(ctx context.Context, query string) *sql.Stmt {
	if db.Dialect != SQLite {
		return nil
	}
	s := &db.stmts
	s.mu.Lock()
	st, ok := s.m[query]
	full := len(s.m) >= maxStatements
	s.mu.Unlock()
	if ok || full {
		return st
	}
	st, err := db.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.m[query]; ok {
		// Prepared meanwhile by another call.
		st.Close()
		return prev
	}
	if s.m == nil {
		s.m = map[string]*sql.Stmt{}
	}
	s.m[query] = st
	return st
}

// txPrepared is prepared for a statement of a transaction: a statement
// not prepared yet is prepared on a connection of its own, which a
// database of one connection (SQLite's :memory:) cannot give while the
// transaction holds it; there the statement runs unprepared.
func (db *DB) txPrepared(ctx context.Context, query string) *sql.Stmt {
	if db.Dialect != SQLite {
		return nil
	}
	db.stmts.mu.Lock()
	st, ok := db.stmts.m[query]
	db.stmts.mu.Unlock()
	if ok {
		return st
	}
	if db.Stats().MaxOpenConnections == 1 {
		return nil
	}
	return db.prepared(ctx, query)
}

// QueryRowContext runs query, prepared on SQLite, and returns its first row.
func (db *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := db.prepared(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return db.DB.QueryRowContext(ctx, query, args...)
}

// QueryContext runs query, prepared on SQLite, and returns its rows.
func (db *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := db.prepared(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return db.DB.QueryContext(ctx, query, args...)
}

// ExecContext runs query, prepared on SQLite, without returning rows.
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := db.prepared(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return db.DB.ExecContext(ctx, query, args...)
}

// Close closes the prepared statements and the database.
func (db *DB) Close() error {
	db.stmts.mu.Lock()
	for _, st := range db.stmts.m {
		st.Close()
	}
	db.stmts.m = nil
	db.stmts.mu.Unlock()
	return db.DB.Close()
}
