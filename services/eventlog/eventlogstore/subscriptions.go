package eventlogstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/eventlog"
)

var _ eventlog.SubscriptionStore = (*Store)(nil)

const subscriptionColumns = `id, principal, subject, agent_id, roles, grants, name, arguments, url, secret, prev_secret, prev_until_ms,
	cursor, start_truncated, expire_ms, create_ms, update_ms, ended_ms, end_reason, last_delivery_ms, last_error, failed_since_ms`

func scanSubscription(r sqldb.Scanner) (*eventlog.Subscription, error) {
	var (
		s                                   eventlog.Subscription
		roles, grants                       string
		prevUntil, expire, created, updated int64
		ended, lastDelivery, failedSince    int64
	)
	if err := r.Scan(&s.ID, &s.Principal, &s.Subject, &s.Agent, &roles, &grants, &s.Name, &s.Arguments, &s.URL, &s.Secret, &s.PrevSecret, &prevUntil,
		&s.Cursor, &s.StartTruncated, &expire, &created, &updated, &ended, &s.EndReason, &lastDelivery, &s.LastError, &failedSince); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(roles), &s.Roles); err != nil {
		return nil, fmt.Errorf("subscription %s roles: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(grants), &s.Grants); err != nil {
		return nil, fmt.Errorf("subscription %s grants: %w", s.ID, err)
	}
	s.PrevUntil, s.Expire, s.Created, s.Updated = millis(prevUntil), millis(expire), millis(created), millis(updated)
	s.Ended, s.LastDelivery, s.FailedSince = millis(ended), millis(lastDelivery), millis(failedSince)
	return &s, nil
}

// millis is the time of a column in milliseconds; 0 is the zero time.
func millis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// ms is the column of t; the zero time is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// SaveSubscription implements eventlog.SubscriptionStore.
func (s *Store) SaveSubscription(ctx context.Context, sub *eventlog.Subscription, prevUntil time.Time, limit int) (*eventlog.Subscription, error) {
	var out *eventlog.Subscription
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		cur, err := sqldb.One(tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE id = ?`, sub.ID), scanSubscription, eventlog.ErrNoSubscription)
		if err != nil && !errors.Is(err, eventlog.ErrNoSubscription) {
			return fmt.Errorf("read subscription: %w", err)
		}
		now := sub.Updated
		if cur != nil && cur.Live(now) {
			// A refresh: same position, new TTL and secret; the old
			// secret signs on through the grace window.
			if _, err := tx.Exec(ctx, `UPDATE subscriptions SET secret = ?, prev_secret = ?, prev_until_ms = ?, expire_ms = ?, update_ms = ?,
				roles = ?, grants = ? WHERE id = ?`, sub.Secret, cur.Secret, ms(prevUntil), ms(sub.Expire), ms(now),
				jsonList(sub.Roles), jsonList(sub.Grants), sub.ID); err != nil {
				return fmt.Errorf("refresh subscription: %w", err)
			}
		} else {
			var live int
			if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM subscriptions WHERE principal = ? AND ended_ms = 0 AND (expire_ms = 0 OR expire_ms > ?) AND id <> ?`,
				sub.Principal, ms(now), sub.ID).Scan(&live); err != nil {
				return fmt.Errorf("count subscriptions: %w", err)
			}
			if live >= limit {
				return eventlog.ErrSubscriptionCap
			}
			if _, err := tx.Exec(ctx, `DELETE FROM subscriptions WHERE id = ?`, sub.ID); err != nil {
				return fmt.Errorf("replace subscription: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO subscriptions (`+subscriptionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', 0, '', 0)`,
				sub.ID, sub.Principal, sub.Subject, sub.Agent, jsonList(sub.Roles), jsonList(sub.Grants), sub.Name, sub.Arguments, sub.URL,
				sub.Secret, nil, int64(0), sub.Cursor, sub.StartTruncated, ms(sub.Expire), ms(now), ms(now)); err != nil {
				return fmt.Errorf("save subscription: %w", err)
			}
		}
		out, err = sqldb.One(tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE id = ?`, sub.ID), scanSubscription, eventlog.ErrNoSubscription)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func jsonList(l []string) string {
	if l == nil {
		l = []string{}
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// Subscription implements eventlog.SubscriptionStore.
func (s *Store) Subscription(ctx context.Context, id string) (*eventlog.Subscription, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE id = ?`, id), scanSubscription, eventlog.ErrNoSubscription)
}

