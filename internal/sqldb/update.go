package sqldb

import (
	"context"
	"fmt"
)

// Changed runs statement query (? placeholders) with args and reports
// whether it changed any row. op says what the statement does ("update
// channel"), for its errors.
func Changed(ctx context.Context, q Querier, op, query string, args ...any) (bool, error) {
	res, err := q.Exec(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return n > 0, nil
}

// Update is a conditional update of one row: query, an UPDATE whose WHERE
// names the row and the state it must be in (a status, say), changes it
// only from that state. Update answers the row as read reads it after,
// and whether the statement changed it: false when the row was not in
// that state (another writer moved it first, or it had ended). read's
// error (the store's ErrNotFound) when there is no such row.
func Update[T any](ctx context.Context, q Querier, op string, read func(context.Context) (T, error), query string, args ...any) (T, bool, error) {
	changed, err := Changed(ctx, q, op, query, args...)
	if err != nil {
		var zero T
		return zero, false, err
	}
	row, err := read(ctx)
	if err != nil {
		var zero T
		return zero, false, err
	}
	return row, changed, nil
}
