package code_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects/code"
)

// repoRoot is this repository, whose own Go code the tests parse.
const repoRoot = "../../.."

// sym is what the tests compare of a symbol.
type sym struct {
	Container, Name string
	Kind            projectsv1.SymbolKind
	Line            int
}

func syms(list []code.Symbol) []sym {
	out := make([]sym, 0, len(list))
	for _, s := range list {
		out = append(out, sym{s.Container, s.Name, s.Kind, s.Line})
	}
	return out
}

// lineOf is the line (from 1) of the first line of src containing text.
func lineOf(t *testing.T, src []byte, text string) int {
	t.Helper()
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("no line contains %q", text)
	return 0
}

// The declarations of one of this repository's files, where its text says
// they are.
func TestGoSymbolsOfThisRepository(t *testing.T) {
	const file = "services/tasks/service.go"
	src, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := code.Parse(file, src)
	if err != nil {
		t.Fatal(err)
	}
	if f.Language != projectsv1.Language_LANGUAGE_GO || f.Test || f.Lines != strings.Count(string(src), "\n") {
		t.Errorf("file: language %v, test %v, %d lines; want Go, not a test, %d lines", f.Language, f.Test, f.Lines, strings.Count(string(src), "\n"))
	}
	got := map[string]code.Symbol{}
	for _, s := range f.Symbols {
		got[s.Container+"."+s.Name] = s
	}
	for _, w := range []struct {
		key, line string
		kind      projectsv1.SymbolKind
	}{
		{".DefaultMaxPerDay", "const DefaultMaxPerDay", projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT},
		{".Config", "type Config struct", projectsv1.SymbolKind_SYMBOL_KIND_STRUCT},
		{"Config.MaxPerDay", "\tMaxPerDay int", projectsv1.SymbolKind_SYMBOL_KIND_FIELD},
		{".Service", "type Service struct", projectsv1.SymbolKind_SYMBOL_KIND_STRUCT},
		{".New", "func New(", projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION},
		{"Service.Create", "func (s *Service) Create(", projectsv1.SymbolKind_SYMBOL_KIND_METHOD},
		{"Service.move", "func (s *Service) move(", projectsv1.SymbolKind_SYMBOL_KIND_METHOD},
		{".CanMove", "func CanMove(", projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION},
	} {
		s, ok := got[w.key]
		if !ok {
			t.Errorf("no symbol %s", w.key)
			continue
		}
		line := lineOf(t, src, w.line)
		if s.Kind != w.kind || s.Line != line || !strings.HasPrefix(s.Signature, strings.TrimSpace(w.line)) {
			t.Errorf("%s = %v at line %d (%q), want %v at line %d", w.key, s.Kind, s.Line, s.Signature, w.kind, line)
		}
		if s.Column < 1 || !strings.HasPrefix(strings.Split(string(src), "\n")[line-1][s.Column-1:], s.Name) {
			t.Errorf("%s: column %d does not point at its name", w.key, s.Column)
		}
	}
	if s := got["Service.Create"]; s.EndLine <= s.Line {
		t.Errorf("Service.Create ends at line %d, before it starts (%d)", s.EndLine, s.Line)
	}
}

// Every Go file of this repository parses, and its symbol count is what
// go/ast sees declared at the package level.
func TestEveryGoFileOfThisRepositoryParses(t *testing.T) {
	files := goFiles(t, repoRoot)
	if len(files) < 300 {
		t.Fatalf("found %d Go files in the repository; the walk is wrong", len(files))
	}
	total := 0
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		f, err := code.Parse(file, src)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, s := range f.Symbols {
			if s.Line < 1 || s.Column < 1 || s.EndLine < s.Line || s.Name == "" {
				t.Fatalf("%s: bad symbol %+v", file, s)
			}
		}
		total += len(f.Symbols)
	}
	t.Logf("%d Go files, %d symbols", len(files), total)
}

// goFiles lists the Go files under root as slash paths, skipping hidden
// directories.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ref is what the tests compare of a reference.
type ref struct {
	Path      string
	Line      int
	Kind      projectsv1.ReferenceKind
	Container string
}

