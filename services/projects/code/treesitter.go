//go:build cgo

package code

import (
	"errors"
	"path"
	"strings"
	"unicode"

	ts "github.com/tree-sitter/go-tree-sitter"
	tsjavascript "github.com/tree-sitter/tree-sitter-javascript/bindings/go"
	tspython "github.com/tree-sitter/tree-sitter-python/bindings/go"
	tstypescript "github.com/tree-sitter/tree-sitter-typescript/bindings/go"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// TreeSitter reports whether this build parses TypeScript, JavaScript and
// Python (it does when built with cgo).
const TreeSitter = true

// grammar is the tree-sitter language of a file: TSX for .tsx (JSX in
// TypeScript), TypeScript for the other TypeScript files.
func grammar(name string, lang projectsv1.Language) (*ts.Language, error) {
	switch lang {
	case projectsv1.Language_LANGUAGE_JAVASCRIPT:
		return ts.NewLanguage(tsjavascript.Language()), nil
	case projectsv1.Language_LANGUAGE_TYPESCRIPT:
		if path.Ext(name) == ".tsx" {
			return ts.NewLanguage(tstypescript.LanguageTSX()), nil
		}
		return ts.NewLanguage(tstypescript.LanguageTypescript()), nil
	case projectsv1.Language_LANGUAGE_PYTHON:
		return ts.NewLanguage(tspython.Language()), nil
	}
	return nil, errors.New("no tree-sitter grammar for " + name)
}

// parseTree parses src; the caller closes the tree.
func parseTree(name string, lang projectsv1.Language, src []byte) (*ts.Tree, error) {
	g, err := grammar(name, lang)
	if err != nil {
		return nil, err
	}
	p := ts.NewParser()
	defer p.Close()
	if err := p.SetLanguage(g); err != nil {
		return nil, err
	}
	tree := p.Parse(src, nil)
	if tree == nil {
		return nil, errors.New("tree-sitter did not parse " + name)
	}
	return tree, nil
}

func treeSymbols(name string, lang projectsv1.Language, src []byte) ([]Symbol, error) {
	tree, err := parseTree(name, lang, src)
	if err != nil {
		return nil, err
	}
	defer tree.Close()
	w := &declWalker{src: src}
	if lang == projectsv1.Language_LANGUAGE_PYTHON {
		w.pyBlock(tree.RootNode(), "", false)
	} else {
		w.jsBlock(tree.RootNode(), "")
	}
	return w.out, nil
}

// declWalker collects the declarations of a syntax tree. It walks
// statement lists and class bodies, never function bodies: what a function
// declares inside is local to it.
type declWalker struct {
	src []byte
	out []Symbol
}

func (w *declWalker) text(n *ts.Node) string { return n.Utf8Text(w.src) }

// add records the declaration whose name is nameNode and whose extent is
// decl (decorators included); its signature is the line of its name.
func (w *declWalker) add(nameNode, decl *ts.Node, kind projectsv1.SymbolKind, container string) {
	if nameNode == nil {
		return
	}
	name := w.text(nameNode)
	if name == "" || !isIdentifier(name) {
		return
	}
	p := nameNode.StartPosition()
	line := int(p.Row) + 1
	w.out = append(w.out, Symbol{
		Name: name, Kind: kind, Line: line, Column: int(p.Column) + 1, EndLine: int(decl.EndPosition().Row) + 1,
		Container: container, Signature: signature(w.src, line),
	})
}

// isIdentifier reports whether s is a plain identifier (a computed or
// quoted member name is not).
func isIdentifier(s string) bool {
	for i, r := range s {
		if r == '_' || r == '$' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r) {
			continue
		}
		return false
	}
	return true
}

