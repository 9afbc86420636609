// Package ownerstore keeps the owner domain's asks and notification channels
// in SQL: SQLite by default, PostgreSQL when the service is given a
// postgres:// DSN. Both run the same queries; the schemas live in
// migrations/<dialect>/.
package ownerstore

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of owner.Store.
type Store struct {
	db *sqldb.DB
}

var _ owner.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "owner", migrations); err != nil {
		return nil, err
	}
	if err := outbox.Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const askColumns = `id, agent_id, question, options_json, context, status, answer, answered_by, create_ms, expire_ms, resolve_ms, workflow_id, run`

// CreateAsk implements owner.Store, with sqldb.InsertOnce: the ask's id
// is its key.
func (s *Store) CreateAsk(ctx context.Context, a *ownerv1.Ask, digest string) (*ownerv1.Ask, bool, error) {
	opts := a.GetOptions()
	if opts == nil {
		opts = []string{}
	}
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return nil, false, fmt.Errorf("encode options: %w", err)
	}
	var (
		stored  *ownerv1.Ask
		created bool
	)
	// The ask and its event ask.created, together.
	err = s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		stored, created, err = sqldb.InsertOnce(ctx, tx, sqldb.Once[*ownerv1.Ask]{
			What:   "ask",
			Insert: `INSERT INTO asks (` + askColumns + `, request_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			Args: []any{a.GetAskId(), a.GetAgentId(), a.GetQuestion(), string(optsJSON), a.GetContext(), int32(a.GetStatus()),
				a.GetAnswer(), a.GetAnsweredBy(), sqldb.Millis(a.GetCreateTime()), sqldb.Millis(a.GetExpireTime()), sqldb.Millis(a.GetResolveTime()), a.GetWorkflowId(), a.GetRun(), digest},
			Holders:    `SELECT ` + askColumns + `, request_digest FROM asks WHERE id = ?`,
			HolderArgs: []any{a.GetAskId()},
			Scan:       sqldb.DigestLast(scanAskRow),
			Digest:     digest,
			New:        a,
		})
		if err != nil || !created {
			return err
		}
		return outbox.Write(ctx, tx, askEvent(owner.EventAskCreated, a, a.GetCreateTime().AsTime()))
	})
	if err != nil && stored == nil {
		return nil, false, err
	}
	return stored, created, err
}

// askEvent is the event name about ask a, at at.
func askEvent(name string, a *ownerv1.Ask, at time.Time) *outboxv1.Occurrence {
	return outbox.New(outbox.ID(name, a.GetAskId()), name, owner.AskEventPayload(name, a), at)
}

// GetAsk implements owner.Store.
func (s *Store) GetAsk(ctx context.Context, id string) (*ownerv1.Ask, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+askColumns+` FROM asks WHERE id = ?`, id), scanAsk, owner.ErrNotFound)
}

// ListAsks implements owner.Store.
func (s *Store) ListAsks(ctx context.Context, agent string, status ownerv1.AskStatus, offset, limit int) ([]*ownerv1.Ask, int, error) {
	q := sqldb.ListQuery{What: "asks", Columns: askColumns, From: "asks", OrderBy: "create_ms DESC, id DESC"}
	if agent != "" {
		q.And(`agent_id = ?`, agent)
	}
	if status != ownerv1.AskStatus_ASK_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(status))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scanAsk)
}

// ResolveAsk implements owner.Store: the outcome and its event (ask.answered,
// ask.expired or ask.cancelled), together.
func (s *Store) ResolveAsk(ctx context.Context, id string, o owner.Outcome) (*ownerv1.Ask, bool, error) {
	var (
		a       *ownerv1.Ask
		changed bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		a, changed, err = sqldb.Update(ctx, tx, "resolve ask", func(ctx context.Context) (*ownerv1.Ask, error) { return getAsk(ctx, tx, id) },
			`UPDATE asks SET status = ?, answer = ?, answered_by = ?, resolve_ms = ? WHERE id = ? AND status = ?`,
			int32(o.Status), o.Answer, o.AnsweredBy, o.At.UnixMilli(), id, int32(ownerv1.AskStatus_ASK_STATUS_PENDING))
		if err != nil || !changed {
			return err
		}
		name := owner.AskEventName(a.GetStatus())
		if name == "" {
			return nil
		}
		return outbox.Write(ctx, tx, askEvent(name, a, o.At))
	})
	if err != nil {
		return nil, false, err
	}
	return a, changed, nil
}

// getAsk reads the ask with id in q.
func getAsk(ctx context.Context, q sqldb.Querier, id string) (*ownerv1.Ask, error) {
	return sqldb.One(q.QueryRow(ctx, `SELECT `+askColumns+` FROM asks WHERE id = ?`, id), scanAsk, owner.ErrNotFound)
}

// ExtendAsk implements owner.Store.
func (s *Store) ExtendAsk(ctx context.Context, id string, expire time.Time) (*ownerv1.Ask, error) {
	if _, err := s.db.Exec(ctx, `UPDATE asks SET expire_ms = ? WHERE id = ? AND status = ? AND expire_ms < ?`,
		expire.UnixMilli(), id, int32(ownerv1.AskStatus_ASK_STATUS_PENDING), expire.UnixMilli()); err != nil {
		return nil, fmt.Errorf("extend ask: %w", err)
	}
	return s.GetAsk(ctx, id)
}

// DeleteAsk implements owner.Store. The ask's event ask.created goes with
// it when it is still in the outbox; when it has left already, the ask ends
// for its readers with ask.cancelled.
func (s *Store) DeleteAsk(ctx context.Context, id string) error {
	return s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		a, err := getAsk(ctx, tx, id)
		if errors.Is(err, owner.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete ask: %w", err)
		}
		deleted, err := sqldb.Changed(ctx, tx, "delete ask", `DELETE FROM asks WHERE id = ? AND status = ?`, id, int32(ownerv1.AskStatus_ASK_STATUS_PENDING))
		if err != nil || !deleted {
			return err
		}
		unsent, err := outbox.Remove(ctx, tx, outbox.ID(owner.EventAskCreated, id))
		if err != nil || unsent {
			return err
		}
		a.Status = ownerv1.AskStatus_ASK_STATUS_CANCELLED
		now := time.Now()
		a.ResolveTime = timestamppb.New(now)
		return outbox.Write(ctx, tx, askEvent(owner.EventAskCancelled, a, now))
	})
}

func scanAsk(r sqldb.Scanner) (*ownerv1.Ask, error) {
	return scanAskRow(r)
}

// scanAskRow reads a row of askColumns, and of more columns into more.
func scanAskRow(r sqldb.Scanner, more ...any) (*ownerv1.Ask, error) {
	var (
		a                             ownerv1.Ask
		optsJSON                      string
		status                        int64
		createMS, expireMS, resolveMS int64
	)
	if err := r.Scan(append([]any{&a.AskId, &a.AgentId, &a.Question, &optsJSON, &a.Context, &status, &a.Answer, &a.AnsweredBy,
		&createMS, &expireMS, &resolveMS, &a.WorkflowId, &a.Run}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read ask: %w", err)
	}
	if err := json.Unmarshal([]byte(optsJSON), &a.Options); err != nil {
		return nil, fmt.Errorf("read ask options: %w", err)
	}
	if len(a.Options) == 0 {
		a.Options = nil
	}
	a.Status = ownerv1.AskStatus(status)
	a.CreateTime, a.ExpireTime, a.ResolveTime = sqldb.Timestamp(createMS), sqldb.Timestamp(expireMS), sqldb.Timestamp(resolveMS)
	return &a, nil
}

const channelColumns = `id, name, kind, enabled, min_level, webhook_url, webhook_secret, create_ms, update_ms`

// CreateChannel implements owner.Store.
func (s *Store) CreateChannel(ctx context.Context, c *owner.Channel) error {
	_, err := s.db.Exec(ctx, `INSERT INTO channels (`+channelColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.Name, int32(c.Kind), c.Enabled, int32(c.MinLevel), c.WebhookURL, c.WebhookSecret, c.Created.UnixMilli(), c.Updated.UnixMilli())
	if sqldb.IsUniqueViolation(err) {
		return owner.ErrNameTaken
	}
	if err != nil {
		return fmt.Errorf("insert channel: %w", err)
	}
	return nil
}

// GetChannel implements owner.Store.
func (s *Store) GetChannel(ctx context.Context, id string) (*owner.Channel, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+channelColumns+` FROM channels WHERE id = ?`, id), scanChannel, owner.ErrNotFound)
}

// ListChannels implements owner.Store.
func (s *Store) ListChannels(ctx context.Context, offset, limit int) ([]*owner.Channel, int, error) {
	return sqldb.Page(ctx, s.db, sqldb.ListQuery{What: "channels", Columns: channelColumns, From: "channels", OrderBy: "name"},
		offset, limit, scanChannel)
}

// EnabledChannels implements owner.Store.
func (s *Store) EnabledChannels(ctx context.Context) ([]*owner.Channel, error) {
	return sqldb.All(ctx, s.db, "list channels", scanChannel, `SELECT `+channelColumns+` FROM channels WHERE enabled = ? ORDER BY name`, true)
}

// UpdateChannel implements owner.Store.
func (s *Store) UpdateChannel(ctx context.Context, c *owner.Channel) error {
	changed, err := sqldb.Changed(ctx, s.db, "update channel",
		`UPDATE channels SET enabled = ?, min_level = ?, webhook_url = ?, webhook_secret = ?, update_ms = ? WHERE id = ?`,
		c.Enabled, int32(c.MinLevel), c.WebhookURL, c.WebhookSecret, c.Updated.UnixMilli(), c.ID)
	if err == nil && !changed {
		return owner.ErrNotFound
	}
	return err
}

// DeleteChannel implements owner.Store.
func (s *Store) DeleteChannel(ctx context.Context, id string) (*owner.Channel, error) {
	var out *owner.Channel
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		c, err := sqldb.One(tx.QueryRow(ctx, `SELECT `+channelColumns+` FROM channels WHERE id = ?`, id), scanChannel, owner.ErrNotFound)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM channels WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete channel: %w", err)
		}
		out = c
		return nil
	})
	return out, err
}

func scanChannel(r sqldb.Scanner) (*owner.Channel, error) {
	var (
		c                  owner.Channel
		kind, minLevel     int64
		createMS, updateMS int64
	)
	if err := r.Scan(&c.ID, &c.Name, &kind, &c.Enabled, &minLevel, &c.WebhookURL, &c.WebhookSecret, &createMS, &updateMS); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read channel: %w", err)
	}
	c.Kind = ownerv1.ChannelKind(kind)
	c.MinLevel = ownerv1.NotificationLevel(minLevel)
	c.Created = time.UnixMilli(createMS).UTC()
	c.Updated = time.UnixMilli(updateMS).UTC()
	return &c, nil
}