func refs(list []code.Reference) []ref {
	out := make([]ref, 0, len(list))
	for _, r := range list {
		out = append(out, ref{r.Path, r.Line, r.Kind, r.Container})
	}
	slices.SortFunc(out, func(a, b ref) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// declarations returns the positions of the symbols of file named name in
// container.
func declarations(t *testing.T, fsys fs.FS, file, container, name string) []code.Position {
	t.Helper()
	src, err := fs.ReadFile(fsys, file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := code.Parse(file, src)
	if err != nil {
		t.Fatal(err)
	}
	var out []code.Position
	for _, s := range f.Symbols {
		if s.Name == name && s.Container == container {
			out = append(out, code.Position{Path: file, Line: s.Line, Column: s.Column})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s declares no %s.%s", file, container, name)
	}
	return out
}

// Type checking tells Cart.Add from Wishlist.Add and from the Adder
// interface's Add: only the uses of the one asked for are found, in the
// package, the main package and the external test package.
func TestGoReferencesAreResolvedByType(t *testing.T) {
	fsys := os.DirFS("testdata/gomod")
	files := goFiles(t, "testdata/gomod")
	targets := declarations(t, fsys, "shop/shop.go", "Cart", "Add")
	got, err := code.GoReferences(context.Background(), fsys, files, "Add", targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	const (
		def  = projectsv1.ReferenceKind_REFERENCE_KIND_DEFINITION
		call = projectsv1.ReferenceKind_REFERENCE_KIND_CALL
		use  = projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
	)
	want := refs([]code.Reference{
		{Path: "shop/shop.go", Line: 13, Kind: def, Container: "Cart"},
		{Path: "main.go", Line: 11, Kind: call, Container: "main"}, // c.Add("apple")
		{Path: "main.go", Line: 11, Kind: call, Container: "main"}, // .Add("pear")
		{Path: "main.go", Line: 14, Kind: use, Container: "main"},  // add := c.Add
		{Path: "shop/shop_test.go", Line: 10, Kind: call, Container: "TestAdd"},
	})
	if diff := cmp.Diff(want, refs(got)); diff != "" {
		t.Errorf("references of Cart.Add (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if r.LineText == "" || r.Column < 1 {
			t.Errorf("reference %+v has no line text or column", r)
		}
	}

	// The interface's method is another declaration, with its own uses.
	targets = declarations(t, fsys, "shop/shop.go", "Adder", "Add")
	got, err = code.GoReferences(context.Background(), fsys, files, "Add", targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = refs([]code.Reference{
		{Path: "shop/shop.go", Line: 30, Kind: def, Container: "Adder"},
		{Path: "shop/shop.go", Line: 36, Kind: call, Container: "Fill"},
	})
	if diff := cmp.Diff(want, refs(got)); diff != "" {
		t.Errorf("references of Adder.Add (-want +got):\n%s", diff)
	}

	// keep keeps the uses in some files only.
	got, err = code.GoReferences(context.Background(), fsys, files, "Cart", declarations(t, fsys, "shop/shop.go", "", "Cart"), func(p string) bool { return p == "main.go" })
	if err != nil {
		t.Fatal(err)
	}
	want = refs([]code.Reference{{Path: "main.go", Line: 10, Kind: projectsv1.ReferenceKind_REFERENCE_KIND_TYPE, Container: "main"}})
	if diff := cmp.Diff(want, refs(got)); diff != "" {
		t.Errorf("references of Cart in main.go (-want +got):\n%s", diff)
	}
}

// The uses of idempotency.MarkReplay across this repository are every
// identifier so named in the Go code the build compiles (it is declared
// once), and none of the comments that mention it.
func TestGoReferencesInThisRepository(t *testing.T) {
	fsys := os.DirFS(repoRoot)
	files := goFiles(t, repoRoot)
	targets := declarations(t, fsys, "internal/idempotency/idempotency.go", "", "MarkReplay")
	got, err := code.GoReferences(context.Background(), fsys, files, "MarkReplay", targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []code.Reference
	for _, file := range files {
		dir := path.Dir(file)
		if strings.Contains("/"+file, "/testdata/") {
			continue
		}
		if ok, err := build.Default.MatchFile(filepath.Join(repoRoot, dir), path.Base(file)); err != nil || !ok {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, readFile(t, filepath.Join(repoRoot, file)), parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "MarkReplay" {
				want = append(want, code.Reference{Path: file, Line: fset.Position(id.Pos()).Line})
			}
			return true
		})
	}
	if len(want) < 5 {
		t.Fatalf("the oracle found %d uses of MarkReplay; it is wrong", len(want))
	}
	type at struct {
		Path string
		Line int
	}
	where := func(list []code.Reference) []at {
		var out []at
		for _, r := range list {
			out = append(out, at{r.Path, r.Line})
		}
		slices.SortFunc(out, func(a, b at) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return out
	}
	if diff := cmp.Diff(where(want), where(got)); diff != "" {
		t.Errorf("uses of MarkReplay (-identifiers +references):\n%s", diff)
	}
	for _, r := range got {
		switch {
		case r.Path == "internal/idempotency/idempotency.go" && r.Kind == projectsv1.ReferenceKind_REFERENCE_KIND_DEFINITION:
		case r.Kind != projectsv1.ReferenceKind_REFERENCE_KIND_CALL || !strings.Contains(r.LineText, "MarkReplay(") || r.Container == "":
			t.Errorf("%s:%d: %v in %q (%q), want a call in a function", r.Path, r.Line, r.Kind, r.Container, r.LineText)
		}
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
