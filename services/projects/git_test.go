package projects_test

import (
	"context"
	"fmt"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

// gitRepo is a git repository served over HTTP on loopback by git's own
// http-backend, as a git host would.
type gitRepo struct {
	URL  string
	work string
}

func gitBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("these tests need the git command")
	}
	return bin
}

// runGit runs git in dir with a fixed identity and no user configuration.
func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(gitBin(t), append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// newGitRepo serves a repository whose main branch holds files.
func newGitRepo(t *testing.T, files map[string]string) *gitRepo {
	t.Helper()
	bin := gitBin(t)
	root := t.TempDir()
	runGit(t, root, "init", "--quiet", "--bare", "repo.git")
	r := &gitRepo{work: t.TempDir()}
	runGit(t, r.work, "init", "--quiet")
	runGit(t, r.work, "remote", "add", "origin", filepath.Join(root, "repo.git"))
	r.commit(t, files)
	srv := httptest.NewServer(&cgi.Handler{Path: bin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}})
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/repo.git"
	return r
}

// commit writes files (a value starting with "->" is a symbolic link to
// the rest) and pushes them to the current branch.
func (r *gitRepo) commit(t *testing.T, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(r.work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	runGit(t, r.work, "add", "-A")
	runGit(t, r.work, "commit", "--quiet", "-m", "change")
	runGit(t, r.work, "push", "--quiet", "origin", "HEAD")
}

// branch starts a branch with files and pushes it.
func (r *gitRepo) branch(t *testing.T, name string, files map[string]string) {
	t.Helper()
	runGit(t, r.work, "checkout", "--quiet", "-b", name)
	r.commit(t, files)
	runGit(t, r.work, "checkout", "--quiet", "main")
}

func loopbackGit(t *testing.T) *projects.Git {
	return &projects.Git{Dir: t.TempDir(), Egress: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		Timeout: time.Minute, MaxBytes: 10 << 20}
}

func symbolNames(t *testing.T, f *fixture, projectID string) []string {
	t.Helper()
	res, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: projectID, Kind: projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range res.GetSymbols() {
		out = append(out, s.GetPath()+":"+s.GetName())
	}
	return out
}

func TestGitProjects(t *testing.T) {
	repo := newGitRepo(t, map[string]string{
		"app.py":  "def serve():\n    pass\n",
		"leak.py": "->/etc/passwd",
	})
	repo.branch(t, "feature", map[string]string{"feature.py": "def flag():\n    pass\n"})
	git := loopbackGit(t)
	f := start(t, projects.Config{Git: git})

	res, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "app", GitUrl: repo.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := res.GetProject()
	if p.GetGitUrl() != repo.URL || p.GetPath() != "" {
		t.Errorf("created %v, want a git project", p)
	}
	if diff := cmp.Diff([]string{"app.py:serve"}, symbolNames(t, f, p.GetId())); diff != "" {
		t.Errorf("functions of the clone (-want +got):\n%s", diff)
	}
	// A symbolic link in the repository is checked out as a plain file
	// holding its target: nothing in a clone leads out of it.
	leak := filepath.Join(git.Dir, p.GetId(), "leak.py")
	if info, err := os.Lstat(leak); err != nil || !info.Mode().IsRegular() {
		t.Errorf("leak.py in the clone: %v, %v; want a regular file", info, err)
	} else if b, _ := os.ReadFile(leak); string(b) != "/etc/passwd" {
		t.Errorf("leak.py holds %q, want the link's target as text", b)
	}

	// A health snapshot brings the clone to the branch's newest commit.
	repo.commit(t, map[string]string{"more.py": "def later():\n    pass\n"})
	if _, err := f.client.RecordHealth(asWorker(), &projectsv1.RecordHealthRequest{ProjectId: p.GetId(), Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"app.py:serve", "more.py:later"}, symbolNames(t, f, p.GetId())); diff != "" {
		t.Errorf("functions after a snapshot (-want +got):\n%s", diff)
	}

	// A branch.
	res, err = f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "feature", GitUrl: repo.URL, GitRef: "feature"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"app.py:serve", "feature.py:flag"}, symbolNames(t, f, res.GetProject().GetId())); diff != "" {
		t.Errorf("functions of the feature branch (-want +got):\n%s", diff)
	}
	_, err = f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "nope", GitUrl: repo.URL, GitRef: "no-such-branch"})
	if servertest.Code(t, err) != connect.CodeInvalidArgument {
		t.Errorf("a branch that does not exist: %v, want invalid_argument", err)
	}

	// Archiving removes the clone.
	if _, err := f.client.Archive(as(agentA), &projectsv1.ArchiveRequest{ProjectId: p.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(git.Dir, p.GetId())); !os.IsNotExist(err) {
		t.Errorf("the clone of an archived project is still there: %v", err)
	}
	entries, _ := os.ReadDir(git.Dir)
	if len(entries) != 1 {
		t.Errorf("clones left: %v, want the feature branch's only", entries)
	}
}

