package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a markdown link to a local page: [text](path.md#anchor).
var mdLink = regexp.MustCompile(`\]\(([^)#:\s]+\.md)(#[^)\s]*)?\)`)

// repoRoot is the module's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestDocsIndexEveryPage: docs/README.md links every page under docs/, so a
// reader finds each from one place.
func TestDocsIndexEveryPage(t *testing.T) {
	root := repoRoot(t)
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, m := range mdLink.FindAllStringSubmatch(string(index), -1) {
		linked[filepath.Clean(m[1])] = true
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if name := filepath.Base(p); name != "README.md" && !linked[name] {
			t.Errorf("docs/README.md does not link docs/%s", name)
		}
	}
}

// TestDocLinksResolve: every link from the README or a page of docs/ to a
// local page names a page that exists.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), m[1])); err != nil {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s links %s, which does not exist", rel, m[1])
			}
		}
	}
}
