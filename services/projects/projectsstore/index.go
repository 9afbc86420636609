package projectsstore

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

const fileColumns = `path, hash, size, mtime_ns, language, lines, todos, fixmes, test, symbols`

// Files implements projects.Store.
func (s *Store) Files(ctx context.Context, projectID string) (map[string]projects.IndexedFile, error) {
	list, err := sqldb.All(ctx, s.db, "read index", scanFile,
		`SELECT `+fileColumns+` FROM project_files WHERE project_id = ?`, projectID)
	if err != nil {
		return nil, err
	}
	out := make(map[string]projects.IndexedFile, len(list))
	for _, f := range list {
		out[f.Path] = f
	}
	return out, nil
}

func scanFile(r sqldb.Scanner) (projects.IndexedFile, error) {
	var (
		f                                          projects.IndexedFile
		lang, lines, todos, fixmes, test, nSymbols int64
	)
	if err := r.Scan(&f.Path, &f.Hash, &f.Size, &f.ModTime, &lang, &lines, &todos, &fixmes, &test, &nSymbols); err != nil {
		return f, fmt.Errorf("read index entry: %w", err)
	}
	f.Language = projectsv1.Language(lang)
	f.Lines, f.Todos, f.Fixmes, f.Symbols = int(lines), int(todos), int(fixmes), int(nSymbols)
	f.Test = test != 0
	return f, nil
}

// symbolRows is how many symbols one INSERT writes.
const symbolRows = 100

// SaveFiles implements projects.Store, in one transaction.
func (s *Store) SaveFiles(ctx context.Context, projectID string, files []projects.ParsedFile) error {
	if len(files) == 0 {
		return nil
	}
	return s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		for _, f := range files {
			test := 0
			if f.Test {
				test = 1
			}
			if _, err := tx.Exec(ctx, `INSERT INTO project_files (project_id, `+fileColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (project_id, path) DO UPDATE SET hash = excluded.hash, size = excluded.size, mtime_ns = excluded.mtime_ns,
				language = excluded.language, lines = excluded.lines, todos = excluded.todos, fixmes = excluded.fixmes,
				test = excluded.test, symbols = excluded.symbols`,
				projectID, f.Path, f.Hash, f.Size, f.ModTime, int32(f.Language), f.Lines, f.Todos, f.Fixmes, test, f.SymbolCount()); err != nil {
				return fmt.Errorf("index %s: %w", f.Path, err)
			}
			if f.KeepDecls {
				continue
			}
			if _, err := tx.Exec(ctx, `DELETE FROM project_symbols WHERE project_id = ? AND path = ?`, projectID, f.Path); err != nil {
				return fmt.Errorf("index %s: %w", f.Path, err)
			}
			for start := 0; start < len(f.Decls); start += symbolRows {
				if err := insertSymbols(ctx, tx, projectID, f.Path, f.Decls[start:min(start+symbolRows, len(f.Decls))]); err != nil {
					return fmt.Errorf("index %s: %w", f.Path, err)
				}
			}
		}
		return nil
	})
}

func insertSymbols(ctx context.Context, tx *sqldb.Tx, projectID, path string, list []*projectsv1.Symbol) error {
	var b strings.Builder
	b.WriteString(`INSERT INTO project_symbols (project_id, path, name, name_lower, kind, language, line, col, end_line, container, signature) VALUES `)
	args := make([]any, 0, 11*len(list))
	for i, sym := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		args = append(args, projectID, path, sym.GetName(), strings.ToLower(sym.GetName()), int32(sym.GetKind()), int32(sym.GetLanguage()),
			sym.GetLine(), sym.GetColumn(), sym.GetEndLine(), sym.GetContainer(), sym.GetSignature())
	}
	_, err := tx.Exec(ctx, b.String(), args...)
	return err
}

// DeleteFiles implements projects.Store.
func (s *Store) DeleteFiles(ctx context.Context, projectID string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	return s.db.InTx(ctx, func(tx *sqldb.Tx) error {
		for _, p := range paths {
			for _, table := range []string{"project_symbols", "project_files"} {
				if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE project_id = ? AND path = ?`, projectID, p); err != nil {
					return fmt.Errorf("drop %s from the index: %w", p, err)
				}
			}
		}
		return nil
	})
}