// The egress guard decides where a clone may connect: loopback is refused
// unless allowed, and nothing is stored.
func TestGitURLsGoThroughTheEgressGuard(t *testing.T) {
	repo := newGitRepo(t, map[string]string{"app.py": "def serve():\n    pass\n"})
	git := loopbackGit(t)
	git.Egress = egress.Policy{}
	f := start(t, projects.Config{Git: git})
	_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "app", GitUrl: repo.URL})
	if servertest.Code(t, err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a clone from loopback: %v, want invalid_argument naming loopback", err)
	}
	if list, _ := f.client.List(as(agentA), &projectsv1.ListRequest{IncludeArchived: true}); len(list.GetProjects()) != 0 {
		t.Errorf("a refused create stored %v", list.GetProjects())
	}
	if entries, _ := os.ReadDir(git.Dir); len(entries) != 0 {
		t.Errorf("a refused create left %v", entries)
	}
}

func TestGitCapabilityGapAndLimits(t *testing.T) {
	repo := newGitRepo(t, map[string]string{"app.py": strings.Repeat("# filler\n", 2000)})
	for what, git := range map[string]*projects.Git{
		"no git configured": nil,
		"git not installed": {Dir: t.TempDir(), Command: filepath.Join(t.TempDir(), "git"), Timeout: time.Minute, MaxBytes: 1 << 20},
	} {
		f := start(t, projects.Config{Git: git})
		_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "app", GitUrl: repo.URL})
		if gap, ok := mesh.CapabilityGap(err); !ok || gap != projects.GapGit {
			t.Errorf("%s: %v, want the capability gap %s", what, err, projects.GapGit)
		}
	}
	small := loopbackGit(t)
	small.MaxBytes = 4 << 10
	f := start(t, projects.Config{Git: small})
	_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "app", GitUrl: repo.URL})
	if servertest.Code(t, err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a repository over the size limit: %v, want invalid_argument, larger than", err)
	}
	if entries, _ := os.ReadDir(small.Dir); len(entries) != 0 {
		t.Errorf("a clone over the limit left %v", entries)
	}
}

// git connects to the address the egress guard checked and to no other:
// a host name the system cannot resolve works when the guard's resolver
// answers it, so git did not resolve it again.
func TestGitConnectsToTheCheckedAddress(t *testing.T) {
	repo := newGitRepo(t, map[string]string{"app.py": "def serve():\n    pass\n"})
	git := loopbackGit(t)
	git.Egress.Lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "repo.invalid" {
			return nil, fmt.Errorf("unknown host %s", host)
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	f := start(t, projects.Config{Git: git})
	url := strings.Replace(repo.URL, "127.0.0.1", "repo.invalid", 1)
	res, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "app", GitUrl: url})
	if err != nil {
		t.Fatalf("clone of %s: %v", url, err)
	}
	if diff := cmp.Diff([]string{"app.py:serve"}, symbolNames(t, f, res.GetProject().GetId())); diff != "" {
		t.Errorf("functions of the clone (-want +got):\n%s", diff)
	}
}
