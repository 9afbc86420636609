package projects_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

// where lists symbols as "path:line container.name".
func where(list []*projectsv1.Symbol) []string {
	var out []string
	for _, s := range list {
		out = append(out, fmt.Sprintf("%s:%d %s.%s", s.GetPath(), s.GetLine(), s.GetContainer(), s.GetName()))
	}
	return out
}

// uses lists references as "path:line kind container".
func uses(list []*projectsv1.Reference) []string {
	var out []string
	for _, r := range list {
		kind := strings.ToLower(strings.TrimPrefix(r.GetKind().String(), "REFERENCE_KIND_"))
		out = append(out, fmt.Sprintf("%s:%d %s %s", r.GetPath(), r.GetLine(), kind, r.GetContainer()))
	}
	return out
}

func TestCodeSymbols(t *testing.T) {
	eachProtocol(t, projects.Config{}, func(t *testing.T, f *fixture) {
		all := f.create(t, agentA, "all", ".")
		ctx := as(agentA)
		res, err := f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Query: "cart"})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			// Exact names first, then names that start with the query.
			"gomod/shop/shop.go:8 .Cart", "js/app.js:5 .Cart", "py/shop.py:16 .Cart", "js/app.js:24 .makeCart",
		}
		if diff := cmp.Diff(want, where(res.GetSymbols())); diff != "" {
			t.Errorf("symbols like cart (-want +got):\n%s", diff)
		}
		rep := res.GetIndex()[0]
		if rep.GetFiles() != 6 || rep.GetParsed() != 6 || rep.GetReused() != 0 || rep.GetTruncated() {
			t.Errorf("first index: %v, want the 6 source files parsed", rep)
		}
		s := res.GetSymbols()[0]
		wantSym := &projectsv1.Symbol{ProjectId: all.GetId(), Path: "gomod/shop/shop.go", Name: "Cart", Kind: projectsv1.SymbolKind_SYMBOL_KIND_STRUCT,
			Language: projectsv1.Language_LANGUAGE_GO, Line: 8, Column: 6, EndLine: 10, Signature: "type Cart struct"}
		if diff := cmp.Diff(wantSym, s, protocmp.Transform()); diff != "" {
			t.Errorf("Cart (-want +got):\n%s", diff)
		}

		for _, tc := range []struct {
			req  *projectsv1.CodeSymbolsRequest
			want []string
		}{
			{&projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Query: "add", Kind: projectsv1.SymbolKind_SYMBOL_KIND_METHOD},
				[]string{"gomod/shop/shop.go:13 Cart.Add", "gomod/shop/shop.go:24 Wishlist.Add", "gomod/shop/shop.go:30 Adder.Add", "js/app.js:8 Cart.add", "py/shop.py:22 Cart.add"}},
			{&projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Query: "ADD", Path: "./py/"}, []string{"py/shop.py:22 Cart.add"}},
			{&projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Language: projectsv1.Language_LANGUAGE_TYPESCRIPT, Kind: projectsv1.SymbolKind_SYMBOL_KIND_INTERFACE},
				[]string{"ts/repo.ts:4 .Repo", "ts/repo.ts:32 .User"}},
			{&projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Query: "nothing-like-it"}, nil},
		} {
			res, err := f.client.CodeSymbols(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, where(res.GetSymbols())); diff != "" {
				t.Errorf("CodeSymbols(%v) (-want +got):\n%s", tc.req, diff)
			}
		}
		page, err := f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{ProjectId: all.GetId(), Offset: 2, Limit: 3})
		if err != nil || len(page.GetSymbols()) != 3 || page.GetPage().GetNextOffset() != 5 || page.GetPage().GetTotal() < 50 {
			t.Errorf("a page of every symbol: %d symbols, page %v, %v", len(page.GetSymbols()), page.GetPage(), err)
		}

		// Without project_id: every active project of the caller's.
		py := f.create(t, agentA, "py", "py")
		res, err = f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{Query: "checkout", Language: projectsv1.Language_LANGUAGE_PYTHON})
		if err != nil {
			t.Fatal(err)
		}
		var projectsSeen []string
		for _, s := range res.GetSymbols() {
			projectsSeen = append(projectsSeen, s.GetProjectId()+":"+s.GetPath())
		}
		slices.Sort(projectsSeen)
		wantSeen := []string{all.GetId() + ":py/shop.py", py.GetId() + ":shop.py"}
		slices.Sort(wantSeen)
		if diff := cmp.Diff(wantSeen, projectsSeen); diff != "" || len(res.GetIndex()) != 2 {
			t.Errorf("checkout in every project (-want +got):\n%s\nindex %v", diff, res.GetIndex())
		}
		if res, err := f.client.CodeSymbols(as(agentB), &projectsv1.CodeSymbolsRequest{Query: "checkout"}); err != nil || len(res.GetSymbols()) != 0 {
			t.Errorf("another agent's search: %v, %v; want nothing", res.GetSymbols(), err)
		}
		if _, err := f.client.CodeSymbols(as(agentB), &projectsv1.CodeSymbolsRequest{ProjectId: py.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's project: %v, want not_found", err)
		}
	})
}

