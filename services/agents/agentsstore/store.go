// Package agentsstore keeps the agent directory in SQL: SQLite by default,
// PostgreSQL when the service is given a postgres:// DSN. Both run the same
// queries; the schemas live in migrations/<dialect>/.
package agentsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/services/agents"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of agents.Store.
type Store struct {
	db *sqldb.DB
}

var _ agents.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "agents", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, display_name, description, status, status_reason, registered_by, create_ms, update_ms`

// Create implements agents.Store. The row is inserted first and claims
// both the id and the key (sqldb.InsertOnce); what holds the key is read
// after.
func (s *Store) Create(ctx context.Context, a *agentsv1.Agent, call idempotency.Call) (*agentsv1.Agent, bool, error) {
	stored, created, err := sqldb.InsertOnce(ctx, s.db, sqldb.Once[*agentsv1.Agent]{
		What:   "agent",
		Insert: `INSERT INTO agents (` + columns + `, idempotency_key, request_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		Args: []any{a.GetId(), a.GetDisplayName(), a.GetDescription(), int32(a.GetStatus()), a.GetStatusReason(), a.GetRegisteredBy(),
			a.GetCreateTime().AsTime().UnixMilli(), a.GetUpdateTime().AsTime().UnixMilli(), call.KeyOrNil(), call.Digest},
		Holders:    `SELECT ` + columns + `, request_digest FROM agents WHERE registered_by = ? AND idempotency_key = ?`,
		HolderArgs: []any{a.GetRegisteredBy(), call.KeyOrNil()},
		Scan:       sqldb.DigestLast(scanRow),
		Digest:     call.Digest,
		New:        a,
	})
	if errors.Is(err, sqldb.ErrNotInserted) {
		// The id is taken, and not under this key.
		return nil, false, agents.ErrExists
	}
	return stored, created, err
}

// Get implements agents.Store.
func (s *Store) Get(ctx context.Context, id string) (*agentsv1.Agent, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM agents WHERE id = ?`, id), scan, agents.ErrNotFound)
}

// List implements agents.Store.
func (s *Store) List(ctx context.Context, status agentsv1.AgentStatus, offset, limit int) ([]*agentsv1.Agent, int, error) {
	q := sqldb.ListQuery{What: "agents", Columns: columns, From: `agents`, OrderBy: `id`}
	if status != agentsv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		q.And(`status = ?`, int32(status))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scan)
}

// Summary implements agents.Store.
func (s *Store) Summary(ctx context.Context) (*agentsv1.StatusSummary, error) {
	const op = "count agents per status"
	counts, err := sqldb.All(ctx, s.db, op, func(r sqldb.Scanner) (statusCount, error) {
		var c statusCount
		if err := r.Scan(&c.status, &c.n); err != nil {
			return c, fmt.Errorf("%s: %w", op, err)
		}
		return c, nil
	}, `SELECT status, COUNT(*) FROM agents GROUP BY status`)
	if err != nil {
		return nil, err
	}
	sum := &agentsv1.StatusSummary{}
	for _, c := range counts {
		switch agentsv1.AgentStatus(c.status) {
		case agentsv1.AgentStatus_AGENT_STATUS_ACTIVE:
			sum.Active = int32(c.n)
		case agentsv1.AgentStatus_AGENT_STATUS_PAUSED:
			sum.Paused = int32(c.n)
		case agentsv1.AgentStatus_AGENT_STATUS_RETIRED:
			sum.Retired = int32(c.n)
		}
		sum.Total += int32(c.n)
	}
	return sum, nil
}

// statusCount is how many agents have one status.
type statusCount struct{ status, n int64 }

// Update implements agents.Store.
func (s *Store) Update(ctx context.Context, a *agentsv1.Agent, from agentsv1.AgentStatus) (*agentsv1.Agent, error) {
	updated, changed, err := sqldb.Update(ctx, s.db, "update agent", func(ctx context.Context) (*agentsv1.Agent, error) { return s.Get(ctx, a.GetId()) },
		`UPDATE agents SET status = ?, status_reason = ?, update_ms = ? WHERE id = ? AND status = ?`,
		int32(a.GetStatus()), a.GetStatusReason(), a.GetUpdateTime().AsTime().UnixMilli(), a.GetId(), int32(from))
	if err == nil && !changed {
		return nil, agents.ErrStale
	}
	return updated, err
}

func scan(r sqldb.Scanner) (*agentsv1.Agent, error) {
	return scanRow(r)
}

// scanRow reads a row of columns, and of more columns into more.
func scanRow(r sqldb.Scanner, more ...any) (*agentsv1.Agent, error) {
	var (
		a                  agentsv1.Agent
		status             int64
		createMS, updateMS int64
	)
	if err := r.Scan(append([]any{&a.Id, &a.DisplayName, &a.Description, &status, &a.StatusReason, &a.RegisteredBy, &createMS, &updateMS}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read agent: %w", err)
	}
	a.Status = agentsv1.AgentStatus(status)
	a.CreateTime = sqldb.Timestamp(createMS)
	a.UpdateTime = sqldb.Timestamp(updateMS)
	return &a, nil
}
