package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The edge's shape (docs/edge.md): a root package that builds the one
// pipeline of every tool call and owns the edge's options, and a door per
// protocol beside it. A door reaches the root only through the small
// interfaces of edge/port, so that a protocol can be rewritten without the
// others noticing; and nothing under edge/ knows a domain: what it needs to
// know of one (task kinds, prompts, what a call on behalf of a message
// reads, the A2A door's backend) comes from the contracts' options and the
// shared contracts.

// edgeRoot is the import path of the edge's root package.
const edgeRoot = module + "/edge"

// edgeShared are the packages under edge/ that every door may import: the
// leaf package of the doors' ports, the callers' identity and the HTTP
// guards every listener shares.
var edgeShared = []string{edgeRoot + "/port", edgeRoot + "/identity", edgeRoot + "/httpguard"}

// domains are the packages under proto/gen/toolmesh/ that are a domain's:
// those with a service in services/. The others are shared contracts (the
// tool options, page, workflow, calls, ...).
func domains(t *testing.T) map[string]bool {
	t.Helper()
	var servicesDir string
	for _, p := range listPackages(t) {
		if p.ImportPath == module+"/internal/archtest" {
			servicesDir = filepath.Join(p.Dir, "..", "..", "services")
		}
	}
	entries, err := os.ReadDir(servicesDir)
	if err != nil {
		t.Fatalf("read services/: %v", err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() {
			out[e.Name()] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("found no domain under services/")
	}
	return out
}

// edgeTestSupport is the edge's test support: the fixtures the root's and
// the doors' black-box tests share (an edge built by edge.New in front of
// the test backend, a calls worker, the MCP clients). It belongs to the
// tests, not to the edge: the edge's rules do not hold it, and only tests
// import it (TestOnlyTestsImportTheEdgeTestSupport).
const edgeTestSupport = edgeRoot + "/edgetest"

// inEdge reports whether path is one of the edge's packages: the root or a
// package under edge/, its test support aside.
func inEdge(path string) bool {
	return (path == edgeRoot || strings.HasPrefix(path, edgeRoot+"/")) && path != edgeTestSupport
}

// TestOnlyTestsImportTheEdgeTestSupport: no package imports edge/edgetest;
// a _test.go file may.
func TestOnlyTestsImportTheEdgeTestSupport(t *testing.T) {
	for _, p := range listPackages(t) {
		if slices.Contains(p.Imports, edgeTestSupport) {
			t.Errorf("%s imports %s: the edge's test support is for tests only", p.ImportPath, edgeTestSupport)
		}
	}
}

// TestEdgeKnowsNoDomain: nothing under edge/ imports a domain's generated
// package (its messages, its Connect client).
func TestEdgeKnowsNoDomain(t *testing.T) {
	doms := domains(t)
	gen := module + "/" + generatedDir + "/toolmesh/"
	for _, p := range listPackages(t) {
		if !inEdge(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			rest, ok := strings.CutPrefix(imp, gen)
			if !ok {
				continue
			}
			if pkg, _, _ := strings.Cut(rest, "/"); doms[pkg] {
				t.Errorf("%s imports %s: the edge knows no domain; what it needs of one belongs in the contract's toolmesh.tool.v1 options or a shared contract", p.ImportPath, imp)
			}
		}
	}
}

// TestDoorsImportNeitherTheRootNorEachOther: a package under edge/ other
// than the root imports, of the edge, only edge/port, edge/identity and
// edge/httpguard.
func TestDoorsImportNeitherTheRootNorEachOther(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath == edgeRoot || !inEdge(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if imp != edgeRoot && !strings.HasPrefix(imp, edgeRoot+"/") {
				continue
			}
			if !slices.Contains(edgeShared, imp) || imp == p.ImportPath {
				t.Errorf("%s imports %s: a door imports only edge/port, edge/identity and edge/httpguard, never the root or another door", p.ImportPath, imp)
			}
		}
	}
}

// TestNothingHoldsTheEdge: no type under edge/ but the root object itself
// holds a pointer to the root object (edge.Edge); a helper gets the small
// interface it needs instead.
func TestNothingHoldsTheEdge(t *testing.T) {
	for _, p := range listPackages(t) {
		if !inEdge(p.ImportPath) {
			continue
		}
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			// The name the root package goes by in this file.
			rootName := ""
			if p.ImportPath == edgeRoot {
				rootName = "."
			}
			for _, imp := range file.Imports {
				if strings.Trim(imp.Path.Value, `"`) == edgeRoot {
					rootName = "edge"
					if imp.Name != nil {
						rootName = imp.Name.Name
					}
				}
			}
			if rootName == "" {
				continue
			}
			ast.Inspect(file, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || (rootName == "." && ts.Name.Name == "Edge") {
					return true
				}
				ast.Inspect(ts.Type, func(n ast.Node) bool {
					if star, ok := n.(*ast.StarExpr); ok && isEdge(star.X, rootName) {
						t.Errorf("%s: type %s holds a *Edge: give it the small interface of the edge it needs (edge/port)", path, ts.Name.Name)
					}
					return true
				})
				return true
			})
		}
	}
}

// isEdge reports whether x names the root's Edge type.
func isEdge(x ast.Expr, rootName string) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return rootName == "." && x.Name == "Edge"
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && id.Name == rootName && x.Sel.Name == "Edge"
	}
	return false
}

// mcpSDK is the import path of the official MCP SDK.
const mcpSDK = "github.com/modelcontextprotocol/go-sdk"

// TestPortSpeaksNoMCP: edge/port, which every door imports, imports no
// package of the MCP SDK: the A2A door and edge/elicit see calls, questions
// and answers in the port's own types, and the MCP door converts at its
// edge.
func TestPortSpeaksNoMCP(t *testing.T) {
	found := false
	for _, p := range listPackages(t) {
		if p.ImportPath != edgeRoot+"/port" {
			continue
		}
		found = true
		for _, imp := range p.Imports {
			if imp == mcpSDK || strings.HasPrefix(imp, mcpSDK+"/") {
				t.Errorf("%s imports %s: the port is protocol-neutral; convert in edge/mcpdoor", p.ImportPath, imp)
			}
		}
	}
	if !found {
		t.Fatal("edge/port not found")
	}
}

// TestEveryEdgeSettingIsDeclaredOnce: no field of the root's Config shares
// a name with a field of a door's Options (edge/<door>.Options): a door's
// setting is declared, documented and defaulted in the door, and the root
// holds one field per door, not a copy of its settings.
func TestEveryEdgeSettingIsDeclaredOnce(t *testing.T) {
	rootFields := map[string]bool{}
	doors := map[string][]string{} // door package → its Options' fields
	for _, p := range listPackages(t) {
		isRoot := p.ImportPath == edgeRoot
		if !isRoot && !strings.HasPrefix(p.ImportPath, edgeRoot+"/") {
			continue
		}
		want := "Options"
		if isRoot {
			want = "Config"
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range structFields(file, want) {
				if isRoot {
					rootFields[name] = true
				} else {
					doors[p.ImportPath] = append(doors[p.ImportPath], name)
				}
			}
		}
	}
	if len(rootFields) == 0 || len(doors) == 0 {
		t.Fatalf("found %d fields of edge.Config and the Options of %d doors; want both", len(rootFields), len(doors))
	}
	for door, fields := range doors {
		for _, f := range fields {
			if rootFields[f] {
				t.Errorf("edge.Config.%s and %s.Options.%s: a setting is declared once, in the door that uses it (the root holds one field per door)", f, door, f)
			}
		}
	}
}

// structFields are the names of the fields of the struct type name in
// file (those of embedded fields by their type's name).
func structFields(file *ast.File, name string) []string {
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != name {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, f := range st.Fields.List {
			for _, id := range f.Names {
				out = append(out, id.Name)
			}
			if len(f.Names) == 0 {
				if id, ok := f.Type.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
		return false
	})
	return out
}

// edgeDoors are the edge's doors: packages under edge/ that the root
// composes (edge.New) and nothing outside edge/ builds.
var edgeDoors = []string{edgeRoot + "/mcpdoor", edgeRoot + "/a2adoor", edgeRoot + "/elicit"}

// TestOnlyTheEdgeBuildsItsDoors: no package outside edge/ (cmd/ included)
// imports a door; it configures the doors through edge.Config, whose option
// types the root re-exports, and serves the handlers edge.New hands out.
func TestOnlyTheEdgeBuildsItsDoors(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath == edgeRoot || strings.HasPrefix(p.ImportPath, edgeRoot+"/") {
			continue
		}
		for _, imp := range p.Imports {
			if slices.Contains(edgeDoors, imp) {
				t.Errorf("%s imports %s: configure the door through edge.Config and serve the handler edge.New hands out", p.ImportPath, imp)
			}
		}
	}
}
