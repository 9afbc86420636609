// Package memorystore keeps memories in SQL: SQLite by default, PostgreSQL
// when the service is given a postgres:// DSN. Both run the same queries
// except for the full-text index: SQLite keeps it in an FTS5 table ranked
// with bm25, PostgreSQL in a tsvector column ranked with ts_rank. Either way
// the index holds the service's terms as they are, and the best match comes
// first: other things equal, a memory with more of the query's words, with
// them more often, or a shorter one ranks higher, and equal matches come
// most recently updated first. The engines' scores differ: bm25 also weighs
// a word by how rare it is among all the stored memories (of every agent),
// ts_rank does not, so memories matching different words can come in
// another order. The schemas live in migrations/<dialect>/.
package memorystore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/memory"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of memory.Store.
type Store struct {
	db *sqldb.DB
}

var _ memory.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "memory", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// InitKeyring implements memory.Store, with sqldb.InsertOnce: the first
// keyring recorded is the database's, and a later start reads it.
func (s *Store) InitKeyring(ctx context.Context, k memory.Keyring) (memory.Keyring, error) {
	got, _, err := sqldb.InsertOnce(ctx, s.db, sqldb.Once[memory.Keyring]{
		What:    "keyring",
		Insert:  `INSERT INTO memory_keyring (id, key_id, key_check, create_ms) VALUES (1, ?, ?, ?)`,
		Args:    []any{k.KeyID, k.Check, time.Now().UnixMilli()},
		Holders: `SELECT key_id, key_check FROM memory_keyring WHERE id = 1`,
		Scan: sqldb.NoDigest(func(r sqldb.Scanner) (memory.Keyring, error) {
			var got memory.Keyring
			err := r.Scan(&got.KeyID, &got.Check)
			return got, err
		}),
		New: k,
	})
	return got, err
}

const columns = `agent_id, memory_key, body, key_id, create_ms, update_ms`

// Save implements memory.Store.
func (s *Store) Save(ctx context.Context, r memory.Record) (memory.Record, bool, error) {
	out, created, err := s.save(ctx, r)
	if err != nil && sqldb.IsUniqueViolation(err) {
		// A concurrent first save of the same key won; save over it.
		out, created, err = s.save(ctx, r)
	}
	return out, created, err
}

func (s *Store) save(ctx context.Context, r memory.Record) (memory.Record, bool, error) {
	created := false
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var seq, createMS int64
		err := tx.QueryRow(ctx, `SELECT seq, create_ms FROM memories WHERE agent_id = ? AND memory_key = ?`,
			r.AgentID, r.Key).Scan(&seq, &createMS)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
			if err := tx.QueryRow(ctx, `INSERT INTO memories (`+columns+`) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq`,
				r.AgentID, r.Key, r.Body, r.KeyID, r.CreateTime.UnixMilli(), r.UpdateTime.UnixMilli()).Scan(&seq); err != nil {
				return fmt.Errorf("insert memory: %w", err)
			}
		case err != nil:
			return fmt.Errorf("find memory: %w", err)
		default:
			r.CreateTime = time.UnixMilli(createMS).UTC()
			if _, err := tx.Exec(ctx, `UPDATE memories SET body = ?, key_id = ?, update_ms = ? WHERE seq = ?`,
				r.Body, r.KeyID, r.UpdateTime.UnixMilli(), seq); err != nil {
				return fmt.Errorf("update memory: %w", err)
			}
		}
		return s.index(ctx, tx, seq, r.Terms)
	})
	if err != nil {
		return memory.Record{}, false, err
	}
	return r, created, nil
}

// index replaces the index terms of memory seq.
func (s *Store) index(ctx context.Context, tx *sqldb.Tx, seq int64, terms string) error {
	if s.db.Dialect == sqldb.Postgres {
		if _, err := tx.Exec(ctx, `UPDATE memories SET terms = CAST(? AS tsvector) WHERE seq = ?`, tsvector(terms), seq); err != nil {
			return fmt.Errorf("index memory: %w", err)
		}
		return nil
	}
	if err := s.unindex(ctx, tx, seq); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO memory_index (rowid, terms) VALUES (?, ?)`, seq, terms); err != nil {
		return fmt.Errorf("index memory: %w", err)
	}
	return nil
}

// unindex removes memory seq from the SQLite index (PostgreSQL keeps the
// terms in the row itself).
func (s *Store) unindex(ctx context.Context, tx *sqldb.Tx, seq int64) error {
	if s.db.Dialect == sqldb.Postgres {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM memory_index WHERE rowid = ?`, seq); err != nil {
		return fmt.Errorf("unindex memory: %w", err)
	}
	return nil
}