func namedChildren(n *ts.Node) []*ts.Node {
	out := make([]*ts.Node, 0, n.NamedChildCount())
	for i := range n.NamedChildCount() {
		if c := n.NamedChild(i); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// jsBlock reads the declarations of a JavaScript or TypeScript statement
// list (a program, a namespace body).
func (w *declWalker) jsBlock(n *ts.Node, container string) {
	for _, c := range namedChildren(n) {
		w.jsDecl(c, container)
	}
}

func (w *declWalker) jsDecl(c *ts.Node, container string) {
	name := c.ChildByFieldName("name")
	switch c.Kind() {
	case "export_statement", "expression_statement", "ambient_declaration":
		// export function f() {}, a TypeScript namespace (an expression
		// statement), declare class C {}.
		w.jsBlock(c, container)
	case "function_declaration", "generator_function_declaration", "function_signature":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, container)
	case "class_declaration", "abstract_class_declaration", "class":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_CLASS, container)
		if name != nil {
			w.jsMembers(c.ChildByFieldName("body"), w.text(name))
		}
	case "interface_declaration":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_INTERFACE, container)
		if name != nil {
			w.jsMembers(c.ChildByFieldName("body"), w.text(name))
		}
	case "type_alias_declaration":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_TYPE, container)
	case "enum_declaration":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_ENUM, container)
		if body := c.ChildByFieldName("body"); body != nil && name != nil {
			for _, m := range namedChildren(body) {
				switch m.Kind() {
				case "property_identifier":
					w.add(m, m, projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT, w.text(name))
				case "enum_assignment":
					w.add(m.ChildByFieldName("name"), m, projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT, w.text(name))
				}
			}
		}
	case "internal_module", "module":
		w.add(name, c, projectsv1.SymbolKind_SYMBOL_KIND_MODULE, container)
		if body := c.ChildByFieldName("body"); body != nil && name != nil {
			w.jsBlock(body, w.text(name))
		}
	case "lexical_declaration", "variable_declaration":
		constant := strings.HasPrefix(w.text(c), "const")
		for _, d := range namedChildren(c) {
			if d.Kind() != "variable_declarator" {
				continue
			}
			id := d.ChildByFieldName("name")
			if id == nil || id.Kind() != "identifier" {
				continue // a destructuring pattern
			}
			kind := projectsv1.SymbolKind_SYMBOL_KIND_VARIABLE
			if constant {
				kind = projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT
			}
			value := d.ChildByFieldName("value")
			switch {
			case value == nil:
			case isFunction(value):
				kind = projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION
			case value.Kind() == "class":
				kind = projectsv1.SymbolKind_SYMBOL_KIND_CLASS
				w.jsMembers(value.ChildByFieldName("body"), w.text(id))
			}
			w.add(id, d, kind, container)
		}
	}
}

func isFunction(n *ts.Node) bool {
	switch n.Kind() {
	case "arrow_function", "function_expression", "function", "generator_function":
		return true
	}
	return false
}

// jsMembers reads the members of a class or interface body.
func (w *declWalker) jsMembers(body *ts.Node, container string) {
	if body == nil {
		return
	}
	for _, m := range namedChildren(body) {
		switch m.Kind() {
		case "method_definition", "method_signature", "abstract_method_signature":
			w.add(m.ChildByFieldName("name"), m, projectsv1.SymbolKind_SYMBOL_KIND_METHOD, container)
		case "field_definition":
			w.add(m.ChildByFieldName("property"), m, projectsv1.SymbolKind_SYMBOL_KIND_FIELD, container)
		case "public_field_definition", "property_signature":
			w.add(m.ChildByFieldName("name"), m, projectsv1.SymbolKind_SYMBOL_KIND_FIELD, container)
		}
	}
}

// pyBlock reads the declarations of a Python module or class body, and of
// the if, try and with blocks at those levels.
func (w *declWalker) pyBlock(n *ts.Node, container string, inClass bool) {
	for _, c := range namedChildren(n) {
		w.pyDecl(c, c, container, inClass)
	}
}

// pyDecl reads one statement; extent is the statement with its decorators.
func (w *declWalker) pyDecl(c, extent *ts.Node, container string, inClass bool) {
	switch c.Kind() {
	case "decorated_definition":
		if d := c.ChildByFieldName("definition"); d != nil {
			w.pyDecl(d, c, container, inClass)
		}
	case "function_definition":
		kind := projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION
		if inClass {
			kind = projectsv1.SymbolKind_SYMBOL_KIND_METHOD
		}
		w.add(c.ChildByFieldName("name"), extent, kind, container)
	case "class_definition":
		name := c.ChildByFieldName("name")
		w.add(name, extent, projectsv1.SymbolKind_SYMBOL_KIND_CLASS, container)
		if body := c.ChildByFieldName("body"); body != nil && name != nil {
			w.pyBlock(body, w.text(name), true)
		}
	case "expression_statement":
		for _, a := range namedChildren(c) {
			if a.Kind() != "assignment" {
				continue
			}
			id := a.ChildByFieldName("left")
			if id == nil || id.Kind() != "identifier" {
				continue
			}
			kind := projectsv1.SymbolKind_SYMBOL_KIND_VARIABLE
			switch name := w.text(id); {
			case inClass:
				kind = projectsv1.SymbolKind_SYMBOL_KIND_FIELD
			case name == strings.ToUpper(name) && strings.ContainsFunc(name, unicode.IsLetter):
				kind = projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT
			}
			w.add(id, a, kind, container)
		}
	case "if_statement", "try_statement", "with_statement", "block",
		"else_clause", "elif_clause", "except_clause", "finally_clause":
		w.pyBlock(c, container, inClass)
	}
}

// identifierKinds are the node kinds that name something in code.
var identifierKinds = map[string]bool{
	"identifier": true, "property_identifier": true, "type_identifier": true,
	"shorthand_property_identifier": true, "shorthand_property_identifier_pattern": true,
}

