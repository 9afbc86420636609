package archtest

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxLines is the most lines a hand-written source file may have: past it,
// a file holds more than one responsibility and is split by them.
const maxLines = 600

// checkedExtensions are the kinds of hand-written source the limit covers:
// Go, the JavaScript and TypeScript test clients, shell scripts, SQL
// migrations and Starlark (tilt/). Protos are left out: moving a message to
// another file is a breaking change to buf (FILE rules) and to the
// generated packages' file layout.
var checkedExtensions = map[string]bool{".go": true, ".mjs": true, ".js": true, ".ts": true, ".sh": true, ".sql": true, ".star": true}

// skippedDirs hold generated code, recorded test data, build output and
// installed dependencies.
var skippedDirs = map[string]bool{".git": true, "testdata": true, "node_modules": true, ".build": true, "bin": true}

// generatedDir is where make generate writes (its Go files carry the
// generated marker too; the OpenAPI and descriptor files do not).
const generatedDir = "proto/gen"

// generatedGo is the marker of generated Go files (go help generate).
var generatedGo = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

func TestNoSourceFileIsOverTheLineLimit(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	root := strings.TrimSpace(string(out))
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path != root && (skippedDirs[d.Name()] || filepath.ToSlash(rel) == generatedDir) {
				return filepath.SkipDir
			}
			return nil
		}
		if !checkedExtensions[filepath.Ext(path)] {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if filepath.Ext(path) == ".go" && generated(data) {
			return nil
		}
		checked++
		if n := bytes.Count(data, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines, over the limit of %d: split it by responsibility", rel, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files under %s; the walk missed the tree", checked, root)
	}
}

// generated reports whether a Go file carries the generated-code marker
// before its package clause.
func generated(data []byte) bool {
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		line := s.Text()
		if generatedGo.MatchString(line) {
			return true
		}
		if strings.HasPrefix(line, "package ") {
			return false
		}
	}
	return false
}
