//go:build cgo

package code_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects/code"
)

const (
	function  = projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION
	method    = projectsv1.SymbolKind_SYMBOL_KIND_METHOD
	class     = projectsv1.SymbolKind_SYMBOL_KIND_CLASS
	iface     = projectsv1.SymbolKind_SYMBOL_KIND_INTERFACE
	typ       = projectsv1.SymbolKind_SYMBOL_KIND_TYPE
	enum      = projectsv1.SymbolKind_SYMBOL_KIND_ENUM
	constant  = projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT
	variable  = projectsv1.SymbolKind_SYMBOL_KIND_VARIABLE
	field     = projectsv1.SymbolKind_SYMBOL_KIND_FIELD
	module    = projectsv1.SymbolKind_SYMBOL_KIND_MODULE
	defn      = projectsv1.ReferenceKind_REFERENCE_KIND_DEFINITION
	call      = projectsv1.ReferenceKind_REFERENCE_KIND_CALL
	typeUse   = projectsv1.ReferenceKind_REFERENCE_KIND_TYPE
	reference = projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
)

func parseFixture(t *testing.T, file string) ([]byte, code.File) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := code.Parse(file, src)
	if err != nil {
		t.Fatal(err)
	}
	return src, f
}

func TestTreeSitterSymbols(t *testing.T) {
	for _, tc := range []struct {
		file string
		lang projectsv1.Language
		want []sym
	}{
		{"ts/repo.ts", projectsv1.Language_LANGUAGE_TYPESCRIPT, []sym{
			{"", "Repo", iface, 4}, {"Repo", "name", field, 5}, {"Repo", "save", method, 6},
			{"", "Role", enum, 9}, {"Role", "Admin", constant, 10}, {"Role", "Member", constant, 11},
			{"", "UserId", typ, 14},
			{"", "UserRepo", class, 16}, {"UserRepo", "name", field, 17}, {"UserRepo", "cache", field, 18},
			{"UserRepo", "constructor", method, 20}, {"UserRepo", "save", method, 22}, {"UserRepo", "find", method, 27},
			{"", "User", iface, 32}, {"User", "id", field, 33}, {"User", "role", field, 34},
			{"", "register", function, 37}, {"", "greet", function, 41},
			{"", "Audit", module, 43}, {"Audit", "record", function, 44},
		}},
		{"js/app.js", projectsv1.Language_LANGUAGE_JAVASCRIPT, []sym{
			{"", "express", constant, 1}, {"", "PORT", constant, 3},
			{"", "Cart", class, 5}, {"Cart", "items", field, 6}, {"Cart", "add", method, 8}, {"Cart", "total", method, 13},
			{"", "checkout", function, 18}, {"", "makeCart", function, 24},
		}},
		{"py/shop.py", projectsv1.Language_LANGUAGE_PYTHON, []sym{
			{"", "TAX_RATE", constant, 6}, {"", "registry", variable, 7},
			{"", "Item", class, 11}, {"Item", "name", field, 12}, {"Item", "price", field, 13},
			{"", "Cart", class, 16}, {"Cart", "currency", field, 17}, {"Cart", "__init__", method, 19},
			{"Cart", "add", method, 22}, {"Cart", "total", method, 27},
			{"", "checkout", function, 31}, {"", "BASKET", constant, 38},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src, f := parseFixture(t, tc.file)
			if f.Language != tc.lang {
				t.Errorf("language %v, want %v", f.Language, tc.lang)
			}
			if diff := cmp.Diff(tc.want, syms(f.Symbols)); diff != "" {
				t.Errorf("symbols (-want +got):\n%s", diff)
			}
			for _, s := range f.Symbols {
				if line := lineOf(t, src, s.Signature); line != s.Line || s.EndLine < s.Line {
					t.Errorf("%s.%s: signature %q is on line %d, the symbol on %d (to %d)", s.Container, s.Name, s.Signature, line, s.Line, s.EndLine)
				}
			}
		})
	}
	// A decorated definition spans its decorators.
	_, f := parseFixture(t, "py/shop.py")
	for _, s := range f.Symbols {
		if s.Name == "total" && (s.Signature != "def total(self) -> Decimal:" || s.EndLine != 28) {
			t.Errorf("Cart.total: %q to line %d, want its def line, to line 28", s.Signature, s.EndLine)
		}
	}
}