// SyntacticReferences lists every identifier named name in the code of a
// TypeScript, JavaScript or Python file (not in its comments or strings),
// with the kind of use its place in the syntax says. An identifier at the
// position of one of decls (the file's declarations of the symbol) is the
// definition.
func SyntacticReferences(file string, src []byte, name string, decls []Symbol) ([]Reference, error) {
	lang := LanguageOf(file)
	tree, err := parseTree(file, lang, src)
	if err != nil {
		return nil, err
	}
	defer tree.Close()
	defs := map[[2]int]bool{}
	for _, d := range decls {
		defs[[2]int{d.Line, d.Column}] = true
	}
	var out []Reference
	cur := tree.Walk()
	defer cur.Close()
	for {
		n := cur.Node()
		if identifierKinds[n.Kind()] && n.EndByte()-n.StartByte() == uint(len(name)) && n.Utf8Text(src) == name {
			p := n.StartPosition()
			line, col := int(p.Row)+1, int(p.Column)+1
			kind := useKind(n)
			if defs[[2]int{line, col}] {
				kind = projectsv1.ReferenceKind_REFERENCE_KIND_DEFINITION
			}
			out = append(out, Reference{
				Path: file, Line: line, Column: col, Kind: kind,
				Container: enclosing(n, src), LineText: lineText(src, line),
			})
		}
		if cur.GotoFirstChild() || cur.GotoNextSibling() {
			continue
		}
		for {
			if !cur.GotoParent() {
				return out, nil
			}
			if cur.GotoNextSibling() {
				break
			}
		}
	}
}

// sameNode reports whether a and b are the same node of one tree.
func sameNode(a, b *ts.Node) bool { return a != nil && b != nil && a.Id() == b.Id() }

// isStatement reports whether a node kind ends the search for what an
// identifier is part of.
func isStatement(kind string) bool {
	return strings.HasSuffix(kind, "_statement") || strings.HasSuffix(kind, "_declaration") ||
		kind == "program" || kind == "module" || kind == "function_definition" || kind == "class_definition"
}

// useKind says how the identifier n is used, from its place in the tree.
func useKind(n *ts.Node) projectsv1.ReferenceKind {
	if n.Kind() == "type_identifier" {
		return projectsv1.ReferenceKind_REFERENCE_KIND_TYPE
	}
	parent := n.Parent()
	if parent == nil {
		return projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
	}
	callee := n
	switch parent.Kind() {
	case "member_expression", "attribute":
		field := "property"
		if parent.Kind() == "attribute" {
			field = "attribute"
		}
		if sameNode(parent.ChildByFieldName(field), n) {
			callee = parent
		}
	}
	if up := callee.Parent(); up != nil {
		switch up.Kind() {
		case "call_expression", "call":
			if sameNode(up.ChildByFieldName("function"), callee) {
				return projectsv1.ReferenceKind_REFERENCE_KIND_CALL
			}
		case "new_expression":
			if sameNode(up.ChildByFieldName("constructor"), callee) {
				return projectsv1.ReferenceKind_REFERENCE_KIND_CALL
			}
		}
	}
	for a := parent; a != nil; a = a.Parent() {
		kind := a.Kind()
		switch {
		case strings.Contains(kind, "import"):
			return projectsv1.ReferenceKind_REFERENCE_KIND_IMPORT
		case kind == "type" || kind == "type_annotation" || kind == "type_arguments":
			return projectsv1.ReferenceKind_REFERENCE_KIND_TYPE
		case isStatement(kind):
			return projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
		}
	}
	return projectsv1.ReferenceKind_REFERENCE_KIND_REFERENCE
}

// scopeKinds are the declarations an identifier can be inside, with the
// field that names them.
var scopeKinds = map[string]string{
	"function_declaration": "name", "generator_function_declaration": "name", "method_definition": "name",
	"class_declaration": "name", "abstract_class_declaration": "name", "class": "name",
	"interface_declaration": "name", "internal_module": "name", "module": "name",
	"variable_declarator": "name", "function_definition": "name", "class_definition": "name",
}

// enclosing names the declaration an identifier is in: the outermost one,
// with its member when the outermost is a class, interface or namespace
// ("UserRepo.save"). A declaration's own name is in what encloses the
// declaration.
func enclosing(n *ts.Node, src []byte) string {
	var names []string // innermost first
	outerIsType := false
	for a := n.Parent(); a != nil; a = a.Parent() {
		field, ok := scopeKinds[a.Kind()]
		if !ok {
			continue
		}
		id := a.ChildByFieldName(field)
		if id == nil || sameNode(id, n) {
			continue
		}
		if a.Kind() == "variable_declarator" {
			if v := a.ChildByFieldName("value"); v == nil || !isFunction(v) && v.Kind() != "class" {
				continue // only a variable holding a function or a class is a scope
			}
		}
		names = append(names, id.Utf8Text(src))
		outerIsType = typeKinds[a.Kind()] || a.Kind() == "variable_declarator" && a.ChildByFieldName("value").Kind() == "class"
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) == 1 || !outerIsType:
		return names[len(names)-1]
	}
	return names[len(names)-1] + "." + names[len(names)-2]
}

// typeKinds are the scopes whose members are named "Outer.member".
var typeKinds = map[string]bool{
	"class_declaration": true, "abstract_class_declaration": true, "class": true, "interface_declaration": true,
	"internal_module": true, "module": true, "class_definition": true,
}
