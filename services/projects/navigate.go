package projects

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects/code"
)

// Bounds of one search.
const (
	// maxSearched is how many active projects a search without project_id
	// reads.
	maxSearched = 50
	// maxDeclarations is how many declarations find_references resolves.
	maxDeclarations = 100
	// maxReferences is how many references one search collects.
	maxReferences = 10000
)

const cutReferences = "reference limit: the symbol is used in more places than one search collects"

// searchable returns the projects a search reads: the caller's project
// named by id, or, without id, its active projects.
func (s *Service) searchable(ctx context.Context, id string) ([]*projectsv1.Project, error) {
	if id != "" {
		p, err := s.own(ctx, id)
		if err != nil {
			return nil, err
		}
		return []*projectsv1.Project{p}, nil
	}
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	list, _, err := s.store.List(ctx, agent, false, 0, maxSearched)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list projects: %w", err))
	}
	return list, nil
}

// indexAll indexes the projects until one deadline. With one project
// named, its failure is the call's; searching them all, a project that
// cannot be read is reported and left out.
func (s *Service) indexAll(ctx context.Context, list []*projectsv1.Project, named bool, deadline time.Time) ([]*indexed, []*projectsv1.IndexReport, error) {
	var (
		out     []*indexed
		reports []*projectsv1.IndexReport
	)
	for _, p := range list {
		ix, err := s.index(ctx, p, deadline)
		if err != nil {
			if named {
				return nil, nil, err
			}
			reports = append(reports, &projectsv1.IndexReport{ProjectId: p.GetId(), Truncated: true, CutReason: "not read: " + connect.CodeOf(err).String() + ": " + errorMessage(err)})
			continue
		}
		out = append(out, ix)
		reports = append(reports, ix.report)
	}
	return out, reports, nil
}

func errorMessage(err error) string {
	if cerr, ok := errors.AsType[*connect.Error](err); ok {
		return cerr.Message()
	}
	return err.Error()
}

func closeAll(list []*indexed) {
	for _, ix := range list {
		ix.close()
	}
}

func treeSitterLanguage(l projectsv1.Language) bool {
	return l == projectsv1.Language_LANGUAGE_JAVASCRIPT || l == projectsv1.Language_LANGUAGE_TYPESCRIPT || l == projectsv1.Language_LANGUAGE_PYTHON
}

func noTreeSitter() error {
	return mesh.NewCapabilityGapError(GapTreeSitter, code.ErrNoTreeSitter)
}

// CodeSymbols implements ProjectsService.CodeSymbols.
func (s *Service) CodeSymbols(ctx context.Context, req *projectsv1.CodeSymbolsRequest) (*projectsv1.CodeSymbolsResponse, error) {
	if treeSitterLanguage(req.GetLanguage()) && !code.TreeSitter {
		return nil, noTreeSitter()
	}
	list, err := s.searchable(ctx, req.GetProjectId())
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	ixs, reports, err := s.indexAll(ctx, list, req.GetProjectId() != "", time.Now().Add(s.cfg.Limits.Timeout))
	if err != nil {
		return nil, err
	}
	defer closeAll(ixs)
	res := &projectsv1.CodeSymbolsResponse{Index: reports, Page: paging.New(offset, limit, 0)}
	if len(ixs) == 0 {
		return res, nil
	}
	q := SymbolQuery{Name: strings.ToLower(req.GetQuery()), Path: cleanPath(req.GetPath()), Kind: req.GetKind(), Language: req.GetLanguage()}
	for _, ix := range ixs {
		q.ProjectIDs = append(q.ProjectIDs, ix.project.GetId())
	}
	syms, total, err := s.store.Symbols(ctx, q, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("search symbols: %w", err))
	}
	res.Symbols, res.Page = syms, paging.New(offset, limit, total)
	return res, nil
}

// under reports whether file p is the file dir names or under it ("" keeps
// every file).
func under(dir string) func(p string) bool {
	dir = cleanPath(dir)
	return func(p string) bool { return dir == "" || p == dir || strings.HasPrefix(p, dir+"/") }
}

