package code

import (
	"go/ast"
	"go/parser"
	"go/token"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// goSymbols lists the package-level declarations of a Go file: functions,
// methods (their receiver type is the container), types, the fields of
// struct types and the methods of interfaces, constants and variables. A
// file that does not parse yields the declarations before the error.
func goSymbols(name string, src []byte) []Symbol {
	fset := token.NewFileSet()
	f, _ := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if f == nil {
		return nil
	}
	var out []Symbol
	add := func(id *ast.Ident, kind projectsv1.SymbolKind, end token.Pos, container string) {
		if id == nil || id.Name == "_" {
			return
		}
		p := fset.Position(id.Pos())
		out = append(out, Symbol{
			Name: id.Name, Kind: kind, Line: p.Line, Column: p.Column, EndLine: fset.Position(end).Line,
			Container: container, Signature: signature(src, p.Line),
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				add(d.Name, projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, d.End(), "")
			} else {
				add(d.Name, projectsv1.SymbolKind_SYMBOL_KIND_METHOD, d.End(), receiverType(d.Recv))
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					typeSymbols(spec, add)
				case *ast.ValueSpec:
					kind := projectsv1.SymbolKind_SYMBOL_KIND_VARIABLE
					if d.Tok == token.CONST {
						kind = projectsv1.SymbolKind_SYMBOL_KIND_CONSTANT
					}
					for _, n := range spec.Names {
						add(n, kind, spec.End(), "")
					}
				}
			}
		}
	}
	return out
}

// typeSymbols adds a type and, for a struct or an interface, its named
// fields and methods (embedded ones declare nothing new).
func typeSymbols(spec *ast.TypeSpec, add func(*ast.Ident, projectsv1.SymbolKind, token.Pos, string)) {
	name := spec.Name.Name
	switch t := spec.Type.(type) {
	case *ast.StructType:
		add(spec.Name, projectsv1.SymbolKind_SYMBOL_KIND_STRUCT, spec.End(), "")
		for _, field := range t.Fields.List {
			for _, n := range field.Names {
				add(n, projectsv1.SymbolKind_SYMBOL_KIND_FIELD, field.End(), name)
			}
		}
	case *ast.InterfaceType:
		add(spec.Name, projectsv1.SymbolKind_SYMBOL_KIND_INTERFACE, spec.End(), "")
		for _, m := range t.Methods.List {
			if _, isFunc := m.Type.(*ast.FuncType); !isFunc {
				continue // an embedded interface or a type constraint
			}
			for _, n := range m.Names {
				add(n, projectsv1.SymbolKind_SYMBOL_KIND_METHOD, m.End(), name)
			}
		}
	default:
		add(spec.Name, projectsv1.SymbolKind_SYMBOL_KIND_TYPE, spec.End(), "")
	}
}

// receiverType is the name of a method's receiver type, without pointer or
// type parameters: "Service" for (s *Service) and (l List[T]).
func receiverType(recv *ast.FieldList) string {
	if recv == nil || len(recv.List) == 0 {
		return ""
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
