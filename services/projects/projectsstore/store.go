// Package projectsstore keeps projects, the index of their code and their
// health snapshots in SQL: SQLite by default, PostgreSQL when the service
// is given a postgres:// DSN. Both run the same queries; the schemas live
// in migrations/<dialect>/.
package projectsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

//go:embed migrations
var migrations embed.FS

// Store is the SQL implementation of projects.Store.
type Store struct {
	db *sqldb.DB
}

var _ projects.Store = (*Store)(nil)

// Open migrates db and returns a store over it.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if err := db.MigrateStore(ctx, "projects", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

const columns = `id, agent_id, name, description, path, git_url, git_ref, status, create_ms, update_ms, archive_ms`

// Create implements projects.Store: the row claims its idempotency key
// and its name among the agent's active projects (sqldb.InsertOnce).
func (s *Store) Create(ctx context.Context, p *projectsv1.Project, call idempotency.Call) (*projectsv1.Project, bool, error) {
	var (
		out     *projectsv1.Project
		created bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		first, inserted, err := sqldb.InsertOnce(ctx, tx, sqldb.Once[*projectsv1.Project]{
			What:   "project",
			Insert: `INSERT INTO projects (` + columns + `, idempotency_key, request_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			Args: []any{p.GetId(), p.GetAgentId(), p.GetName(), p.GetDescription(), p.GetPath(), p.GetGitUrl(), p.GetGitRef(),
				int32(p.GetStatus()), sqldb.Millis(p.GetCreateTime()), sqldb.Millis(p.GetUpdateTime()), sqldb.Millis(p.GetArchiveTime()),
				call.KeyOrNil(), call.Digest},
			Holders: `SELECT ` + columns + `, request_digest FROM projects
				WHERE agent_id = ? AND (idempotency_key = ? OR (name = ? AND status = ?)) ORDER BY create_ms, id`,
			HolderArgs: []any{p.GetAgentId(), call.KeyOrNil(), p.GetName(), int32(projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE)},
			Scan:       sqldb.DigestLast(scanRow),
			Digest:     call.Digest,
			New:        p,
		})
		out, created = first, inserted
		return err
	})
	if errors.Is(err, idempotency.ErrKeyReused) {
		return out, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// Get implements projects.Store.
func (s *Store) Get(ctx context.Context, agentID, id string) (*projectsv1.Project, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM projects WHERE id = ? AND agent_id = ?`, id, agentID), scan, projects.ErrNotFound)
}

// Lookup implements projects.Store.
func (s *Store) Lookup(ctx context.Context, id string) (*projectsv1.Project, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+columns+` FROM projects WHERE id = ?`, id), scan, projects.ErrNotFound)
}

// List implements projects.Store.
func (s *Store) List(ctx context.Context, agentID string, includeArchived bool, offset, limit int) ([]*projectsv1.Project, int, error) {
	q := sqldb.ListQuery{What: "projects", Columns: columns, From: `projects`, Where: `agent_id = ?`, Args: []any{agentID}, OrderBy: `name, create_ms, id`}
	if !includeArchived {
		q.And(`status = ?`, int32(projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE))
	}
	return sqldb.Page(ctx, s.db, q, offset, limit, scan)
}

// Archive implements projects.Store.
func (s *Store) Archive(ctx context.Context, agentID, id string, at time.Time) (*projectsv1.Project, error) {
	ms := at.UnixMilli()
	p, _, err := sqldb.Update(ctx, s.db, "archive project", func(ctx context.Context) (*projectsv1.Project, error) { return s.Get(ctx, agentID, id) },
		`UPDATE projects SET status = ?, archive_ms = ?, update_ms = ? WHERE id = ? AND agent_id = ? AND status = ?`,
		int32(projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED), ms, ms, id, agentID, int32(projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE))
	return p, err
}

func scan(r sqldb.Scanner) (*projectsv1.Project, error) { return scanRow(r) }

// scanRow reads a row of columns, and of more columns into more.
func scanRow(r sqldb.Scanner, more ...any) (*projectsv1.Project, error) {
	var (
		p                         projectsv1.Project
		status                    int64
		createMS, updateMS, archS int64
	)
	if err := r.Scan(append([]any{&p.Id, &p.AgentId, &p.Name, &p.Description, &p.Path, &p.GitUrl, &p.GitRef,
		&status, &createMS, &updateMS, &archS}, more...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read project: %w", err)
	}
	p.Status = projectsv1.ProjectStatus(status)
	p.CreateTime = sqldb.Timestamp(createMS)
	p.UpdateTime = sqldb.Timestamp(updateMS)
	p.ArchiveTime = sqldb.Timestamp(archS)
	return &p, nil
}
