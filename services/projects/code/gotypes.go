package code

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// Position names a declaration: the file and the position of its name.
type Position struct {
	Path         string
	Line, Column int
}

// GoReferences finds the uses of the Go declarations at targets, all named
// name, in a project's Go files (slash paths relative to fsys, the project
// root). It type-checks from source each package with a file that mentions
// name, and the project's packages those import, so each use is tied to
// the declaration it names. Packages outside the project are not loaded:
// a use through one of their types is not found. keep, when not nil,
// keeps only the uses in the files it accepts. When ctx ends GoReferences
// returns what it found with ctx's error.
func GoReferences(ctx context.Context, fsys fs.FS, files []string, name string, targets []Position, keep func(path string) bool) ([]Reference, error) {
	l := newGoLoader(ctx, fsys, files)
	want := map[Position]bool{}
	for _, t := range targets {
		want[t] = true
	}
	var out []Reference
	for _, dir := range slices.Sorted(maps.Keys(l.dirs)) {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		for _, unit := range l.units(dir) {
			if !l.mentions(unit, name) {
				continue
			}
			info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
			conf := l.config(false)
			_, _ = conf.Check(l.importPath(dir), l.fset, l.asts(unit), info) // type errors are expected: outside packages are not loaded
			out = append(out, l.collect(unit, name, want, info, keep)...)
		}
	}
	return out, ctx.Err()
}

// goLoader type-checks the Go packages of one project from source.
type goLoader struct {
	ctx  context.Context
	fsys fs.FS
	fset *token.FileSet
	// dirs lists the Go files of each directory that can hold a package.
	dirs   map[string][]string
	srcs   map[string][]byte
	parsed map[string]*ast.File
	// modules maps a directory to its module (nearest go.mod above it).
	modules  map[string]goModule
	byImport map[string]string // import path → directory
	imported map[string]*types.Package
	busy     map[string]bool
	build    build.Context
}

type goModule struct{ dir, path string }

func newGoLoader(ctx context.Context, fsys fs.FS, files []string) *goLoader {
	l := &goLoader{
		ctx: ctx, fsys: fsys, fset: token.NewFileSet(),
		dirs: map[string][]string{}, srcs: map[string][]byte{}, parsed: map[string]*ast.File{},
		modules: map[string]goModule{}, byImport: map[string]string{},
		imported: map[string]*types.Package{}, busy: map[string]bool{},
		build: build.Default,
	}
	l.build.JoinPath = path.Join
	l.build.OpenFile = func(p string) (io.ReadCloser, error) { return fsys.Open(p) }
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") || !packageDir(path.Dir(f)) {
			continue
		}
		l.dirs[path.Dir(f)] = append(l.dirs[path.Dir(f)], f)
	}
	for dir := range l.dirs {
		l.byImport[l.importPath(dir)] = dir
	}
	return l
}

// packageDir reports whether the go command would build a package in dir:
// not in testdata, nor under a directory whose name starts with _ or ..
func packageDir(dir string) bool {
	for _, part := range strings.Split(dir, "/") {
		if part == "testdata" || strings.HasPrefix(part, "_") || strings.HasPrefix(part, ".") && part != "." {
			return false
		}
	}
	return true
}

// module is the module of dir: its nearest go.mod at or above it inside
// the project, or none (the directory's own path stands for its import
// path).
func (l *goLoader) module(dir string) goModule {
	if m, ok := l.modules[dir]; ok {
		return m
	}
	var m goModule
	if data, err := fs.ReadFile(l.fsys, path.Join(dir, "go.mod")); err == nil {
		m = goModule{dir: dir, path: modulePath(data)}
	} else if dir != "." {
		m = l.module(path.Dir(dir))
	}
	l.modules[dir] = m
	return m
}

// modulePath reads the module directive of a go.mod file.
func modulePath(gomod []byte) string {
	for line := range bytes.Lines(gomod) {
		f := strings.Fields(string(line))
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`+"`")
		}
	}
	return ""
}

func (l *goLoader) importPath(dir string) string {
	m := l.module(dir)
	if m.path == "" {
		return dir
	}
	switch {
	case dir == m.dir:
		return m.path
	case m.dir == ".":
		return m.path + "/" + dir
	}
	return m.path + "/" + strings.TrimPrefix(dir, m.dir+"/")
}

func (l *goLoader) source(file string) []byte {
	if src, ok := l.srcs[file]; ok {
		return src
	}
	src, err := fs.ReadFile(l.fsys, file)
	if err != nil {
		src = nil
	}
	l.srcs[file] = src
	return src
}

func (l *goLoader) parse(file string) *ast.File {
	if f, ok := l.parsed[file]; ok {
		return f
	}
	f, _ := parser.ParseFile(l.fset, file, l.source(file), parser.SkipObjectResolution)
	l.parsed[file] = f
	return f
}