// Search implements memory.Store. Terms are letters and digits only (the
// service splits them), so they are safe to quote into a match expression.
func (s *Store) Search(ctx context.Context, agentID string, terms []string, limit int) ([]memory.Match, error) {
	if len(terms) == 0 {
		return nil, nil
	}
	var (
		query string
		match string
	)
	if s.db.Dialect == sqldb.Postgres {
		// ts_rank with normalization 1 divides by 1 + log(length), so a
		// short memory that is all about the words ranks above a long one
		// that mentions them once, as bm25 does.
		query = `SELECT ` + columns + `, ts_rank(terms, q, 1) AS score
			FROM memories, CAST(? AS tsquery) AS q
			WHERE agent_id = ? AND terms @@ q
			ORDER BY score DESC, update_ms DESC, seq DESC LIMIT ?`
		match = tsquery(terms)
		if match == "" {
			return nil, nil
		}
	} else {
		// bm25 is lower for better matches; the score is its negation.
		query = `SELECT m.agent_id, m.memory_key, m.body, m.key_id, m.create_ms, m.update_ms, -bm25(memory_index) AS score
			FROM memory_index JOIN memories m ON m.seq = memory_index.rowid
			WHERE memory_index MATCH ? AND m.agent_id = ?
			ORDER BY score DESC, m.update_ms DESC, m.seq DESC LIMIT ?`
		match = `"` + strings.Join(terms, `" OR "`) + `"`
	}
	return sqldb.All(ctx, s.db, "search memories", func(sc sqldb.Scanner) (memory.Match, error) {
		var score float64
		r, err := scan(sc, &score)
		return memory.Match{Record: r, Score: score}, err
	}, query, match, agentID, limit)
}

// PostgreSQL's limits on a lexeme: its length in bytes, how many positions
// it keeps, and the largest position.
const (
	maxLexemeBytes = 2047
	maxPositions   = 256
	maxPosition    = 16383
)

// tsvector returns the index terms as a PostgreSQL tsvector literal: each
// term one lexeme, at the positions it has among the terms. Casting the
// literal, unlike to_tsvector, leaves the terms as the service split them:
// PostgreSQL's parser would cut some words in two ("1e10x" into "1e10" and
// "x") that FTS5 keeps whole, and then the engines would match differently.
// A term too long to be a lexeme is left out; no query can be that long.
func tsvector(terms string) string {
	var (
		order     []string
		positions = map[string][]int{}
	)
	for i, w := range strings.Fields(terms) {
		if len(w) > maxLexemeBytes {
			continue
		}
		ps, seen := positions[w]
		if !seen {
			order = append(order, w)
		}
		if len(ps) < maxPositions {
			positions[w] = append(ps, min(i+1, maxPosition))
		}
	}
	var b strings.Builder
	for _, w := range order {
		b.WriteString(lexeme(w))
		for j, p := range positions[w] {
			if j == 0 {
				b.WriteByte(':')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// tsquery returns a PostgreSQL tsquery literal matching any of terms, each
// taken as one lexeme (see tsvector); "" when none can be one.
func tsquery(terms []string) string {
	quoted := make([]string, 0, len(terms))
	for _, w := range terms {
		if w != "" && len(w) <= maxLexemeBytes {
			quoted = append(quoted, lexeme(w))
		}
	}
	return strings.Join(quoted, " | ")
}

// lexeme quotes w for a tsvector or tsquery literal.
func lexeme(w string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(w) + "'"
}

// List implements memory.Store.
func (s *Store) List(ctx context.Context, agentID string, offset, limit int) ([]memory.Record, int, error) {
	return sqldb.Page(ctx, s.db, sqldb.ListQuery{What: "memories", Columns: columns, From: `memories`,
		Where: `agent_id = ?`, Args: []any{agentID}, OrderBy: `update_ms DESC, seq DESC`}, offset, limit,
		func(sc sqldb.Scanner) (memory.Record, error) { return scan(sc) })
}

// Get implements memory.Store.
func (s *Store) Get(ctx context.Context, agentID, key string) (memory.Record, error) {
	row := s.db.QueryRow(ctx, `SELECT `+columns+` FROM memories WHERE agent_id = ? AND memory_key = ?`, agentID, key)
	return sqldb.One(row, func(sc sqldb.Scanner) (memory.Record, error) { return scan(sc) }, memory.ErrNotFound)
}

// Delete implements memory.Store.
func (s *Store) Delete(ctx context.Context, agentID, key string) (memory.Record, error) {
	var r memory.Record
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var (
			seq int64
			err error
		)
		row := tx.QueryRow(ctx, `SELECT `+columns+`, seq FROM memories WHERE agent_id = ? AND memory_key = ?`, agentID, key)
		r, err = sqldb.One(row, func(sc sqldb.Scanner) (memory.Record, error) { return scan(sc, &seq) }, memory.ErrNotFound)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memories WHERE seq = ?`, seq); err != nil {
			return fmt.Errorf("delete memory: %w", err)
		}
		return s.unindex(ctx, tx, seq)
	})
	return r, err
}

// scan reads the columns into a record, then any extra columns into extra.
func scan(sc sqldb.Scanner, extra ...any) (memory.Record, error) {
	var (
		r                  memory.Record
		createMS, updateMS int64
	)
	dest := append([]any{&r.AgentID, &r.Key, &r.Body, &r.KeyID, &createMS, &updateMS}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return memory.Record{}, fmt.Errorf("read memory: %w", err)
	}
	r.CreateTime = time.UnixMilli(createMS).UTC()
	r.UpdateTime = time.UnixMilli(updateMS).UTC()
	return r, nil
}
