package projectsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

const healthColumns = `project_id, take_ms, files, lines, symbols, todos, fixmes, test_files, vet_findings, vet_missing, truncated`

// AddSnapshot implements projects.Store.
func (s *Store) AddSnapshot(ctx context.Context, h *projectsv1.HealthSnapshot, key string) (*projectsv1.HealthSnapshot, bool, error) {
	var vet any
	if h.GoVetFindings != nil {
		vet = h.GetGoVetFindings()
	}
	truncated := 0
	if h.GetTruncated() {
		truncated = 1
	}
	var (
		out     *projectsv1.HealthSnapshot
		created bool
	)
	err := s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		out, created, err = sqldb.InsertOnce(ctx, tx, sqldb.Once[*projectsv1.HealthSnapshot]{
			What:   "health snapshot",
			Insert: `INSERT INTO project_health (snapshot_key, ` + healthColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			Args: []any{key, h.GetProjectId(), sqldb.Millis(h.GetTakeTime()), h.GetFiles(), h.GetLines(), h.GetSymbols(),
				h.GetTodos(), h.GetFixmes(), h.GetTestFiles(), vet, h.GetGoVetMissing(), truncated},
			Holders:    `SELECT ` + healthColumns + ` FROM project_health WHERE project_id = ? AND snapshot_key = ?`,
			HolderArgs: []any{h.GetProjectId(), key},
			Scan:       sqldb.NoDigest(scanSnapshot),
			New:        h,
		})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// Snapshot implements projects.Store.
func (s *Store) Snapshot(ctx context.Context, projectID, key string) (*projectsv1.HealthSnapshot, error) {
	return sqldb.One(s.db.QueryRow(ctx, `SELECT `+healthColumns+` FROM project_health WHERE project_id = ? AND snapshot_key = ?`, projectID, key),
		scanSnapshot, projects.ErrNotFound)
}

// Snapshots implements projects.Store.
func (s *Store) Snapshots(ctx context.Context, projectID string, since time.Time) ([]*projectsv1.HealthSnapshot, error) {
	return sqldb.All(ctx, s.db, "list health snapshots", scanSnapshot,
		`SELECT `+healthColumns+` FROM project_health WHERE project_id = ? AND take_ms >= ? ORDER BY take_ms, snapshot_key`, projectID, since.UnixMilli())
}

func scanSnapshot(r sqldb.Scanner) (*projectsv1.HealthSnapshot, error) {
	var (
		h         projectsv1.HealthSnapshot
		takeMS    int64
		vet       sql.NullInt64
		truncated int64
	)
	if err := r.Scan(&h.ProjectId, &takeMS, &h.Files, &h.Lines, &h.Symbols, &h.Todos, &h.Fixmes, &h.TestFiles, &vet, &h.GoVetMissing, &truncated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read health snapshot: %w", err)
	}
	h.TakeTime = sqldb.Timestamp(takeMS)
	if vet.Valid {
		h.GoVetFindings = &vet.Int64
	}
	h.Truncated = truncated != 0
	return &h, nil
}
