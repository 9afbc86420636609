package servertest

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/idempotency"
)

// KeyRule checks the idempotency rule (internal/idempotency) on a write: the
// same key with the same request gives the first result and is marked as a
// replay of the call with that key; the same key with a different request is
// AlreadyExists, names the key and changes nothing.
//
// write makes the write with ctx (which carries the key): variant 0 and
// variant 1 are two different requests. It returns an id naming the result
// (a task id, a ledger entry id, ...).
func KeyRule(t *testing.T, ctx context.Context, key string, write func(ctx context.Context, variant int) (string, error)) {
	t.Helper()
	ctx = WithIdempotencyKey(ctx, key)
	call := func(variant int) (id string, replayOf string, replayed bool, err error) {
		cctx, info := connect.NewClientContext(ctx)
		id, err = write(cctx, variant)
		if err == nil {
			replayOf, replayed = idempotency.ReplayOf(info.ResponseHeader())
		}
		return id, replayOf, replayed, err
	}
	first, _, replayed, err := call(0)
	if err != nil {
		t.Fatalf("first write with key %q: %v", key, err)
	}
	if replayed {
		t.Errorf("first write with key %q is marked as a replay", key)
	}
	for i := range 2 {
		again, of, replayed, err := call(0)
		if err != nil || again != first {
			t.Fatalf("retry %d with key %q = %q, %v; want the first result %q", i+1, key, again, err, first)
		}
		if !replayed || of != key {
			t.Errorf("retry %d with key %q: replay header %q (present %v), want %q", i+1, key, of, replayed, key)
		}
		// The same key with another request is refused and changes nothing.
		_, _, _, err = call(1)
		if Code(t, err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), key) {
			t.Errorf("the same key %q with another request: %v, want already_exists naming the key", key, err)
		}
	}
}
