package sqldb

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/idempotency"
)

// Once is an idempotent insert: a new row that holds one or more keys (an
// idempotency key, a reference), each unique in the table, and is stored
// with the digest of the request that made it (idempotency.Digest).
type Once[T any] struct {
	// What names the row in errors: "insert <What>: ...".
	What string
	// Insert is the INSERT statement of the new row, with ? placeholders
	// bound to Args and without an ON CONFLICT clause.
	Insert string
	Args   []any
	// Holders selects the stored rows that hold any of the new row's keys,
	// oldest first, with ? placeholders bound to HolderArgs. A key that is
	// not given (NULL) holds nothing.
	Holders    string
	HolderArgs []any
	// Scan reads a row of Holders: the row and the request digest stored
	// with it ("" for a row stored before digests were kept).
	Scan func(Scanner) (row T, digest string, err error)
	// Digest is the digest of the request that makes the new row.
	Digest string
	// New is the new row, answered when it is inserted.
	New T
}

// ErrNotInserted is InsertOnce's answer when the new row conflicts with a
// stored row that holds none of its keys: a taken id, say.
var ErrNotInserted = errors.New("row conflicts with a stored row")

// InsertOnce inserts o's row unless a stored row holds one of its keys, and
// answers:
//
//   - o.New and inserted true when it inserted the row;
//   - the holder when every holder was stored for the same request (the
//     same digest, or no digest): the retry gets the first result;
//   - a holder stored for a different request, and idempotency.ErrKeyReused;
//   - ErrNotInserted when the row was not inserted and nothing holds its
//     keys.
//
// The insert comes first and decides; the holder is read after it. Run it as
// the first write of a transaction that does the rest of the work, so that
// the row claims its keys for the whole transaction: on PostgreSQL (READ
// COMMITTED) a concurrent insert of the same key waits until the first
// commits, then inserts nothing and reads the committed holder, or inserts
// its own row when the first rolled back; on SQLite writers run one after
// the other. A retry therefore always sees the first result, under any
// interleaving, never a half-done one.
func InsertOnce[T any](ctx context.Context, q Querier, o Once[T]) (row T, inserted bool, err error) {
	var zero T
	res, err := q.Exec(ctx, o.Insert+` ON CONFLICT DO NOTHING`, o.Args...)
	if err != nil {
		return zero, false, fmt.Errorf("insert %s: %w", o.What, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return zero, false, fmt.Errorf("insert %s: %w", o.What, err)
	}
	if n == 1 {
		return o.New, true, nil
	}
	rows, err := q.Query(ctx, o.Holders, o.HolderArgs...)
	if err != nil {
		return zero, false, fmt.Errorf("read %s holding the key: %w", o.What, err)
	}
	type holder struct {
		row    T
		digest string
	}
	held, err := collect(rows, "read "+o.What+" holding the key", func(r Scanner) (holder, error) {
		v, d, err := o.Scan(r)
		return holder{v, d}, err
	}, nil)
	if err != nil {
		return zero, false, err
	}
	if len(held) == 0 {
		return zero, false, fmt.Errorf("insert %s: %w", o.What, ErrNotInserted)
	}
	for _, h := range held {
		if h.digest != "" && h.digest != o.Digest {
			return h.row, false, idempotency.ErrKeyReused
		}
	}
	return held[0].row, false, nil
}

// DigestLast makes Once.Scan of a row scan function that reads any further
// columns into more: it reads the row, then its digest from the column after
// it.
func DigestLast[T any](scan func(r Scanner, more ...any) (T, error)) func(Scanner) (T, string, error) {
	return func(r Scanner) (T, string, error) {
		var digest string
		v, err := scan(r, &digest)
		return v, digest, err
	}
}

// NoDigest makes Once.Scan of a row scan function, for a table that keeps
// no request digests: a retry gets the holder, whatever it asked.
func NoDigest[T any](scan func(Scanner) (T, error)) func(Scanner) (T, string, error) {
	return func(r Scanner) (T, string, error) {
		v, err := scan(r)
		return v, "", err
	}
}
