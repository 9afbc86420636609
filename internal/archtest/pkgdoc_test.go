package archtest

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageCommentsNameTheirPackage: a package comment starts "Package
// <name>" with the package's own name (go doc shows it as the package's
// synopsis), so a renamed package does not keep its old name in its tour.
func TestPackageCommentsNameTheirPackage(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.ImportPath, module+"/"+generatedDir+"/") {
			continue // generated: its comments are the generator's
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if file.Doc == nil {
				continue
			}
			text := file.Doc.Text()
			rest, ok := strings.CutPrefix(text, "Package ")
			if !ok {
				continue // a build-constraint note or a file comment
			}
			if name, _, _ := strings.Cut(rest, " "); name != file.Name.Name {
				t.Errorf("%s: the package comment names package %q, but the package is %q", filepath.Join(p.ImportPath, f), name, file.Name.Name)
			}
		}
	}
}

// TestStoreAndEnginePackagesFollowTheNamingRule: a domain's store package
// is services/<domain>/<domain>store, and the port a service starts its
// Temporal workflows through is an interface named Engine (engine.go) with
// its Temporal implementation TemporalEngine (temporal.go): one name for
// each, so a reader finds them in every domain by the same name.
func TestStoreAndEnginePackagesFollowTheNamingRule(t *testing.T) {
	for _, p := range listPackages(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/services/")
		if !ok {
			continue
		}
		parts := strings.Split(rel, "/")
		if len(parts) == 2 && strings.HasSuffix(parts[1], "store") && parts[1] != parts[0]+"store" {
			t.Errorf("%s: a store package of domain %s is named %sstore", p.ImportPath, parts[0], parts[0])
		}
		if len(parts) != 1 {
			continue
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				if strings.Trim(imp.Path.Value, `"`) == "go.temporal.io/sdk/client" && f != "temporal.go" && !strings.HasSuffix(f, "_test.go") {
					t.Errorf("%s/%s imports the Temporal client: a service reaches Temporal through its Engine, implemented in temporal.go", p.ImportPath, f)
				}
			}
		}
	}
}
