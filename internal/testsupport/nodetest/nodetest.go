// Package nodetest runs Node.js programs from Go tests: clients we did not
// write (the official MCP TypeScript SDK, the A2A JS SDK) against the
// processes under test.
//
// A test keeps its program in a testdata folder with a package.json, a
// package-lock.json that pins every dependency, and its scripts (*.mjs,
// *.js). Install puts the pinned dependencies, from the npm registry, into
// the user's cache once per lock file, so a second run needs no network.
package nodetest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Install returns a directory with src's pinned dependencies installed
// (npm ci) and a current copy of src's scripts, to run as
// `node <dir>/<script>`. The install is shared by every test binary with the
// same lock file: it is made beside its final place and moved in, so no
// test ever sees half of one. Without node and npm the test fails: they are
// part of what the tests need.
func Install(t testing.TB, src string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is needed to run the Node.js clients of %s: %v", src, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is needed to run the Node.js clients of %s: %v", src, err)
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "toolmesh-test", filepath.Base(src)+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		install(t, npm, src, dir)
	}
	// Scripts are copied on every call, so an edit of one takes effect.
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".mjs") || strings.HasSuffix(name, ".js")) {
			copyAtomic(t, filepath.Join(src, name), dir, name)
		}
	}
	return dir
}

func install(t testing.TB, npm, src, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		copyAtomic(t, filepath.Join(src, f), tmp, f)
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci of %s: %v\n%s", src, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another test binary installed it first.
		if _, statErr := os.Stat(filepath.Join(dir, "node_modules")); statErr != nil {
			t.Fatal(err)
		}
	}
}

// copyAtomic copies from to dir/name through a temporary file, so that a
// concurrent reader sees the old copy or the new one.
func copyAtomic(t testing.TB, from, dir, name string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if werr != nil {
		os.Remove(f.Name())
		t.Fatal(werr)
	}
}
