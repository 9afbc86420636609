// Package connectionsstore keeps connections in SQL: SQLite by default,
// PostgreSQL when the service is given a postgres:// DSN. Both run the same
// queries; the schemas live in migrations/<dialect>/.
//
// A refresh runs once across replicas: the lease is taken by one
// conditional UPDATE (the row still at the generation the caller read, and
// no lease outlasting now), which both engines apply to one writer at a
// time; the refreshed tokens are stored by another conditional on that
// generation, which moves it on and releases the lease.
package connectionsstore

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/services/connections"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of connections.Store.
type Store struct {
	db *sqldb.DB
}

var _ connections.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "connections", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, agent, provider, account, scopes, status, access_sealed, refresh_sealed, kek_id, generation, lease_until_ms,
	create_ms, update_ms, use_ms, expire_ms`

func scan(r sqldb.Scanner) (connections.Record, error) {
	var (
		rec                                   connections.Record
		c                                     connectionsv1.Connection
		provider, status                      int32
		scopes                                string
		lease, createMS, updateMS, use, expir int64
	)
	if err := r.Scan(&c.Id, &c.Agent, &provider, &c.Account, &scopes, &status, &rec.Tokens.Access, &rec.Tokens.Refresh, &rec.Tokens.KEK,
		&rec.Generation, &lease, &createMS, &updateMS, &use, &expir); err != nil {
		return rec, err
	}
	if err := json.Unmarshal([]byte(scopes), &c.Scopes); err != nil {
		return rec, fmt.Errorf("connection %s: scopes: %w", c.Id, err)
	}
	c.Provider, c.Status = connectionsv1.Provider(provider), connectionsv1.Status(status)
	c.CreateTime, c.UpdateTime, c.UseTime, c.ExpireTime = sqldb.Timestamp(createMS), sqldb.Timestamp(updateMS), sqldb.Timestamp(use), sqldb.Timestamp(expir)
	if lease != 0 {
		rec.LeaseUntil = time.UnixMilli(lease).UTC()
	}
	rec.Conn = &c
	return rec, nil
}

func scanConn(r sqldb.Scanner) (*connectionsv1.Connection, error) {
	rec, err := scan(r)
	return rec.Conn, err
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Put implements connections.Store.
func (s *Store) Put(ctx context.Context, r connections.Record, call connections.LinkCall) error {
	c := r.Conn
	scopes, err := json.Marshal(append([]string{}, c.GetScopes()...))
	if err != nil {
		return err
	}
	return s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		if call.Key != "" {
			linked, err := markCall(ctx, tx, c.GetAgent(), call, true)
			if err != nil {
				return err
			}
			if !linked {
				return connections.ErrCallEnded
			}
		}
		return put(ctx, tx, r, string(scopes))
	})
}

// EndCall implements connections.Store.
func (s *Store) EndCall(ctx context.Context, agent string, call connections.LinkCall) (bool, error) {
	var linked bool
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		linked, err = markCall(ctx, tx, agent, call, false)
		return err
	})
	return !linked, err
}

// markCall records agent's call as linked (or ended) unless it is recorded
// already, and answers whether it is linked. Expired rows go first. The
// INSERT waits for any concurrent one of the same call, so whichever commits
// first is what both read.
func markCall(ctx context.Context, tx *sqldb.Tx, agent string, call connections.LinkCall, linked bool) (bool, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM link_calls WHERE expire_ms < ?`, call.Now.UnixMilli()); err != nil {
		return false, fmt.Errorf("purge link calls: %w", err)
	}
	flag := 0
	if linked {
		flag = 1
	}
	if _, err := tx.Exec(ctx, `INSERT INTO link_calls (agent, call_key, linked, expire_ms) VALUES (?, ?, ?, ?)
		ON CONFLICT (agent, call_key) DO NOTHING`, agent, call.Key, flag, call.Until.UnixMilli()); err != nil {
		return false, fmt.Errorf("record link call: %w", err)
	}
	var got int
	if err := tx.QueryRow(ctx, `SELECT linked FROM link_calls WHERE agent = ? AND call_key = ?`, agent, call.Key).Scan(&got); err != nil {
		return false, fmt.Errorf("read link call: %w", err)
	}
	return got == 1, nil
}

func put(ctx context.Context, tx *sqldb.Tx, r connections.Record, scopes string) error {
	c := r.Conn
	_, err := tx.Exec(ctx, `INSERT INTO connections (`+columns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, 0, ?)
		ON CONFLICT (agent, provider) DO UPDATE SET id = excluded.id, account = excluded.account, scopes = excluded.scopes,
			status = excluded.status, access_sealed = excluded.access_sealed, refresh_sealed = excluded.refresh_sealed,
			kek_id = excluded.kek_id, generation = connections.generation + 1, lease_until_ms = 0,
			create_ms = excluded.create_ms, update_ms = excluded.update_ms, use_ms = 0, expire_ms = excluded.expire_ms`,
		c.GetId(), c.GetAgent(), int32(c.GetProvider()), c.GetAccount(), scopes, int32(c.GetStatus()),
		r.Tokens.Access, r.Tokens.Refresh, r.Tokens.KEK, sqldb.Millis(c.GetCreateTime()), sqldb.Millis(c.GetUpdateTime()), sqldb.Millis(c.GetExpireTime()))
	if err != nil {
		return fmt.Errorf("store connection: %w", err)
	}
	return nil
}

// Get implements connections.Store.
func (s *Store) Get(ctx context.Context, agent string, provider connectionsv1.Provider) (connections.Record, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM connections WHERE agent = ? AND provider = ?`, agent, int32(provider)),
		scan, connections.ErrNotFound)
}

