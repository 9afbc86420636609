package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoresUseTheRebindingHelpers checks that SQL is written one way:
// stores write ? placeholders and run statements through the Exec, Query
// and QueryRow of a sqldb.DB or Tx (and One, All, Page, InsertOnce), which
// rebind them for the dialect. Nothing outside internal/sqldb rebinds by
// hand, and no store calls the *Context methods of database/sql, which do
// not rebind (on PostgreSQL a ? there is a syntax error).
func TestStoresUseTheRebindingHelpers(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.ImportPath, module+"/internal/sqldb") || area(p.ImportPath) == "proto" {
			continue
		}
		store := strings.HasPrefix(area(p.ImportPath), "services/") && strings.HasSuffix(p.ImportPath, "store")
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch name := sel.Sel.Name; {
				case name == "Rebind":
					t.Errorf("%s calls Rebind: use the Exec, Query and QueryRow of a sqldb.DB or Tx, which rebind", path)
				case store && (name == "ExecContext" || name == "QueryContext" || name == "QueryRowContext"):
					t.Errorf("%s calls %s: use sqldb's Exec, Query or QueryRow, which rebind ? placeholders", path, name)
				}
				return true
			})
		}
	}
}