func TestFindReferences(t *testing.T) {
	eachProtocol(t, projects.Config{}, func(t *testing.T, f *fixture) {
		all := f.create(t, agentA, "all", ".")
		ctx := as(agentA)
		find := func(req *projectsv1.FindReferencesRequest) *projectsv1.FindReferencesResponse {
			t.Helper()
			req.ProjectId = all.GetId()
			res, err := f.client.FindReferences(ctx, req)
			if err != nil {
				t.Fatalf("FindReferences(%v): %v", req, err)
			}
			return res
		}

		// Go: resolved by type. Wishlist.Add and Adder.Add are others.
		res := find(&projectsv1.FindReferencesRequest{Symbol: "Cart.Add"})
		if diff := cmp.Diff([]string{"gomod/shop/shop.go:13 Cart.Add"}, where(res.GetDeclarations())); diff != "" {
			t.Errorf("declarations of Cart.Add (-want +got):\n%s", diff)
		}
		want := []string{
			"gomod/main.go:11 call main", "gomod/main.go:11 call main", "gomod/main.go:14 reference main",
			"gomod/shop/shop.go:13 definition Cart", "gomod/shop/shop_test.go:10 call TestAdd",
		}
		if diff := cmp.Diff(want, uses(res.GetReferences())); diff != "" {
			t.Errorf("references of Cart.Add (-want +got):\n%s", diff)
		}
		for _, r := range res.GetReferences() {
			if r.GetResolution() != projectsv1.Resolution_RESOLUTION_TYPED || r.GetLanguage() != projectsv1.Language_LANGUAGE_GO || r.GetLineText() == "" {
				t.Errorf("%v: want a typed Go reference with its line", r)
			}
		}

		// Unqualified: every declaration named add, in every language; the
		// TypeScript and Python ones are found by syntax.
		res = find(&projectsv1.FindReferencesRequest{Symbol: "add", Path: "py"})
		if diff := cmp.Diff([]string{"js/app.js:8 Cart.add", "py/shop.py:22 Cart.add"}, where(res.GetDeclarations())); diff != "" {
			t.Errorf("declarations of add (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"py/shop.py:22 definition Cart", "py/shop.py:33 call checkout"}, uses(res.GetReferences())); diff != "" {
			t.Errorf("references of add in py (-want +got):\n%s", diff)
		}
		if r := res.GetReferences()[1]; r.GetResolution() != projectsv1.Resolution_RESOLUTION_SYNTACTIC || r.GetLanguage() != projectsv1.Language_LANGUAGE_PYTHON {
			t.Errorf("%v: want a syntactic Python reference", r)
		}

		// A name declared nowhere in the project (a library's) is found by
		// syntax where the code uses it.
		res = find(&projectsv1.FindReferencesRequest{Symbol: "Decimal"})
		if len(res.GetDeclarations()) != 0 || len(res.GetReferences()) != 6 {
			t.Errorf("Decimal: %v declared, %v used; want 6 uses in shop.py", where(res.GetDeclarations()), uses(res.GetReferences()))
		}

		// Pages.
		res = find(&projectsv1.FindReferencesRequest{Symbol: "UserRepo", Offset: 1, Limit: 1})
		if diff := cmp.Diff([]string{"ts/repo.ts:37 type register"}, uses(res.GetReferences())); diff != "" || res.GetPage().GetTotal() != 3 {
			t.Errorf("page 2 of UserRepo's references, of %d (-want +got):\n%s", res.GetPage().GetTotal(), diff)
		}
	})
}

// The index reads a file again only when its size or time changed, and
// parses it again only when its content changed; a deleted file leaves it.
func TestIndexIsIncremental(t *testing.T) {
	f := start(t, projects.Config{})
	p := f.create(t, agentA, "py", "py")
	ctx := as(agentA)
	index := func() *projectsv1.IndexReport {
		t.Helper()
		res, err := f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetIndex()[0]
	}
	f.write(t, "py/extra.py", "def extra():\n    pass\n")
	if rep := index(); rep.GetFiles() != 2 || rep.GetParsed() != 2 {
		t.Fatalf("first index: %v, want 2 files parsed", rep)
	}
	if rep := index(); rep.GetFiles() != 2 || rep.GetParsed() != 0 || rep.GetReused() != 2 {
		t.Errorf("nothing changed: %v, want both reused", rep)
	}
	// Touched: read again, not parsed.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(f.base, "py", "extra.py"), later, later); err != nil {
		t.Fatal(err)
	}
	if rep := index(); rep.GetParsed() != 0 || rep.GetReused() != 2 {
		t.Errorf("a touched file: %v, want nothing parsed", rep)
	}
	// Changed: parsed again, its symbols replaced.
	f.write(t, "py/extra.py", "def renamed():\n    pass\n")
	if rep := index(); rep.GetParsed() != 1 || rep.GetReused() != 1 {
		t.Errorf("a changed file: %v, want it parsed, the other reused", rep)
	}
	res, _ := f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId(), Path: "extra.py"})
	if diff := cmp.Diff([]string{"extra.py:1 .renamed"}, where(res.GetSymbols())); diff != "" {
		t.Errorf("symbols of the changed file (-want +got):\n%s", diff)
	}
	// Deleted: gone from the index.
	if err := os.Remove(filepath.Join(f.base, "py", "extra.py")); err != nil {
		t.Fatal(err)
	}
	if rep := index(); rep.GetFiles() != 1 {
		t.Errorf("a deleted file: %v, want 1 file left", rep)
	}
	res, _ = f.client.CodeSymbols(ctx, &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId(), Query: "renamed"})
	if len(res.GetSymbols()) != 0 {
		t.Errorf("the deleted file's symbols are still found: %v", where(res.GetSymbols()))
	}
}

