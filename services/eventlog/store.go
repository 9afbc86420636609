package eventlog

import (
	"context"
	"time"
)

// Store keeps the event log. Implementations live in eventsstore (SQLite
// and PostgreSQL). Every event has a sequence number; an event recorded
// after another has a larger one, and is never seen by a reader before an
// event with a smaller one (Record serialises its writers), so a reader
// that has read up to a number has missed nothing below it.
type Store interface {
	// Record stores the events whose ids it does not hold yet and
	// answers how many those were.
	Record(ctx context.Context, events []*Recorded) (recorded int, err error)
	// Read returns the events named name after seq (in order, at most n)
	// that filter keeps, the sequence number the read ended at, and the
	// highest number retention removed.
	Read(ctx context.Context, q Query) (Page, error)
	// End is the sequence number of the log's last event (or of the last
	// one pruned, when it is empty): a reader starting there reads what is
	// recorded from now on.
	End(ctx context.Context) (int64, error)
	// Prune removes the events recorded before; it answers how many.
	Prune(ctx context.Context, before time.Time) (int, error)
	// Has reports which of ids are recorded (toolmesh check).
	Has(ctx context.Context, ids []string) (map[string]bool, error)
}

// Recorded is one event as the log keeps it.
type Recorded struct {
	Seq      int64
	ID       string
	Name     string
	Agent    string
	Payload  []byte
	Data     string
	Time     time.Time
	Recorded time.Time
}

// Query is what Read reads.
type Query struct {
	Name string
	// After is the sequence number of the last event read before.
	After int64
	// Agent keeps only the events about this agent ("" keeps all).
	Agent string
	// Since keeps only the events that happened at or after it (zero
	// keeps all).
	Since time.Time
	// Limit is how many events to scan at most.
	Limit int
}

// Page is what Read found.
type Page struct {
	Events []*Recorded
	// End is the sequence number the read ended at: the last event's
	// when Full, else the log's last, so a cursor moves on in quiet times.
	End int64
	// Full: Limit events were found; there may be more.
	Full bool
	// PrunedThrough is the highest sequence number retention removed.
	PrunedThrough int64
}