// EndSubscription implements eventlog.SubscriptionStore.
func (s *Store) EndSubscription(ctx context.Context, id, reason string, now time.Time) (bool, error) {
	ended := false
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		if ended, err = sqldb.Changed(ctx, tx, "end subscription",
			`UPDATE subscriptions SET ended_ms = ?, end_reason = ?, update_ms = ? WHERE id = ? AND ended_ms = 0`, ms(now), reason, ms(now), id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM subscription_deliveries WHERE subscription_id = ?`, id); err != nil {
			return fmt.Errorf("end subscription: %w", err)
		}
		return nil
	})
	return ended, err
}

// AckSubscription implements eventlog.SubscriptionStore.
func (s *Store) AckSubscription(ctx context.Context, id string, cursor int64) error {
	return s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE subscriptions SET cursor = ? WHERE id = ? AND cursor < ?`, cursor, id, cursor); err != nil {
			return fmt.Errorf("ack subscription: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM subscription_deliveries WHERE subscription_id = ? AND seq <= ?`, id, cursor); err != nil {
			return fmt.Errorf("ack subscription: %w", err)
		}
		return nil
	})
}

// MarkDelivered implements eventlog.SubscriptionStore.
func (s *Store) MarkDelivered(ctx context.Context, id string, seq int64) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO subscription_deliveries (subscription_id, seq) VALUES (?, ?) ON CONFLICT DO NOTHING`, id, seq); err != nil {
		return fmt.Errorf("mark delivered: %w", err)
	}
	return nil
}

// Delivered implements eventlog.SubscriptionStore.
func (s *Store) Delivered(ctx context.Context, id string, seq int64) (bool, error) {
	var n int
	if err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM subscription_deliveries WHERE subscription_id = ? AND seq = ?`, id, seq).Scan(&n); err != nil {
		return false, fmt.Errorf("read deliveries: %w", err)
	}
	return n > 0, nil
}

// RecordDelivery implements eventlog.SubscriptionStore.
func (s *Store) RecordDelivery(ctx context.Context, id string, at time.Time, errCategory string) error {
	var err error
	if errCategory == "" {
		_, err = s.db.Exec(ctx, `UPDATE subscriptions SET last_delivery_ms = ?, last_error = '', failed_since_ms = 0 WHERE id = ?`, ms(at), id)
	} else {
		_, err = s.db.Exec(ctx, `UPDATE subscriptions SET last_error = ?, failed_since_ms = CASE WHEN failed_since_ms = 0 THEN ? ELSE failed_since_ms END WHERE id = ?`,
			errCategory, ms(at), id)
	}
	if err != nil {
		return fmt.Errorf("record delivery: %w", err)
	}
	return nil
}

// Event implements eventlog.SubscriptionStore.
func (s *Store) Event(ctx context.Context, seq int64) (*eventlog.Recorded, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT seq, event_id, name, agent_id, payload, data, time_ms, record_ms FROM events WHERE seq = ?`, seq),
		func(r sqldb.Scanner) (*eventlog.Recorded, error) {
			var (
				e             eventlog.Recorded
				timeMS, recMS int64
			)
			if err := r.Scan(&e.Seq, &e.ID, &e.Name, &e.Agent, &e.Payload, &e.Data, &timeMS, &recMS); err != nil {
				return nil, err
			}
			e.Time, e.Recorded = time.UnixMilli(timeMS).UTC(), time.UnixMilli(recMS).UTC()
			return &e, nil
		}, eventlog.ErrNoEvent)
}