func TestTreeSitterReferences(t *testing.T) {
	type sref struct {
		Line, Column int
		Kind         projectsv1.ReferenceKind
		Container    string
	}
	for _, tc := range []struct {
		file, name string
		want       []sref
	}{
		// Interface and class methods are both named save; a comment and
		// two strings that say save are not uses.
		{"ts/repo.ts", "save", []sref{{6, 3, defn, "Repo"}, {22, 9, defn, "UserRepo"}, {38, 8, call, "register"}}},
		{"ts/repo.ts", "UserRepo", []sref{{16, 14, defn, ""}, {37, 32, typeUse, "register"}, {44, 32, typeUse, "Audit.record"}}},
		{"js/app.js", "add", []sref{{8, 3, defn, "Cart"}, {20, 8, call, "checkout"}}},
		{"js/app.js", "Cart", []sref{{5, 7, defn, ""}, {24, 28, call, "makeCart"}, {26, 20, reference, ""}}},
		// A docstring, a comment, a string annotation and a string
		// argument that say Cart are not uses.
		{"py/shop.py", "Cart", []sref{{16, 7, defn, ""}, {31, 20, typeUse, "checkout"}, {38, 14, call, ""}}},
		{"py/shop.py", "add", []sref{{22, 9, defn, "Cart"}, {33, 10, call, "checkout"}}},
		{"py/shop.py", "Item", []sref{{11, 7, defn, ""}, {20, 26, typeUse, "Cart.__init__"}, {22, 25, typeUse, "Cart.add"}, {33, 14, call, "checkout"}}},
	} {
		t.Run(tc.file+"/"+tc.name, func(t *testing.T) {
			src, f := parseFixture(t, tc.file)
			var decls []code.Symbol
			for _, s := range f.Symbols {
				if s.Name == tc.name {
					decls = append(decls, s)
				}
			}
			got, err := code.SyntacticReferences(tc.file, src, tc.name, decls)
			if err != nil {
				t.Fatal(err)
			}
			var list []sref
			for _, r := range got {
				list = append(list, sref{r.Line, r.Column, r.Kind, r.Container})
				if r.Path != tc.file || r.LineText == "" {
					t.Errorf("reference %+v: path %q, line text %q", r, r.Path, r.LineText)
				}
			}
			if diff := cmp.Diff(tc.want, list); diff != "" {
				t.Errorf("references (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarkersAndTests(t *testing.T) {
	_, py := parseFixture(t, "py/shop.py")
	if py.Lines != 39 || py.Todos != 1 || py.Fixmes != 0 || py.Test {
		t.Errorf("shop.py: %d lines, %d TODO, %d FIXME, test %v; want 39, 1, 0, false", py.Lines, py.Todos, py.Fixmes, py.Test)
	}
	for name, want := range map[string]bool{
		"a/b_test.go": true, "a/b.go": false, "test_cart.py": true, "cart_test.py": true, "cart.py": false, "testing.py": false,
		"src/cart.test.ts": true, "src/cart.spec.js": true, "src/__tests__/cart.ts": true, "src/cart.ts": false, "README.md": false,
	} {
		if got := code.IsTest(name); got != want {
			t.Errorf("IsTest(%q) = %v, want %v", name, got, want)
		}
	}
	// A syntax error leaves what parses.
	f, err := code.Parse("broken.ts", []byte("export function ok() {}\nclass {{{\n"))
	if err != nil || len(f.Symbols) == 0 || f.Symbols[0].Name != "ok" {
		t.Errorf("broken.ts: %+v, %v; want the function before the error", f.Symbols, err)
	}
}
