//go:build !cgo

package code

import projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"

// TreeSitter reports whether this build parses TypeScript, JavaScript and
// Python: not without cgo (tree-sitter is C).
const TreeSitter = false

func treeSymbols(string, projectsv1.Language, []byte) ([]Symbol, error) { return nil, ErrNoTreeSitter }

// SyntacticReferences answers ErrNoTreeSitter in a build without cgo.
func SyntacticReferences(string, []byte, string, []Symbol) ([]Reference, error) {
	return nil, ErrNoTreeSitter
}
