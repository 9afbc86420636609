package messages

import (
	"context"
	"errors"
	"time"

	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
)

// Store keeps messages. Implementations live in messagestore (SQLite and
// PostgreSQL); the rules about what is a duplicate live here.
type Store interface {
	// Send stores m unless a message with the same sender, recipient and
	// dedupKey was stored after the time after: then it stores nothing and
	// returns that earlier message with duplicate true. The check and the
	// write are atomic, so concurrent identical sends store one message.
	// With a non-empty idempotency key, a second Send by the same sender
	// with the same key stores nothing and returns the first message with
	// duplicate false, as the first Send answered, even while they race.
	Send(ctx context.Context, m *messagesv1.Message, dedupKey string, after time.Time, idempotencyKey string) (stored *messagesv1.Message, duplicate bool, err error)
	// Get returns the message with id, or ErrNotFound.
	Get(ctx context.Context, id string) (*messagesv1.Message, error)
	// InThread reports whether agent sent or received a message in thread.
	InThread(ctx context.Context, threadID, agent string) (bool, error)
	// Inbox returns one page of the messages sent to agent, newest first,
	// and their total count.
	Inbox(ctx context.Context, agent string, offset, limit int) ([]*messagesv1.Message, int, error)
	// Thread returns one page of the messages in thread that agent sent or
	// received, newest first, and their total count.
	Thread(ctx context.Context, threadID, agent string, offset, limit int) ([]*messagesv1.Message, int, error)
}

// ErrNotFound is returned by stores when a message does not exist.
var ErrNotFound = errors.New("not found")

// Clock returns the current time; tests inject a fixed one.
type Clock func() time.Time