// ByID implements connections.Store.
func (s *Store) ByID(ctx context.Context, id string) (connections.Record, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM connections WHERE id = ?`, id), scan, connections.ErrNotFound)
}

// List implements connections.Store.
func (s *Store) List(ctx context.Context, agent string, provider connectionsv1.Provider, offset, limit int) ([]*connectionsv1.Connection, int, error) {
	q := sqldb.ListQuery{What: "connections", Columns: columns, From: "connections", OrderBy: "create_ms DESC, id DESC"}
	if agent != "" {
		q.And(`agent = ?`, agent)
	}
	if provider != connectionsv1.Provider_PROVIDER_UNSPECIFIED {
		q.And(`provider = ?`, int32(provider))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scanConn)
}

// SetStatus implements connections.Store.
func (s *Store) SetStatus(ctx context.Context, id string, status connectionsv1.Status, from []connectionsv1.Status, now time.Time) (connections.Record, bool, error) {
	set := `status = ?, update_ms = ?, lease_until_ms = 0`
	if status == connectionsv1.Status_STATUS_REVOKED {
		set += `, access_sealed = NULL, refresh_sealed = NULL, kek_id = '', generation = generation + 1`
	}
	in, args := "", []any{int32(status), now.UnixMilli(), id}
	for i, f := range from {
		if i > 0 {
			in += ", "
		}
		in += "?"
		args = append(args, int32(f))
	}
	return sqldb.Update(ctx, s.db, "set connection status", func(ctx context.Context) (connections.Record, error) { return s.ByID(ctx, id) },
		`UPDATE connections SET `+set+` WHERE id = ? AND status IN (`+in+`)`, args...)
}

// Touch implements connections.Store.
func (s *Store) Touch(ctx context.Context, id string, now time.Time) error {
	_, err := sqldb.Changed(ctx, s.db, "record connection use", `UPDATE connections SET use_ms = ? WHERE id = ? AND use_ms < ?`, now.UnixMilli(), id, now.UnixMilli())
	return err
}

// ClaimRefresh implements connections.Store.
func (s *Store) ClaimRefresh(ctx context.Context, id string, generation int64, now, until time.Time) (bool, error) {
	return sqldb.Changed(ctx, s.db, "claim refresh", `UPDATE connections SET lease_until_ms = ?
		WHERE id = ? AND generation = ? AND status = ? AND lease_until_ms <= ?`,
		until.UnixMilli(), id, generation, int32(connectionsv1.Status_STATUS_ACTIVE), now.UnixMilli())
}

// Refreshed implements connections.Store.
func (s *Store) Refreshed(ctx context.Context, id string, generation int64, t connections.Sealed, expire, now time.Time) (bool, error) {
	return sqldb.Changed(ctx, s.db, "store refreshed tokens", `UPDATE connections SET access_sealed = ?, refresh_sealed = ?, kek_id = ?,
		expire_ms = ?, update_ms = ?, generation = generation + 1, lease_until_ms = 0 WHERE id = ? AND generation = ? AND status = ?`,
		t.Access, t.Refresh, t.KEK, ms(expire), now.UnixMilli(), id, generation, int32(connectionsv1.Status_STATUS_ACTIVE))
}

// ReleaseRefresh implements connections.Store.
func (s *Store) ReleaseRefresh(ctx context.Context, id string, generation int64) error {
	_, err := sqldb.Changed(ctx, s.db, "release refresh", `UPDATE connections SET lease_until_ms = 0 WHERE id = ? AND generation = ?`, id, generation)
	return err
}

// NotWrappedBy implements connections.Store.
func (s *Store) NotWrappedBy(ctx context.Context, kek string, limit int) ([]connections.Record, error) {
	return sqldb.All(ctx, s.db, "list connections to rewrap", scan,
		`SELECT `+columns+` FROM connections WHERE access_sealed IS NOT NULL AND kek_id <> ? ORDER BY id LIMIT ?`, kek, limit)
}

// Rewrapped implements connections.Store.
func (s *Store) Rewrapped(ctx context.Context, id string, generation int64, t connections.Sealed) (bool, error) {
	return sqldb.Changed(ctx, s.db, "store rewrapped tokens", `UPDATE connections SET access_sealed = ?, refresh_sealed = ?, kek_id = ?
		WHERE id = ? AND generation = ? AND access_sealed IS NOT NULL`, t.Access, t.Refresh, t.KEK, id, generation)
}
