// Package code reads source files the way a compiler does, so the projects
// domain finds declarations and their uses by structure, not by text:
//
//   - Go with the standard library: go/parser for declarations (Parse) and
//     go/types for uses (GoReferences), which type-checks the project's own
//     packages from source, so a use is tied to the one declaration it
//     names. It needs no go command: packages outside the project (the
//     standard library, dependencies) are not loaded, and uses through
//     them are not resolved.
//   - TypeScript, JavaScript and Python with tree-sitter (Parse, and
//     SyntacticReferences: every identifier with the name in code, not in
//     comments or strings). tree-sitter is C: a binary built without cgo
//     has no parser for them and answers ErrNoTreeSitter.
//
// The smallest use:
//
//	f, err := code.Parse("api/server.go", src)
//	for _, s := range f.Symbols {
//		fmt.Println(s.Container, s.Name, s.Kind, s.Line)
//	}
package code

import (
	"bytes"
	"errors"
	"path"
	"regexp"
	"strings"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// ErrNoTreeSitter is Parse's and SyntacticReferences' answer for a
// tree-sitter language in a binary built without cgo.
var ErrNoTreeSitter = errors.New("this build of toolmesh has no tree-sitter parsers (it was built without cgo): TypeScript, JavaScript and Python cannot be parsed")

// Symbol is one declaration in a file.
type Symbol struct {
	Name string
	Kind projectsv1.SymbolKind
	// Line and Column locate the declared name, from 1 (the column in
	// bytes); EndLine is the declaration's last line.
	Line, Column, EndLine int
	// Container is the enclosing declaration: a method's type or class, a
	// field's struct; empty at the top level.
	Container string
	// Signature is the declaration's first line, trimmed.
	Signature string
}

// File is what Parse reads from one source file.
type File struct {
	Language projectsv1.Language
	Symbols  []Symbol
	// Lines counts the file's lines; Todos and Fixmes the lines with a TODO
	// or FIXME marker.
	Lines, Todos, Fixmes int
	// Test reports a test file, by its name.
	Test bool
}

// Reference is one place in a file that declares or uses a symbol.
type Reference struct {
	// Path is the file's path as it was given.
	Path         string
	Line, Column int
	Kind         projectsv1.ReferenceKind
	// Container is the enclosing declaration of the use: "Type.method", a
	// function or class name; empty at the top level.
	Container string
	// LineText is the line of code, trimmed.
	LineText string
}

// MaxTextLen bounds Symbol.Signature and Reference.LineText, in bytes.
const MaxTextLen = 200

// LanguageOf is the language of a file, by its name; unspecified for a
// file the package does not parse.
func LanguageOf(name string) projectsv1.Language {
	switch path.Ext(name) {
	case ".go":
		return projectsv1.Language_LANGUAGE_GO
	case ".js", ".mjs", ".cjs", ".jsx":
		return projectsv1.Language_LANGUAGE_JAVASCRIPT
	case ".ts", ".mts", ".cts", ".tsx":
		return projectsv1.Language_LANGUAGE_TYPESCRIPT
	case ".py", ".pyi":
		return projectsv1.Language_LANGUAGE_PYTHON
	}
	return projectsv1.Language_LANGUAGE_UNSPECIFIED
}

// IsTest reports whether a file is a test file by the conventions of its
// language: Go's _test.go; Python's test_*.py and *_test.py; *.test.* and
// *.spec.* or a __tests__ directory for TypeScript and JavaScript.
func IsTest(name string) bool {
	base := path.Base(name)
	switch LanguageOf(name) {
	case projectsv1.Language_LANGUAGE_GO:
		return strings.HasSuffix(base, "_test.go")
	case projectsv1.Language_LANGUAGE_PYTHON:
		stem := strings.TrimSuffix(strings.TrimSuffix(base, ".py"), ".pyi")
		return strings.HasPrefix(stem, "test_") || strings.HasSuffix(stem, "_test")
	case projectsv1.Language_LANGUAGE_JAVASCRIPT, projectsv1.Language_LANGUAGE_TYPESCRIPT:
		return strings.Contains(base, ".test.") || strings.Contains(base, ".spec.") ||
			strings.Contains("/"+name, "/__tests__/")
	}
	return false
}

// Parse reads the declarations of one source file and counts its lines
// and markers. A file with syntax errors still yields what parses. The
// error is ErrNoTreeSitter for a tree-sitter language in a build without
// cgo, or names a language the package does not parse.
func Parse(name string, src []byte) (File, error) {
	lang := LanguageOf(name)
	f := File{Language: lang, Test: IsTest(name)}
	f.Lines, f.Todos, f.Fixmes = count(src)
	var err error
	switch lang {
	case projectsv1.Language_LANGUAGE_GO:
		f.Symbols = goSymbols(name, src)
	case projectsv1.Language_LANGUAGE_UNSPECIFIED:
		err = errors.New("not a source file this package parses: " + name)
	default:
		f.Symbols, err = treeSymbols(name, lang, src)
	}
	return f, err
}

var (
	todoMark  = regexp.MustCompile(`\bTODO\b`)
	fixmeMark = regexp.MustCompile(`\bFIXME\b`)
)

// count returns the lines of src and those with a TODO or FIXME marker.
func count(src []byte) (lines, todos, fixmes int) {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			src = nil
		}
		lines++
		if todoMark.Match(line) {
			todos++
		}
		if fixmeMark.Match(line) {
			fixmes++
		}
	}
	return lines, todos, fixmes
}

// lineText returns line n (from 1) of src, trimmed and clipped to
// MaxTextLen.
func lineText(src []byte, n int) string {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(src, '\n')
		if j < 0 {
			return ""
		}
		src = src[j+1:]
	}
	if j := bytes.IndexByte(src, '\n'); j >= 0 {
		src = src[:j]
	}
	return clip(strings.TrimSpace(string(src)))
}

// signature is the first line of a declaration, without an opening brace.
func signature(src []byte, line int) string {
	s := lineText(src, line)
	s = strings.TrimSpace(strings.TrimSuffix(s, "{"))
	return s
}

// clip cuts s to MaxTextLen bytes on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxTextLen {
		return s
	}
	cut := MaxTextLen
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
