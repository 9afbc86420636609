package owner

import (
	"context"
	"errors"
	"time"

	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// Store keeps asks and notification channels. Implementations live in
// ownerstore (SQLite and PostgreSQL); who may see and change what is decided
// here, in the service.
type Store interface {
	// CreateAsk stores a, made by a request with digest digest. When an ask
	// with a's id exists already (a call with the same idempotency key), it
	// stores nothing: it returns the existing ask with created false when
	// that ask was made by the same request, and idempotency.ErrKeyReused
	// otherwise.
	CreateAsk(ctx context.Context, a *ownerv1.Ask, digest string) (stored *ownerv1.Ask, created bool, err error)
	// GetAsk returns the ask with that id, or ErrNotFound.
	GetAsk(ctx context.Context, id string) (*ownerv1.Ask, error)
	// ListAsks returns one page of asks, newest first, and the total count:
	// every agent's when agent is "", and any status when status is
	// ASK_STATUS_UNSPECIFIED.
	ListAsks(ctx context.Context, agent string, status ownerv1.AskStatus, offset, limit int) ([]*ownerv1.Ask, int, error)
	// ResolveAsk records how a pending ask ended. An ask that is no longer
	// pending is left as it is (the first outcome wins) and returned with
	// changed false; ErrNotFound when there is no such ask.
	ResolveAsk(ctx context.Context, id string, o Outcome) (a *ownerv1.Ask, changed bool, err error)
	// ExtendAsk moves a pending ask's expire time to expire when that is
	// later, and returns the ask; ErrNotFound when there is no such ask.
	ExtendAsk(ctx context.Context, id string, expire time.Time) (*ownerv1.Ask, error)
	// DeleteAsk removes a pending ask whose workflow could not be started,
	// so that a retry starts afresh; it does nothing to an ask that ended.
	DeleteAsk(ctx context.Context, id string) error

	// CreateChannel stores c; ErrNameTaken when its name is in use.
	CreateChannel(ctx context.Context, c *Channel) error
	// GetChannel returns the channel with that id, or ErrNotFound.
	GetChannel(ctx context.Context, id string) (*Channel, error)
	// ListChannels returns one page of channels by name, and the total count.
	ListChannels(ctx context.Context, offset, limit int) ([]*Channel, int, error)
	// EnabledChannels returns every enabled channel, by name.
	EnabledChannels(ctx context.Context) ([]*Channel, error)
	// UpdateChannel writes c's enabled flag, minimum level, webhook URL and
	// secret and update time; ErrNotFound when it does not exist.
	UpdateChannel(ctx context.Context, c *Channel) error
	// DeleteChannel removes the channel and returns it, or ErrNotFound.
	DeleteChannel(ctx context.Context, id string) (*Channel, error)
}

// Outcome is how an ask ended.
type Outcome struct {
	Status     ownerv1.AskStatus
	Answer     string
	AnsweredBy string
	At         time.Time
}

// Channel is a notification channel as stored, secret and full URL
// included; the API shows it through (*Channel).Proto.
type Channel struct {
	ID            string
	Name          string
	Kind          ownerv1.ChannelKind
	Enabled       bool
	MinLevel      ownerv1.NotificationLevel
	WebhookURL    string
	WebhookSecret string
	Created       time.Time
	Updated       time.Time
}

// Store errors.
var (
	ErrNotFound  = errors.New("not found")
	ErrNameTaken = errors.New("name taken")
)
