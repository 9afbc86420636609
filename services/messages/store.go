package messages

import (
	"context"
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
)

// Store keeps messages. Implementations live in messagesstore (SQLite and
// PostgreSQL); the rules about what is a duplicate live here.
type Store interface {
	// Send stores m unless a message with the same sender, recipient and
	// dedupKey was stored after the time after: then it stores nothing and
	// answers that earlier message as a duplicate. The check and the write
	// are atomic, so concurrent identical sends store one message.
	//
	// A call with an idempotency key the sender used before stores nothing:
	// when the key's send was the same request (call.Digest) Send answers
	// as that send did, marked Replayed, even while they race; otherwise it
	// returns idempotency.ErrKeyReused.
	Send(ctx context.Context, m *messagesv1.Message, dedupKey string, after time.Time, call idempotency.Call) (Sent, error)
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

// Sent is what a Send answered.
type Sent struct {
	// Message is the message stored, or the earlier one it repeats.
	Message *messagesv1.Message
	// Duplicate is true when the send was suppressed as a repeat of
	// Message within the dedup window.
	Duplicate bool
	// Replayed is true when the call repeated an earlier call with the same
	// idempotency key, and this is that call's answer.
	Replayed bool
}

// ErrNotFound is returned by stores when a message does not exist.
var ErrNotFound = errors.New("not found")