// FindReferences implements ProjectsService.FindReferences.
func (s *Service) FindReferences(ctx context.Context, req *projectsv1.FindReferencesRequest) (*projectsv1.FindReferencesResponse, error) {
	container, name, qualified := strings.Cut(req.GetSymbol(), ".")
	if !qualified {
		container, name = "", req.GetSymbol()
	}
	list, err := s.searchable(ctx, req.GetProjectId())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.cfg.Limits.Timeout)
	ixs, reports, err := s.indexAll(ctx, list, req.GetProjectId() != "", deadline)
	if err != nil {
		return nil, err
	}
	defer closeAll(ixs)
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	res := &projectsv1.FindReferencesResponse{Index: reports, Page: paging.New(offset, limit, 0)}
	if len(ixs) == 0 {
		return res, nil
	}
	var projectIDs []string
	for _, ix := range ixs {
		projectIDs = append(projectIDs, ix.project.GetId())
	}
	if res.Declarations, err = s.store.Declarations(ctx, projectIDs, name, container, maxDeclarations); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("find declarations: %w", err))
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var refs []*projectsv1.Reference
	for _, ix := range ixs {
		var decls []*projectsv1.Symbol
		for _, d := range res.Declarations {
			if d.GetProjectId() == ix.project.GetId() {
				decls = append(decls, d)
			}
		}
		found, cut := s.references(sctx, ix, name, decls, container == "", under(req.GetPath()))
		if cut != "" {
			ix.report.Truncated, ix.report.CutReason = true, cut
		}
		refs = append(refs, found...)
		if len(refs) >= maxReferences {
			ix.report.Truncated, ix.report.CutReason = true, cutReferences
			refs = refs[:maxReferences]
			break
		}
	}
	slices.SortFunc(refs, func(a, b *projectsv1.Reference) int {
		return cmp.Or(strings.Compare(a.GetProjectId(), b.GetProjectId()), strings.Compare(a.GetPath(), b.GetPath()),
			cmp.Compare(a.GetLine(), b.GetLine()), cmp.Compare(a.GetColumn(), b.GetColumn()))
	})
	res.Page = paging.New(offset, limit, len(refs))
	res.References = refs[min(offset, len(refs)):min(offset+limit, len(refs))]
	return res, nil
}

// references finds the uses of name in one project: typed ones of its Go
// declarations decls, syntactic ones in its other languages when the
// symbol is declared there, or declared nowhere in the project and not
// qualified (a library's name, say). cut says why the search stopped
// early, when it did.
func (s *Service) references(ctx context.Context, ix *indexed, name string, decls []*projectsv1.Symbol, bare bool, keep func(string) bool) (out []*projectsv1.Reference, cut string) {
	var goTargets []code.Position
	syntactic := bare && len(decls) == 0
	byFile := map[string][]code.Symbol{}
	for _, d := range decls {
		if d.GetLanguage() == projectsv1.Language_LANGUAGE_GO {
			goTargets = append(goTargets, code.Position{Path: d.GetPath(), Line: int(d.GetLine()), Column: int(d.GetColumn())})
			continue
		}
		syntactic = true
		byFile[d.GetPath()] = append(byFile[d.GetPath()], code.Symbol{Name: d.GetName(), Line: int(d.GetLine()), Column: int(d.GetColumn())})
	}
	paths := slices.Sorted(maps.Keys(ix.files))
	add := func(list []code.Reference, lang projectsv1.Language, how projectsv1.Resolution) {
		for _, r := range list {
			out = append(out, &projectsv1.Reference{
				ProjectId: ix.project.GetId(), Path: r.Path, Line: int32(r.Line), Column: int32(r.Column), Kind: r.Kind,
				Language: lang, Container: r.Container, LineText: r.LineText, Resolution: how,
			})
		}
	}
	if len(goTargets) > 0 {
		var goFiles []string
		for _, p := range paths {
			if ix.files[p].Language == projectsv1.Language_LANGUAGE_GO {
				goFiles = append(goFiles, p)
			}
		}
		found, err := code.GoReferences(ctx, ix.root.FS(), goFiles, name, goTargets, keep)
		add(found, projectsv1.Language_LANGUAGE_GO, projectsv1.Resolution_RESOLUTION_TYPED)
		if err != nil {
			return out, cutTime
		}
	}
	if !syntactic || !code.TreeSitter {
		return out, ""
	}
	for _, p := range paths {
		f := ix.files[p]
		if !treeSitterLanguage(f.Language) || !keep(p) {
			continue
		}
		if ctx.Err() != nil {
			return out, cutTime
		}
		src, err := readLimited(ix.root.FS(), p, s.cfg.Limits.MaxFileBytes)
		if err != nil || !bytes.Contains(src, []byte(name)) {
			continue
		}
		found, err := code.SyntacticReferences(p, src, name, byFile[p])
		if err != nil {
			continue
		}
		add(found, f.Language, projectsv1.Resolution_RESOLUTION_SYNTACTIC)
		if len(out) >= maxReferences {
			return out, cutReferences
		}
	}
	return out, ""
}

// cleanPath is a request's path as the index writes paths ("" for the
// whole project): "./src/" is "src", and .. leads nowhere.
func cleanPath(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }
