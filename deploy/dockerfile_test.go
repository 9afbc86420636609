package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The image the manifests run: how the Dockerfile builds it.

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)=(\S+)$`).FindAllStringSubmatch(src, -1) {
		args[m[1]] = m[2]
	}
	stages := map[string]bool{}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\S+))?$`).FindAllStringSubmatch(src, -1)
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(froms))
	}
	for _, m := range froms {
		image := regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(m[1], func(ref string) string {
			return args[ref[2:len(ref)-1]]
		})
		switch {
		case stages[image], image == "scratch":
		default:
			checkImage(t, "Dockerfile FROM "+m[1], image)
		}
		if m[2] != "" {
			stages[m[2]] = true
		}
	}
	if last := froms[len(froms)-1]; last[1] == "" || !stages[last[1]] && last[1] != "scratch" {
		t.Errorf("the default (last) stage %q does not build on an earlier stage", last[0])
	}
	if !strings.Contains(src, "go build") || !strings.Contains(src, "./cmd/toolmesh") {
		t.Error("Dockerfile does not build ./cmd/toolmesh")
	}
	// The runtime image is scratch: the binary, built with cgo for the
	// tree-sitter parsers, must need no shared library.
	build := regexp.MustCompile(`(?m)^\s*go build .*\./cmd/toolmesh$`).FindString(src)
	for _, want := range []string{"netgo", "osusergo", "-linkmode external", `-extldflags "-static"`} {
		if !strings.Contains(build, want) {
			t.Errorf("the toolmesh build %q lacks %s: a cgo binary on scratch must be linked statically", build, want)
		}
	}
	if !strings.Contains(src, "ENV CGO_ENABLED=1") {
		t.Error("the build stage does not enable cgo: the TypeScript, JavaScript and Python parsers would answer capability_gap")
	}

	// The same Temporal CLI and Go as the Makefile and go.mod.
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TEMPORAL_CLI_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	if m == nil || args["TEMPORAL_CLI_VERSION"] != string(m[1]) {
		t.Errorf("Dockerfile TEMPORAL_CLI_VERSION %q, Makefile %q", args["TEMPORAL_CLI_VERSION"], m)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil || !strings.HasPrefix(args["GO_IMAGE"], "golang:"+string(goVersion[1])+".") {
		t.Errorf("Dockerfile GO_IMAGE %q is not the Go %s of go.mod", args["GO_IMAGE"], goVersion[1])
	}

	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(ignore))
	for _, want := range []string{"bin", ".toolmesh", ".git", "/toolmesh"} {
		if !slices.Contains(lines, want) {
			t.Errorf("Dockerfile.dockerignore does not exclude %s from the build context", want)
		}
	}
}
