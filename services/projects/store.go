package projects

import (
	"context"
	"errors"
	"time"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// Store keeps projects, the index of their code and their health
// snapshots. The implementation lives in projectsstore (SQLite and
// PostgreSQL).
type Store interface {
	// Create stores p unless a stored project holds one of its keys: the
	// agent's idempotency key of the call, or p's name among the agent's
	// active projects. When every holder was made by the same request
	// (call.Digest) Create returns the first with created false; otherwise
	// idempotency.ErrKeyReused and that holder.
	Create(ctx context.Context, p *projectsv1.Project, call idempotency.Call) (stored *projectsv1.Project, created bool, err error)
	// Get returns the agent's project with that id, or ErrNotFound.
	Get(ctx context.Context, agentID, id string) (*projectsv1.Project, error)
	// Lookup returns the project with that id, whoever owns it, or
	// ErrNotFound.
	Lookup(ctx context.Context, id string) (*projectsv1.Project, error)
	// List returns one page of the agent's projects by name, and the total
	// count; archived ones only when includeArchived.
	List(ctx context.Context, agentID string, includeArchived bool, offset, limit int) ([]*projectsv1.Project, int, error)
	// Archive archives the agent's project at at and returns it; an
	// archived project is returned unchanged. ErrNotFound when the agent
	// has no such project.
	Archive(ctx context.Context, agentID, id string, at time.Time) (*projectsv1.Project, error)

	// Files returns the index entries of a project's files, by path.
	Files(ctx context.Context, projectID string) (map[string]IndexedFile, error)
	// SaveFiles writes the entries and symbols of files, replacing what
	// the index held for each of them.
	SaveFiles(ctx context.Context, projectID string, files []ParsedFile) error
	// DeleteFiles removes files and their symbols from the index.
	DeleteFiles(ctx context.Context, projectID string, paths []string) error
	// Symbols returns one page of the symbols q selects, exact name
	// matches first, then prefix matches, then the rest, each by project,
	// path and position; and the total count.
	Symbols(ctx context.Context, q SymbolQuery, offset, limit int) ([]*projectsv1.Symbol, int, error)
	// Declarations returns the symbols of the projects named name (and
	// declared in container, unless it is empty), at most limit of them,
	// by project, path and position.
	Declarations(ctx context.Context, projectIDs []string, name, container string, limit int) ([]*projectsv1.Symbol, error)

	// AddSnapshot stores s under key unless the project has a snapshot
	// under that key; it returns the stored one (created false on a
	// retry).
	AddSnapshot(ctx context.Context, s *projectsv1.HealthSnapshot, key string) (stored *projectsv1.HealthSnapshot, created bool, err error)
	// Snapshot returns the project's snapshot under key, or ErrNotFound.
	Snapshot(ctx context.Context, projectID, key string) (*projectsv1.HealthSnapshot, error)
	// Snapshots returns the project's snapshots taken at or after since,
	// oldest first.
	Snapshots(ctx context.Context, projectID string, since time.Time) ([]*projectsv1.HealthSnapshot, error)
}

// IndexedFile is the index's entry of one source file.
type IndexedFile struct {
	// Path is relative to the code root, with / separators.
	Path string
	// Hash is the SHA-256 of the content, in hex; Size and ModTime (Unix
	// nanoseconds) let an unchanged file be recognised without reading it.
	Hash          string
	Size, ModTime int64
	Language      projectsv1.Language
	Lines, Todos  int
	Fixmes        int
	Test          bool
	// Symbols counts the file's declarations.
	Symbols int
}

// ParsedFile is an index entry with the declarations parsed from it.
type ParsedFile struct {
	IndexedFile
	Decls []*projectsv1.Symbol
	// KeepDecls keeps the declarations the index holds (Decls is unused):
	// the file's content is unchanged, only its size or time moved.
	KeepDecls bool
}

// SymbolCount is the number of declarations the entry stands for.
func (f ParsedFile) SymbolCount() int {
	if f.KeepDecls {
		return f.Symbols
	}
	return len(f.Decls)
}

// SymbolQuery selects symbols.
type SymbolQuery struct {
	// ProjectIDs are the projects searched (at least one).
	ProjectIDs []string
	// Name is part of the name, lower case; every name when empty.
	Name string
	// Path keeps the symbols of that file or of the files under that
	// directory; every file when empty.
	Path     string
	Kind     projectsv1.SymbolKind
	Language projectsv1.Language
}

// Store errors.
var ErrNotFound = errors.New("not found")
