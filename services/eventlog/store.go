package eventlog

import (
	"context"
	"errors"
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
	SubscriptionStore
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

// SubscriptionStore keeps webhook subscriptions (events/subscribe).
type SubscriptionStore interface {
	// SaveSubscription creates s, or refreshes the subscription with its
	// id: a live one keeps its position and creation and takes s's TTL and
	// secret (its secret signing on until prevUntil); an ended one starts
	// again from s's position. Creating one (or restarting an ended one)
	// fails with ErrSubscriptionCap when its principal holds limit live
	// ones already. It answers the subscription as stored.
	SaveSubscription(ctx context.Context, s *Subscription, prevUntil time.Time, limit int) (*Subscription, error)
	// Subscription returns one subscription, or ErrNoSubscription.
	Subscription(ctx context.Context, id string) (*Subscription, error)
	// EndSubscription ends a live subscription; it reports whether one
	// was live.
	EndSubscription(ctx context.Context, id, reason string, now time.Time) (bool, error)
	// AckSubscription moves a subscription's position up to cursor.
	AckSubscription(ctx context.Context, id string, cursor int64) error
	// MarkDelivered records that the receiver acknowledged event seq;
	// Delivered reports whether it did. AckSubscription forgets the marks
	// at or below the cursor.
	MarkDelivered(ctx context.Context, id string, seq int64) error
	Delivered(ctx context.Context, id string, seq int64) (bool, error)
	// RecordDelivery records how a delivery attempt went: errCategory ""
	// for success.
	RecordDelivery(ctx context.Context, id string, at time.Time, errCategory string) error
	// Event returns the event with sequence number seq, or
	// ErrNoEvent when retention removed it.
	Event(ctx context.Context, seq int64) (*Recorded, error)
}

// Errors of SubscriptionStore.
var (
	ErrSubscriptionCap = errors.New("subscription cap reached")
	ErrNoSubscription  = errors.New("no such subscription")
	ErrNoEvent         = errors.New("no such event")
)

// Subscription is one webhook subscription.
type Subscription struct {
	// ID is derived from (principal, URL, name, arguments).
	ID string
	// Principal is whom the cap counts it against (the subject, or the
	// agent when there is none).
	Principal string
	// The subscriber's identity.
	Subject, Agent string
	Roles, Grants  []string
	// Name is the event type; Arguments its arguments (canonical JSON, ""
	// for none).
	Name, Arguments string
	URL             string
	// Secret is the sealed signing secret; PrevSecret the one a refresh
	// replaced, which signs too until PrevUntil.
	Secret, PrevSecret []byte
	PrevUntil          time.Time
	// Cursor: every event at or before it is delivered or abandoned.
	Cursor int64
	// StartTruncated: the cursor the subscription started from was
	// older than the log's retention.
	StartTruncated bool
	// Expire is when it ends unless refreshed (zero: never).
	Expire           time.Time
	Created, Updated time.Time
	// Ended is when it ended (zero: live), for EndReason.
	Ended     time.Time
	EndReason string
	// LastDelivery is the last successful delivery; LastError the last
	// attempt's failure category ("" when it succeeded); FailedSince when
	// failures began.
	LastDelivery time.Time
	LastError    string
	FailedSince  time.Time
}

// Live reports whether s delivers at now.
func (s *Subscription) Live(now time.Time) bool {
	return s.Ended.IsZero() && (s.Expire.IsZero() || now.Before(s.Expire))
}