// units splits the files of dir that the build constraints keep into the
// package with its in-package tests, and the external test package (its
// _test package), each as one type-checking unit.
func (l *goLoader) units(dir string) [][]string {
	var pkg, xtest []string
	name := l.packageName(dir)
	for _, f := range l.dirs[dir] {
		if ok, err := l.build.MatchFile(dir, path.Base(f)); err != nil || !ok {
			continue
		}
		a := l.parse(f)
		if a == nil {
			continue
		}
		switch a.Name.Name {
		case name:
			pkg = append(pkg, f)
		case name + "_test":
			xtest = append(xtest, f)
		}
	}
	var out [][]string
	for _, u := range [][]string{pkg, xtest} {
		if len(u) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// packageName is the package most non-test files of dir declare.
func (l *goLoader) packageName(dir string) string {
	count := map[string]int{}
	best := ""
	for _, f := range l.dirs[dir] {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if ok, err := l.build.MatchFile(dir, path.Base(f)); err != nil || !ok {
			continue
		}
		if a := l.parse(f); a != nil {
			count[a.Name.Name]++
			if n := a.Name.Name; count[n] > count[best] || count[n] == count[best] && n < best {
				best = n
			}
		}
	}
	if best == "" {
		for _, f := range l.dirs[dir] { // only test files
			if a := l.parse(f); a != nil {
				return strings.TrimSuffix(a.Name.Name, "_test")
			}
		}
	}
	return best
}

func (l *goLoader) mentions(files []string, name string) bool {
	for _, f := range files {
		if bytes.Contains(l.source(f), []byte(name)) {
			return true
		}
	}
	return false
}

func (l *goLoader) asts(files []string) []*ast.File {
	out := make([]*ast.File, 0, len(files))
	for _, f := range files {
		out = append(out, l.parse(f))
	}
	return out
}

func (l *goLoader) config(importing bool) *types.Config {
	return &types.Config{
		Importer:         l,
		Error:            func(error) {},
		FakeImportC:      true,
		IgnoreFuncBodies: importing,
		Sizes:            types.SizesFor("gc", runtime.GOARCH),
	}
}

var errOutside = errors.New("not a package of the project")

// Import implements types.Importer: a package of the project is
// type-checked from source (declarations only), once; any other package
// is not loaded.
func (l *goLoader) Import(importPath string) (*types.Package, error) {
	if p, ok := l.imported[importPath]; ok {
		return p, nil
	}
	if err := l.ctx.Err(); err != nil {
		return nil, err
	}
	dir, ok := l.byImport[importPath]
	if !ok {
		return nil, errOutside
	}
	if l.busy[importPath] {
		return nil, fmt.Errorf("import cycle through %s", importPath)
	}
	l.busy[importPath] = true
	defer delete(l.busy, importPath)
	var files []string
	for _, u := range l.units(dir) {
		for _, f := range u {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	pkg, _ := l.config(true).Check(importPath, l.fset, l.asts(files), nil)
	l.imported[importPath] = pkg
	return pkg, nil
}

// collect returns the uses in files, of objects declared at want, named
// name.
func (l *goLoader) collect(files []string, name string, want map[Position]bool, info *types.Info, keep func(string) bool) []Reference {
	var out []Reference
	for _, file := range files {
		if keep != nil && !keep(file) {
			continue
		}
		f := l.parse(file)
		calls := callees(f)
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || id.Name != name {
				return true
			}
			obj, def := info.Defs[id], true
			if obj == nil {
				obj, def = info.Uses[id], false
			}
			if obj == nil {
				return true
			}
			decl := l.fset.Position(obj.Pos())
			if !want[Position{Path: decl.Filename, Line: decl.Line, Column: decl.Column}] {
				return true
			}
			at := l.fset.Position(id.Pos())
			kind := projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
			switch _, isType := obj.(*types.TypeName); {
			case def && obj.Pos() == id.Pos():
				kind = projectsv1.ReferenceKind_REFERENCE_KIND_DEFINITION
			case isType:
				kind = projectsv1.ReferenceKind_REFERENCE_KIND_TYPE
			case calls[id]:
				kind = projectsv1.ReferenceKind_REFERENCE_KIND_CALL
			}
			out = append(out, Reference{
				Path: file, Line: at.Line, Column: at.Column, Kind: kind,
				Container: goContainer(f, id), LineText: lineText(l.source(file), at.Line),
			})
			return true
		})
	}
	return out
}

// callees are the identifiers of f that name what a call calls: f in f(x)
// and in x.f(y), also with type arguments.
func callees(f *ast.File) map[*ast.Ident]bool {
	out := map[*ast.Ident]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fun := ast.Unparen(c.Fun)
		switch x := fun.(type) {
		case *ast.IndexExpr:
			fun = x.X
		case *ast.IndexListExpr:
			fun = x.X
		}
		switch x := fun.(type) {
		case *ast.Ident:
			out[x] = true
		case *ast.SelectorExpr:
			out[x.Sel] = true
		}
		return true
	})
	return out
}

// goContainer names the declaration id is in, as Symbol.Container does:
// "Type.Method" inside a method, the function or the declared name inside
// other declarations; for a declaration's own name, what encloses it.
func goContainer(f *ast.File, id *ast.Ident) string {
	for _, d := range f.Decls {
		if id.Pos() < d.Pos() || id.Pos() >= d.End() {
			continue
		}
		switch d := d.(type) {
		case *ast.FuncDecl:
			recv := receiverType(d.Recv)
			switch {
			case id == d.Name:
				return recv
			case recv != "":
				return recv + "." + d.Name.Name
			}
			return d.Name.Name
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if id.Pos() < spec.Pos() || id.Pos() >= spec.End() {
					continue
				}
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if id == spec.Name {
						return ""
					}
					return spec.Name.Name
				case *ast.ValueSpec:
					if slices.Contains(spec.Names, id) || len(spec.Names) == 0 {
						return ""
					}
					return spec.Names[0].Name
				}
			}
		}
	}
	return ""
}
