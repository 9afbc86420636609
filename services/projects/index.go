package projects

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects/code"
)

// Why an index was cut short (IndexReport.cut_reason).
const (
	cutTime  = "time limit: only part of the code was read; call again to read more"
	cutFiles = "file limit: the project has more source files than the mesh indexes"
)

// saveBatch is how many files one store write holds.
const saveBatch = 200

// indexed is a project's code after indexing: its root, open for reading
// until close, and its index.
type indexed struct {
	project *projectsv1.Project
	root    *os.Root
	files   map[string]IndexedFile
	report  *projectsv1.IndexReport
}

func (ix *indexed) close() { ix.root.Close() }

// skipDir reports a directory the index does not enter: hidden ones (.git
// among them), dependencies and caches.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" || name == "__pycache__"
}

// openRoot opens a project's code for reading: a path project's root after
// checking it is still inside the base, a git project's clone (cloned
// again when it is missing).
func (s *Service) openRoot(ctx context.Context, p *projectsv1.Project) (*os.Root, error) {
	if p.GetGitUrl() == "" {
		root, err := s.cfg.Base.Open(p.GetPath())
		if errors.Is(err, ErrOutsideBase) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("project %s: %w; it is not read", p.GetId(), err))
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("project %s: %w", p.GetId(), err))
		}
		return root, nil
	}
	if s.cfg.Git == nil {
		return nil, mesh.NewCapabilityGapError(GapGit, errors.New("this mesh does not clone git repositories"))
	}
	if err := gitError(s.cfg.Git.Clone(ctx, p.GetId(), p.GetGitUrl(), p.GetGitRef())); err != nil {
		return nil, err
	}
	return s.cfg.Git.Open(p.GetId())
}

// index brings a project's index up to date with its code, reading until
// deadline, and returns the code open for reading. Unchanged files are not
// read again (same size and time) or not parsed again (same content).
func (s *Service) index(ctx context.Context, p *projectsv1.Project, deadline time.Time) (*indexed, error) {
	if p.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("project %s is archived: its code is no longer read", p.GetId()))
	}
	unlock := s.lock(p.GetId())
	defer unlock()
	root, err := s.openRoot(ctx, p)
	if err != nil {
		return nil, err
	}
	ix := &indexed{project: p, root: root, report: &projectsv1.IndexReport{ProjectId: p.GetId()}}
	if err := s.walk(ctx, ix, deadline); err != nil {
		root.Close()
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("index project %s: %w", p.GetId(), err))
	}
	return ix, nil
}

func (s *Service) walk(ctx context.Context, ix *indexed, deadline time.Time) error {
	id := ix.project.GetId()
	stored, err := s.store.Files(ctx, id)
	if err != nil {
		return err
	}
	rep, limits := ix.report, s.cfg.Limits
	seen := map[string]bool{}
	var batch []ParsedFile
	flush := func() error {
		err := s.store.SaveFiles(ctx, id, batch)
		batch = batch[:0]
		return err
	}
	fsys := ix.root.FS()
	walkErr := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != "." {
				return fs.SkipDir // unreadable: left out
			}
			return err
		}
		if d.IsDir() {
			if p != "." && skipDir(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		lang := code.LanguageOf(p)
		if lang == projectsv1.Language_LANGUAGE_UNSPECIFIED || !d.Type().IsRegular() {
			return nil // not source, or a link: links are not followed
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rep.CutReason = cutTime
			return fs.SkipAll
		}
		info, err := d.Info()
		switch {
		case err != nil, info.Size() > limits.MaxFileBytes,
			!code.TreeSitter && lang != projectsv1.Language_LANGUAGE_GO:
			rep.Skipped++
			return nil
		case len(seen) >= limits.MaxFiles:
			rep.Skipped++
			rep.CutReason = cutFiles
			return nil
		}
		seen[p] = true
		old, had := stored[p]
		if had && old.Size == info.Size() && old.ModTime == info.ModTime().UnixNano() {
			rep.Reused++
			return nil
		}
		f, parsed, err := s.read(fsys, p, old, had, info)
		if err != nil {
			delete(seen, p)
			rep.Skipped++
			return nil
		}
		if parsed {
			rep.Parsed++
		} else {
			rep.Reused++
		}
		if batch = append(batch, f); len(batch) >= saveBatch {
			return flush()
		}
		return nil
	})
	if walkErr != nil {
		return walkErr
	}
	if err := flush(); err != nil {
		return err
	}
	if rep.CutReason != cutTime {
		// The walk saw every file: what it did not keep is gone.
		var gone []string
		for p := range stored {
			if !seen[p] {
				gone = append(gone, p)
			}
		}
		if err := s.store.DeleteFiles(ctx, id, gone); err != nil {
			return err
		}
	}
	rep.Truncated = rep.CutReason != ""
	if ix.files, err = s.store.Files(ctx, id); err != nil {
		return err
	}
	rep.Files = int32(len(ix.files))
	return nil
}

// read reads and hashes one file, and parses it unless its content is the
// one indexed (old). parsed says whether it was parsed.
func (s *Service) read(fsys fs.FS, p string, old IndexedFile, had bool, info fs.FileInfo) (ParsedFile, bool, error) {
	src, err := readLimited(fsys, p, s.cfg.Limits.MaxFileBytes)
	if err != nil {
		return ParsedFile{}, false, err
	}
	sum := sha256.Sum256(src)
	hash := hex.EncodeToString(sum[:])
	if had && old.Hash == hash {
		old.Size, old.ModTime = info.Size(), info.ModTime().UnixNano()
		return ParsedFile{IndexedFile: old, KeepDecls: true}, false, nil
	}
	f, err := code.Parse(p, src)
	if err != nil {
		return ParsedFile{}, false, err
	}
	out := ParsedFile{IndexedFile: IndexedFile{
		Path: p, Hash: hash, Size: info.Size(), ModTime: info.ModTime().UnixNano(), Language: f.Language,
		Lines: f.Lines, Todos: f.Todos, Fixmes: f.Fixmes, Test: f.Test,
	}}
	for _, sym := range f.Symbols {
		out.Decls = append(out.Decls, &projectsv1.Symbol{
			Path: p, Name: sym.Name, Kind: sym.Kind, Language: f.Language, Line: int32(sym.Line), Column: int32(sym.Column),
			EndLine: int32(sym.EndLine), Container: sym.Container, Signature: sym.Signature,
		})
	}
	return out, true, nil
}

// readLimited reads a file of at most limit bytes (one that grew past the
// limit since it was listed is refused).
func readLimited(fsys fs.FS, p string, limit int64) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(src)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, limit)
	}
	return src, nil
}
