package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// Scanner reads the columns of one row: *sql.Row and *sql.Rows are both
// Scanners, so a store writes one scan function per row type.
type Scanner interface {
	Scan(dest ...any) error
}

// One reads row with scan and returns notFound (a store's ErrNotFound)
// when there is no row; any other error is scan's.
func One[T any](row *sql.Row, scan func(Scanner) (T, error), notFound error) (T, error) {
	v, err := scan(row)
	if errors.Is(err, sql.ErrNoRows) {
		var zero T
		return zero, notFound
	}
	return v, err
}

// All runs query (? placeholders) with args and reads every row with scan;
// nil when there is none. op says what the query does ("list channels"),
// for its errors; scan's errors are returned as they are.
func All[T any](ctx context.Context, db *DB, op string, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return collect(rows, op, scan, nil)
}

// ListQuery selects a list of rows:
//
//	SELECT Columns FROM From [WHERE Where] ORDER BY OrderBy
type ListQuery struct {
	// What names the rows in errors: "count <What>: ...", "list <What>: ...".
	What    string
	Columns string
	From    string
	// Where is a condition with ? placeholders bound to Args; empty for
	// every row.
	Where   string
	Args    []any
	OrderBy string
}

// And narrows q to the rows that also meet cond, with its arguments.
func (q *ListQuery) And(cond string, args ...any) {
	if q.Where != "" {
		cond = q.Where + ` AND ` + cond
	}
	q.Where = cond
	q.Args = append(q.Args, args...)
}

// Page returns the rows of q from offset, at most limit of them, each read
// with scan, and how many rows q has in all.
func Page[T any](ctx context.Context, db *DB, q ListQuery, offset, limit int, scan func(Scanner) (T, error)) ([]T, int, error) {
	where := ""
	if q.Where != "" {
		where = ` WHERE ` + q.Where
	}
	var total int
	if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM `+q.From+where, q.Args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count %s: %w", q.What, err)
	}
	op := "list " + q.What
	rows, err := db.Query(ctx, `SELECT `+q.Columns+` FROM `+q.From+where+` ORDER BY `+q.OrderBy+` LIMIT ? OFFSET ?`,
		slices.Concat(q.Args, []any{limit, offset})...)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", op, err)
	}
	list, err := collect(rows, op, scan, make([]T, 0, min(limit, total)))
	if err != nil {
		return nil, 0, err
	}
	return list, total, nil
}

// collect appends every row of rows, read with scan, to list and closes
// rows.
func collect[T any](rows *sql.Rows, op string, scan func(Scanner) (T, error), list []T) ([]T, error) {
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return list, nil
}

// Millis is ts as the Unix milliseconds a store keeps (0 for none).
func Millis(ts *timestamppb.Timestamp) int64 {
	if ts == nil {
		return 0
	}
	return ts.AsTime().UnixMilli()
}

// Timestamp is a stored Unix millisecond time (nil for 0: none).
func Timestamp(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms).UTC())
}
