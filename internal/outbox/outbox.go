// Package outbox is the transactional outbox of a domain that declares
// events (toolmesh.tool.v1.event): the store writes an event in the same
// SQL transaction as the change it tells of, so the change and its event
// are committed together or not at all; the events service then pulls the
// outbox (toolmesh.outbox.v1.OutboxService, which Service serves), records
// each event once by its id, and acknowledges it, which deletes it here.
//
// A store opens the outbox on its database and writes in its transactions:
//
//	if err := outbox.Migrate(ctx, db); err != nil { ... }
//	err := db.InTx(ctx, func(tx *sqldb.Tx) error {
//		// ... the change ...
//		return outbox.Write(ctx, tx, outbox.New(outbox.ID("ask.answered", askID), "ask.answered", payload, now))
//	})
//
// An event's id is derived from the change (ID), so a change retried after
// a crash writes the same event, which the outbox and the events store both
// keep once.
package outbox

import (
	"context"
	"embed"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
)

//go:embed migrations
var migrations embed.FS

// Migrate creates the outbox table in db (a domain's own database).
func Migrate(ctx context.Context, db *sqldb.DB) error {
	return db.MigrateStore(ctx, "outbox", migrations)
}

// ID is the id of the event name about the change parts name: the same
// change always has the same id.
func ID(name string, parts ...string) string { return ids.Derive("evt", "event "+name, parts...) }

// New is the event name with payload, about a change at time at.
func New(id, name string, payload proto.Message, at time.Time) *outboxv1.Occurrence {
	a, err := anypb.New(payload)
	if err != nil {
		// Only a message without a descriptor fails, which is a bug.
		panic(fmt.Sprintf("outbox: pack payload of %s: %v", name, err))
	}
	return &outboxv1.Occurrence{EventId: id, Name: name, Payload: a, Time: timestamppb.New(at)}
}

// Write adds e to the outbox in q, the transaction of the change e tells
// of. An event with e's id in the outbox already is kept as it is.
func Write(ctx context.Context, q sqldb.Querier, e *outboxv1.Occurrence) error {
	if _, err := q.Exec(ctx, `INSERT INTO outbox (event_id, name, payload_type, payload, time_ms) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (event_id) DO NOTHING`,
		e.GetEventId(), e.GetName(), e.GetPayload().GetTypeUrl(), e.GetPayload().GetValue(), e.GetTime().AsTime().UnixMilli()); err != nil {
		return fmt.Errorf("write event %s to the outbox: %w", e.GetName(), err)
	}
	return nil
}

// Remove deletes the event with id from the outbox in q, when it is still
// there, and reports whether it was (a change undone before its event left
// the outbox).
func Remove(ctx context.Context, q sqldb.Querier, id string) (bool, error) {
	return sqldb.Changed(ctx, q, "remove event from the outbox", `DELETE FROM outbox WHERE event_id = ?`, id)
}

// DefaultPull is how many events a pull answers when it names no limit.
const DefaultPull = 100

// Pull returns the oldest n events of the outbox, oldest first.
func Pull(ctx context.Context, db *sqldb.DB, n int) ([]*outboxv1.Occurrence, error) {
	if n <= 0 {
		n = DefaultPull
	}
	return sqldb.All(ctx, db, "pull outbox", scan, `SELECT event_id, name, payload_type, payload, time_ms FROM outbox ORDER BY seq LIMIT ?`, n)
}

// Ack deletes the events with ids from the outbox and returns how many
// were there.
func Ack(ctx context.Context, db *sqldb.DB, ids []string) (int, error) {
	removed := 0
	err := db.InTx(ctx, func(tx *sqldb.Tx) error {
		removed = 0
		for _, id := range ids {
			ok, err := Remove(ctx, tx, id)
			if err != nil {
				return err
			}
			if ok {
				removed++
			}
		}
		return nil
	})
	return removed, err
}

// Len is how many events wait in the outbox (toolmesh check).
func Len(ctx context.Context, db *sqldb.DB) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count outbox: %w", err)
	}
	return n, nil
}

func scan(r sqldb.Scanner) (*outboxv1.Occurrence, error) {
	var (
		e      outboxv1.Occurrence
		a      anypb.Any
		timeMS int64
	)
	if err := r.Scan(&e.EventId, &e.Name, &a.TypeUrl, &a.Value, &timeMS); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	e.Payload, e.Time = &a, sqldb.Timestamp(timeMS)
	return &e, nil
}
