package tilt_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// repoRoot is the repository this package lives in.
const repoRoot = ".."

// toolmeshBin is bin/toolmesh built from this tree once for the package
// (TestMain), so the tests never run a stale ./bin/toolmesh or write one.
var toolmeshBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "tilt: every test here builds and runs the toolmesh binary, which -short does not (make test does)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "toolmesh-tilt-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	toolmeshBin = filepath.Join(dir, "toolmesh")
	cmd := exec.Command("go", "build", "-o", toolmeshBin, "./cmd/toolmesh")
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build toolmesh:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// checkout lays out a copy of the repository for Tilt to run in: every
// top-level entry links to the real one, except bin/, which holds the
// freshly built toolmesh and the pinned Temporal CLI. Processes started
// there keep their state in that directory, not in the repository.
func checkout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", ".toolmesh", ".git", ".build":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A copy, not a link: toolmesh finds the Temporal CLI next to its own
	// resolved path.
	b, err := os.ReadFile(toolmeshBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "toolmesh"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if temporal, err := filepath.EvalSymlinks(filepath.Join(root, "bin", "temporal")); err == nil {
		if err := os.Symlink(temporal, filepath.Join(dir, "bin", "temporal")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// plannedProcess is one entry of `toolmesh processes --json`.
type plannedProcess struct {
	Name  string            `json:"name"`
	Label string            `json:"label"`
	Args  []string          `json:"args"`
	Once  bool              `json:"once"`
	Env   map[string]string `json:"env"`
	Probe *struct {
		Host string `json:"host"`
		Port int    `json:"port"`
		Path string `json:"path"`
	} `json:"probe"`
	Deps  []string `json:"deps"`
	Links []struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"links"`
}

func toolmesh(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(toolmeshBin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func plan(t *testing.T, args ...string) []plannedProcess {
	t.Helper()
	out, stderr, err := toolmesh(t, append([]string{"processes", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("toolmesh processes --json: %v\n%s", err, stderr)
	}
	var v struct{ Processes []plannedProcess }
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v.Processes
}

// servedNames lists what the binary says it serves, from its own error
// messages, independently of `toolmesh processes`: the domains of `serve`
// and the task queues of `worker`.
func servedNames(t *testing.T, cmd, listLabel string) []string {
	t.Helper()
	_, stderr, err := toolmesh(t, cmd, "no-such-name")
	if err == nil {
		t.Fatalf("toolmesh %s no-such-name succeeded", cmd)
	}
	m := regexp.MustCompile(listLabel + `: ([^)]*)\)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("toolmesh %s no-such-name: no %q list in %q", cmd, listLabel, stderr)
	}
	var names []string
	for _, n := range strings.Split(m[1], ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// shellArgs is how sh splits a command line: what a serve_cmd string
// really runs.
func shellArgs(t *testing.T, line string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "sh", line).Output()
	if err != nil {
		t.Fatalf("sh cannot split %q: %v", line, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

func TestTiltfileDeclaresEveryProcessOfUp(t *testing.T) {
	dir := checkout(t)
	run, err := execTiltfile(filepath.Join(dir, "Tiltfile"), nil)
	if err != nil {
		t.Fatalf("Tiltfile: %v", err)
	}
	processes := plan(t)

	// The domains and queues the binary serves all run under Tilt.
	for _, d := range servedNames(t, "serve", "domains") {
		if r := run.resource(d); r == nil || !slices.Equal(r.Labels, []string{"services"}) {
			t.Errorf("domain %s: no local_resource labelled services (got %+v)", d, r)
		}
	}
	if queues := servedNames(t, "worker", "queues"); len(queues) > 0 {
		for _, q := range queues {
			if r := run.resource("worker-" + q); r == nil || !slices.Equal(r.Labels, []string{"workers"}) {
				t.Errorf("task queue %s: no local_resource worker-%s labelled workers (got %+v)", q, q, r)
			}
		}
	}

	bin := filepath.Join(dir, "bin", "toolmesh")
	want := []string{"generate", "build"}
	for _, p := range processes {
		want = append(want, p.Name)
		r := run.resource(p.Name)
		if r == nil {
			t.Errorf("process %s of `toolmesh up` has no local_resource", p.Name)
			continue
		}
		if r.Dir != dir {
			t.Errorf("%s runs in %s, want the Tiltfile's directory %s", p.Name, r.Dir, dir)
		}
		if diff := cmp.Diff([]string{p.Label}, r.Labels); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", p.Name, diff)
		}
		if diff := cmp.Diff(append([]string{"build"}, p.Deps...), r.ResourceDeps); diff != "" {
			t.Errorf("%s resource_deps (-want +got):\n%s", p.Name, diff)
		}
		var links []tiltLink
		for _, l := range p.Links {
			links = append(links, tiltLink{URL: l.URL, Name: l.Name})
		}
		if diff := cmp.Diff(links, r.Links); diff != "" {
			t.Errorf("%s links (-want +got):\n%s", p.Name, diff)
		}
		line, env := r.ServeCmd, r.ServeEnv
		if p.Once {
			line, env = r.Cmd, r.Env
			if r.ServeCmd != nil || r.Probe != nil {
				t.Errorf("%s runs once, but has serve_cmd %q / probe %+v", p.Name, r.ServeCmd, r.Probe)
			}
		} else if r.Cmd != nil {
			t.Errorf("%s serves, but has an update cmd %q", p.Name, r.Cmd)
		}
		if len(line) != 3 || line[0] != "sh" {
			t.Errorf("%s command %q: want a shell command line", p.Name, line)
			continue
		}
		if diff := cmp.Diff(append([]string{"./bin/toolmesh"}, p.Args...), shellArgs(t, line[2])); diff != "" {
			t.Errorf("%s command %q (-want +got):\n%s", p.Name, line[2], diff)
		}
		if diff := cmp.Diff(p.Env, env, cmp.Comparer(func(a, b map[string]string) bool {
			return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b)
		})); diff != "" {
			t.Errorf("%s env (-want +got):\n%s", p.Name, diff)
		}
		if p.Once {
			continue
		}
		if r.Probe == nil || r.Probe.HTTPGet == nil {
			t.Errorf("%s has no HTTP readiness probe", p.Name)
		} else {
			got := *r.Probe.HTTPGet
			wantGet := httpGetAction{Host: p.Probe.Host, Port: p.Probe.Port, Path: p.Probe.Path, Scheme: "http"}
			if got != wantGet {
				t.Errorf("%s probe %+v, want %+v", p.Name, got, wantGet)
			}
			if r.Probe.PeriodSecs > 2 {
				t.Errorf("%s probe every %ds: dependents wait that long after it is ready", p.Name, r.Probe.PeriodSecs)
			}
		}
		// Processes run the binary the build resource keeps fresh and
		// restart when it is rebuilt; Temporal keeps its workflows.
		wantDeps := []string{bin}
		if p.Label == "infra" {
			wantDeps = nil
		}
		if diff := cmp.Diff(wantDeps, r.Deps); diff != "" {
			t.Errorf("%s deps (-want +got):\n%s", p.Name, diff)
		}
	}
	var got []string
	for _, r := range run.Resources {
		got = append(got, r.Name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}

	// Every resource_deps names a resource declared before it (Tilt only
	// warns about an unknown one and drops the ordering).
	seen := map[string]bool{}
	for _, r := range run.Resources {
		for _, d := range r.ResourceDeps {
			if !seen[d] {
				t.Errorf("%s depends on %q, which is not declared before it", r.Name, d)
			}
		}
		seen[r.Name] = true
	}

	// The Tiltfile is read again when the binary (and so the list) changes.
	if !slices.Contains(run.Watched, bin) {
		t.Errorf("watch_file %v: bin/toolmesh is not watched", run.Watched)
	}
	if !cmp.Equal(run.Local, [][]string{{"./bin/toolmesh", "processes", "--json"}}) {
		t.Errorf("local() ran %q, want only the process list from ./bin/toolmesh", run.Local)
	}
}

func TestTiltfileLabelsAndLinks(t *testing.T) {
	dir := checkout(t)
	run, err := execTiltfile(filepath.Join(dir, "Tiltfile"), nil)
	if err != nil {
		t.Fatalf("Tiltfile: %v", err)
	}
	byLabel := map[string][]string{}
	for _, r := range run.Resources {
		if len(r.Labels) != 1 {
			t.Errorf("%s labels %q: want exactly one group", r.Name, r.Labels)
			continue
		}
		byLabel[r.Labels[0]] = append(byLabel[r.Labels[0]], r.Name)
	}
	for _, l := range []string{"infra", "services", "edge", "console", "codegen"} {
		if len(byLabel[l]) == 0 {
			t.Errorf("no resource labelled %s (groups: %v)", l, byLabel)
		}
	}
	for l := range byLabel {
		if !slices.Contains([]string{"infra", "services", "workers", "edge", "console", "codegen"}, l) {
			t.Errorf("unexpected label %s on %v", l, byLabel[l])
		}
	}
	if diff := cmp.Diff([]string{"edge"}, byLabel["edge"]); diff != "" {
		t.Errorf("edge group (-want +got):\n%s", diff)
	}

	temporal := run.resource("temporal")
	if temporal == nil || !slices.Equal(temporal.Labels, []string{"infra"}) {
		t.Fatalf("no temporal resource labelled infra: %+v", temporal)
	}
	if diff := cmp.Diff([]tiltLink{{URL: "http://127.0.0.1:8233", Name: "Temporal UI"}}, temporal.Links); diff != "" {
		t.Errorf("temporal links (-want +got):\n%s", diff)
	}
	if c := run.resource("console"); c == nil || !cmp.Equal(c.Links, []tiltLink{{URL: "http://127.0.0.1:7180/", Name: "Console"}}) {
		t.Errorf("the console resource %+v: want its link http://127.0.0.1:7180/", c)
	}
	edge := run.resource("edge")
	if diff := cmp.Diff([]tiltLink{{URL: "http://127.0.0.1:7100/mcp", Name: "MCP endpoint"}, {URL: "http://127.0.0.1:7190/metrics", Name: "Edge metrics"},
		{URL: "http://127.0.0.1:7170/a2a/agents/local/", Name: "A2A endpoint"}}, edge.Links); diff != "" {
		t.Errorf("edge links (-want +got):\n%s", diff)
	}
	// The edge starts last: after every service and worker.
	for _, r := range run.Resources {
		if (slices.Contains(r.Labels, "services") || slices.Contains(r.Labels, "workers")) && !slices.Contains(edge.ResourceDeps, r.Name) {
			t.Errorf("edge does not wait for %s", r.Name)
		}
		if slices.Contains(r.Labels, "services") && !slices.Contains(r.ResourceDeps, "temporal") {
			t.Errorf("service %s does not wait for temporal", r.Name)
		}
		if slices.Contains(r.Labels, "services") && r.Name != "agents" && !slices.Contains(r.ResourceDeps, "agents") {
			t.Errorf("service %s does not wait for the agents directory", r.Name)
		}
	}

	gen := run.resource("generate")
	if gen == nil {
		t.Fatal("no generate resource")
	}
	if diff := cmp.Diff([]string{"sh", "-c", "make generate"}, gen.Cmd); diff != "" {
		t.Errorf("generate cmd (-want +got):\n%s", diff)
	}
	if !slices.Contains(gen.Deps, filepath.Join(dir, "proto")) || !slices.Contains(gen.Ignore, "proto/gen") {
		t.Errorf("generate watches %q ignoring %q: want proto/ without its output proto/gen", gen.Deps, gen.Ignore)
	}
	if gen.AutoInit || gen.TriggerMode != "auto" {
		t.Errorf("generate auto_init=%v trigger=%s: want it to run on proto changes only", gen.AutoInit, gen.TriggerMode)
	}
	build := run.resource("build")
	if build == nil {
		t.Fatal("no build resource")
	}
	if diff := cmp.Diff([]string{"sh", "-c", "make build"}, build.Cmd); diff != "" {
		t.Errorf("build cmd (-want +got):\n%s", diff)
	}
	for _, src := range []string{"cmd", "internal", "services", "edge", "proto/gen", "go.mod"} {
		if !slices.Contains(build.Deps, filepath.Join(dir, src)) {
			t.Errorf("build does not watch %s (deps %q)", src, build.Deps)
		}
	}
	for _, r := range run.Resources {
		if !slices.Contains(r.Labels, "codegen") && !slices.Contains(r.ResourceDeps, "build") {
			t.Errorf("%s does not wait for build: it may run a stale or missing bin/toolmesh", r.Name)
		}
	}
	// make dev is tilt up, after building what Tilt runs.
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^dev:.*\n(\t.*\n)*\ttilt up\b`).Match(mk) {
		t.Error("Makefile: `make dev` does not run `tilt up`")
	}
}

func TestTiltfileOptions(t *testing.T) {
	dir := checkout(t)
	args := map[string]string{"port-offset": "300", "data": "mesh data/it's here", "dev-agent": "dev-1"}
	run, err := execTiltfile(filepath.Join(dir, "Tiltfile"), args)
	if err != nil {
		t.Fatalf("Tiltfile: %v", err)
	}
	tasks := run.resource("tasks")
	if tasks == nil || tasks.Probe == nil {
		t.Fatalf("tasks: %+v", tasks)
	}
	if tasks.Probe.HTTPGet.Port != 7401 {
		t.Errorf("tasks probe port %d with --port-offset=300, want 7401", tasks.Probe.HTTPGet.Port)
	}
	got := shellArgs(t, tasks.ServeCmd[2])
	if i := slices.Index(got, "--data"); i < 0 || got[i+1] != "mesh data/it's here" {
		t.Errorf("tasks serve_cmd %q: the data dir does not survive the shell as one argument", tasks.ServeCmd[2])
	}
	if v := run.resource("agents").ServeEnv["TOOLMESH_AGENTS_SEED"]; v != "dev-1" {
		t.Errorf("agents seed %q, want the dev agent dev-1", v)
	}
	if l := run.resource("edge").Links; len(l) != 3 || l[0].URL != "http://127.0.0.1:7400/mcp" || l[1].URL != "http://127.0.0.1:7490/metrics" ||
		l[2].URL != "http://127.0.0.1:7470/a2a/agents/dev-1/" {
		t.Errorf("edge links %+v, want the MCP endpoint on 7400, its metrics on 7490 and dev-1's A2A base on 7470", l)
	}

	if _, err := execTiltfile(filepath.Join(dir, "Tiltfile"), map[string]string{"port-offset": "many"}); err == nil {
		t.Error("--port-offset=many: the Tiltfile loaded")
	}
}
