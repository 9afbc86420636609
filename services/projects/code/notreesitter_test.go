//go:build !cgo

package code_test

import (
	"errors"
	"testing"

	"github.com/toolmesh/toolmesh/services/projects/code"
)

// Without cgo there is no tree-sitter: the languages it parses say so, and
// Go still parses.
func TestWithoutCgoTreeSitterLanguagesAreAGap(t *testing.T) {
	for _, name := range []string{"a.ts", "a.tsx", "a.js", "a.py"} {
		if _, err := code.Parse(name, []byte("x = 1\n")); !errors.Is(err, code.ErrNoTreeSitter) {
			t.Errorf("Parse(%s): %v, want ErrNoTreeSitter", name, err)
		}
		if _, err := code.SyntacticReferences(name, []byte("x = 1\n"), "x", nil); !errors.Is(err, code.ErrNoTreeSitter) {
			t.Errorf("SyntacticReferences(%s): %v, want ErrNoTreeSitter", name, err)
		}
	}
	if f, err := code.Parse("a.go", []byte("package a\n\nfunc F() {}\n")); err != nil || len(f.Symbols) != 1 {
		t.Errorf("Parse(a.go) = %+v, %v; want F", f.Symbols, err)
	}
	if code.TreeSitter {
		t.Error("TreeSitter is true in a build without cgo")
	}
}
