// Package archtest checks the import rules of README.md and the house's
// other structural rules (run by make lint and make test):
//
//   - no services/<a> imports services/<b>; cross-domain calls go through
//     generated clients;
//   - edge/ imports generated code (proto/gen) and internal/ only; a door
//     under edge/ imports neither the root nor another door, and no type
//     under edge/ holds the root edge object (edge_test.go); edge/edgetest,
//     the fixtures the edge's black-box tests share, is the tests' and
//     imported by tests only;
//   - workers/ never import services/ or edge/;
//   - console/ is a client of the edge: it imports internal/, generated
//     code and edge/httpguard (the edge's Host and Origin checks) only;
//   - internal/ never imports a domain (services/, edge/, workers/, cmd/);
//   - only cmd/ reads flags and the environment (no "flag" import, no
//     os.Getenv/LookupEnv/Environ outside cmd/ and tests);
//   - stores write SQL one way: ? placeholders run through sqldb's
//     rebinding Exec, Query and QueryRow (sql_test.go);
//   - no hand-written source file is over 600 lines (filesize_test.go);
//   - no tracked file is over 1 MiB or an executable binary
//     (trackedfiles_test.go);
//   - a package comment names its own package (pkgdoc_test.go);
//   - docs/README.md links every page of docs/, and every link to a local
//     page resolves (docs_test.go).
package archtest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/toolmesh/toolmesh"

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
}

// goList runs go list over the module once for every test of the binary.
var goList = sync.OnceValues(func() ([]pkg, error) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles,Imports", module+"/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
})

func listPackages(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// area returns the top-level area of an import path inside the module
// ("services/tasks", "edge", "internal", ...), or "" outside the module.
func area(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	parts := strings.Split(rel, "/")
	if parts[0] == "services" && len(parts) > 1 {
		return "services/" + parts[1]
	}
	return parts[0]
}

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		from := area(p.ImportPath)
		for _, imp := range p.Imports {
			to := area(imp)
			if to == "" {
				continue
			}
			var broken string
			switch {
			case strings.HasPrefix(from, "services/") && strings.HasPrefix(to, "services/") && from != to:
				broken = "a service must not import another service; use its generated client"
			case strings.HasPrefix(from, "services/") && (to == "edge" || to == "workers" || to == "cmd"):
				broken = "a service must not import the edge, workers or cmd"
			case from == "edge" && p.ImportPath != edgeTestSupport && to != "edge" && to != "proto" && to != "internal":
				broken = "the edge imports generated code and internal/ only"
			case from == "workers" && (strings.HasPrefix(to, "services/") || to == "edge" || to == "cmd"):
				broken = "workers must not import services/, edge/ or cmd/; call services through clients"
			case from == "console" && to != "console" && to != "proto" && to != "internal" && imp != module+"/edge/httpguard":
				broken = "the console is a client of the edge: it imports internal/, generated code and edge/httpguard only"
			case from == "internal" && to != "internal" && to != "proto":
				broken = "internal/ is domain-free plumbing and must not import " + to
			case from == "proto" && to != "proto":
				broken = "generated code must not import hand-written packages"
			}
			if broken != "" {
				t.Errorf("%s imports %s: %s", p.ImportPath, imp, broken)
			}
		}
	}
}

func TestOnlyCmdReadsFlagsAndEnvironment(t *testing.T) {
	for _, p := range listPackages(t) {
		a := area(p.ImportPath)
		if a == "cmd" || a == "proto" {
			continue
		}
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			for _, imp := range file.Imports {
				if imp.Path.Value == `"flag"` {
					t.Errorf("%s imports flag: only cmd/ reads flags", path)
				}
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" {
					switch sel.Sel.Name {
					case "Getenv", "LookupEnv", "Environ":
						t.Errorf("%s calls os.%s: only cmd/ reads the environment", path, sel.Sel.Name)
					}
				}
				return true
			})
			for _, d := range file.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "init" && fn.Recv == nil {
					t.Errorf("%s has an init function: no init() side effects", path)
				}
			}
		}
	}
}