const symbolColumns = `project_id, path, name, kind, language, line, col, end_line, container, signature`

// Symbols implements projects.Store.
func (s *Store) Symbols(ctx context.Context, q projects.SymbolQuery, offset, limit int) ([]*projectsv1.Symbol, int, error) {
	where, args := in("project_id", q.ProjectIDs)
	if q.Name != "" {
		where += ` AND name_lower LIKE ? ESCAPE '\'`
		args = append(args, "%"+escapeLike(q.Name)+"%")
	}
	if q.Path != "" {
		w, a := underPath(q.Path)
		where += ` AND ` + w
		args = append(args, a...)
	}
	if q.Kind != projectsv1.SymbolKind_SYMBOL_KIND_UNSPECIFIED {
		where += ` AND kind = ?`
		args = append(args, int32(q.Kind))
	}
	if q.Language != projectsv1.Language_LANGUAGE_UNSPECIFIED {
		where += ` AND language = ?`
		args = append(args, int32(q.Language))
	}
	var total int
	if err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM project_symbols WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count symbols: %w", err)
	}
	order := `project_id, path, line, col, name`
	if q.Name != "" {
		order = `CASE WHEN name_lower = ? THEN 0 WHEN name_lower LIKE ? ESCAPE '\' THEN 1 ELSE 2 END, ` + order
		args = append(args, q.Name, escapeLike(q.Name)+"%")
	}
	args = append(args, limit, offset)
	list, err := sqldb.All(ctx, s.db, "list symbols", scanSymbol,
		`SELECT `+symbolColumns+` FROM project_symbols WHERE `+where+` ORDER BY `+order+` LIMIT ? OFFSET ?`, args...)
	return list, total, err
}

// Declarations implements projects.Store.
func (s *Store) Declarations(ctx context.Context, projectIDs []string, name, container string, limit int) ([]*projectsv1.Symbol, error) {
	where, args := in("project_id", projectIDs)
	where += ` AND name = ?`
	args = append(args, name)
	if container != "" {
		where += ` AND container = ?`
		args = append(args, container)
	}
	return sqldb.All(ctx, s.db, "find declarations", scanSymbol,
		`SELECT `+symbolColumns+` FROM project_symbols WHERE `+where+` ORDER BY project_id, path, line, col LIMIT ?`, append(args, limit)...)
}

func scanSymbol(r sqldb.Scanner) (*projectsv1.Symbol, error) {
	var (
		sym                            projectsv1.Symbol
		kind, lang, line, col, endLine int64
	)
	if err := r.Scan(&sym.ProjectId, &sym.Path, &sym.Name, &kind, &lang, &line, &col, &endLine, &sym.Container, &sym.Signature); err != nil {
		return nil, fmt.Errorf("read symbol: %w", err)
	}
	sym.Kind, sym.Language = projectsv1.SymbolKind(kind), projectsv1.Language(lang)
	sym.Line, sym.Column, sym.EndLine = int32(line), int32(col), int32(endLine)
	return &sym, nil
}

// in is "column IN (?, ...)" over values.
func in(column string, values []string) (string, []any) {
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = v
	}
	return column + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(values)), ", ") + `)`, args
}

// underPath keeps the rows of the file p or of the files under the
// directory p. It compares characters with substr, the same on both
// engines (LIKE ignores case on SQLite and not on PostgreSQL).
func underPath(p string) (string, []any) {
	dir := strings.TrimSuffix(p, "/") + "/"
	return `(path = ? OR substr(path, 1, ?) = ?)`, []any{strings.TrimSuffix(p, "/"), utf8.RuneCountInString(dir), dir}
}

// escapeLike escapes the LIKE wildcards of s with backslashes.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
