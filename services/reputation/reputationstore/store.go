// Package reputationstore keeps the attestations the mesh's agents published
// in SQL: SQLite by default, PostgreSQL when the service is given a
// postgres:// DSN. An attestation is stored whole (its binary protobuf
// encoding): it is signed, so it is kept exactly as issued. The schemas live
// in migrations/<dialect>/.
package reputationstore

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/services/reputation"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of reputation.Store.
type Store struct {
	db *sqldb.DB
}

var _ reputation.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "reputation", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

func scanBody(r sqldb.Scanner, more ...any) (*reputationv1.Attestation, error) {
	var body []byte
	if err := r.Scan(append([]any{&body}, more...)...); err != nil {
		return nil, err
	}
	a := &reputationv1.Attestation{}
	if err := proto.Unmarshal(body, a); err != nil {
		return nil, fmt.Errorf("decode attestation: %w", err)
	}
	return a, nil
}

func scanAttestation(r sqldb.Scanner) (*reputationv1.Attestation, error) { return scanBody(r) }

// Publish implements reputation.Store: a keyed call first claims its key
// (sqldb.InsertOnce), in the transaction that replaces the agent's
// attestation, so a retry finds the first attestation under any
// interleaving.
func (s *Store) Publish(ctx context.Context, a *reputationv1.Attestation, call idempotency.Call) (*reputationv1.Attestation, bool, error) {
	body, err := proto.Marshal(a)
	if err != nil {
		return nil, false, fmt.Errorf("encode attestation: %w", err)
	}
	agent := a.GetAgentId()
	out, created := a, true
	err = s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		if call.Key != "" {
			first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[*reputationv1.Attestation]{
				What:       "attestation call",
				Insert:     `INSERT INTO attestation_calls (agent_id, idempotency_key, request_digest, body) VALUES (?, ?, ?, ?)`,
				Args:       []any{agent, call.Key, call.Digest, body},
				Holders:    `SELECT body, request_digest FROM attestation_calls WHERE agent_id = ? AND idempotency_key = ?`,
				HolderArgs: []any{agent, call.Key},
				Scan:       sqldb.DigestLast(scanBody),
				Digest:     call.Digest,
				New:        a,
			})
			if err != nil {
				out = first
				return err
			}
			if !inserted {
				out, created = first, false
				return nil
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO attestations (agent_id, issued_ms, body) VALUES (?, ?, ?)
			ON CONFLICT (agent_id) DO UPDATE SET issued_ms = excluded.issued_ms, body = excluded.body`,
			agent, sqldb.Millis(a.GetIssuedAt()), body); err != nil {
			return fmt.Errorf("store attestation: %w", err)
		}
		return nil
	})
	if errors.Is(err, idempotency.ErrKeyReused) {
		return out, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// Replay implements reputation.Store.
func (s *Store) Replay(ctx context.Context, agentID string, call idempotency.Call) (*reputationv1.Attestation, error) {
	var digest string
	a, err := sqldb.One(s.db.QueryRow(ctx, `SELECT body, request_digest FROM attestation_calls WHERE agent_id = ? AND idempotency_key = ?`,
		agentID, call.Key), func(r sqldb.Scanner) (*reputationv1.Attestation, error) { return scanBody(r, &digest) }, reputation.ErrNotFound)
	if err != nil {
		return nil, err
	}
	if digest != call.Digest {
		return nil, idempotency.ErrKeyReused
	}
	return a, nil
}

// Get implements reputation.Store.
func (s *Store) Get(ctx context.Context, agentID string) (*reputationv1.Attestation, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT body FROM attestations WHERE agent_id = ?`, agentID), scanAttestation, reputation.ErrNotFound)
}

// List implements reputation.Store.
func (s *Store) List(ctx context.Context, offset, limit int) ([]*reputationv1.Attestation, int, error) {
	return sqldb.Page(ctx, s.db, sqldb.ListQuery{What: "attestations", Columns: `body`, From: `attestations`,
		OrderBy: `issued_ms DESC, agent_id`}, offset, limit, scanAttestation)
}