// A project larger than the limits answers what was indexed and says it
// was cut.
func TestIndexLimits(t *testing.T) {
	t.Run("files", func(t *testing.T) {
		f := start(t, projects.Config{Limits: projects.Limits{MaxFiles: 3}})
		p := f.create(t, agentA, "all", ".")
		res, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		rep := res.GetIndex()[0]
		if rep.GetFiles() != 3 || rep.GetSkipped() != 3 || !rep.GetTruncated() || !strings.HasPrefix(rep.GetCutReason(), "file limit") {
			t.Errorf("6 files with a limit of 3: %v, want 3 indexed, 3 skipped, cut by the file limit", rep)
		}
		if len(res.GetSymbols()) == 0 {
			t.Error("no symbol of the files indexed")
		}
	})
	t.Run("file size", func(t *testing.T) {
		f := start(t, projects.Config{Limits: projects.Limits{MaxFileBytes: 600}})
		p := f.create(t, agentA, "all", ".")
		res, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		var small int32
		if err := filepathWalk(t, f.base, func(size int64) {
			if size <= 600 {
				small++
			}
		}); err != nil {
			t.Fatal(err)
		}
		if small == 0 || small == 6 {
			t.Fatalf("%d of the 6 fixtures are under 600 bytes: the test needs some on each side", small)
		}
		if rep := res.GetIndex()[0]; rep.GetFiles() != small || rep.GetSkipped() != 6-small || rep.GetTruncated() {
			t.Errorf("files over 600 bytes: %v, want %d indexed and the rest skipped, not cut", rep, small)
		}
	})
	t.Run("time", func(t *testing.T) {
		f := start(t, projects.Config{Limits: projects.Limits{Timeout: time.Nanosecond}})
		p := f.create(t, agentA, "all", ".")
		res, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if rep := res.GetIndex()[0]; !rep.GetTruncated() || !strings.HasPrefix(rep.GetCutReason(), "time limit") {
			t.Errorf("no time to read: %v, want cut by the time limit", rep)
		}
	})
}

// filepathWalk calls fn with the size of each source file under root.
func filepathWalk(t *testing.T, root string, fn func(size int64)) error {
	t.Helper()
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".go", ".ts", ".js", ".py":
			fn(info.Size())
		}
		return nil
	})
}
