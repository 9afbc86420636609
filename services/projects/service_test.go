package projects_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

func TestCreateGetListArchive(t *testing.T) {
	eachProtocol(t, projects.Config{HealthInterval: 6 * time.Hour}, func(t *testing.T, f *fixture) {
		web := f.create(t, agentA, "web", "ts")
		if web.GetPath() != "ts" || web.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE || web.GetAgentId() != agentA ||
			!strings.HasPrefix(web.GetId(), "prj_") {
			t.Errorf("created %v, want an active project of agent-a at ts", web)
		}
		// Its health workflow runs at the configured interval.
		if in := f.engine.health(web.GetId()); in == nil || in.GetAgentId() != agentA || in.GetInterval().AsDuration() != 6*time.Hour {
			t.Errorf("health workflow of %s: %v, want started for agent-a every 6h", web.GetId(), in)
		}
		// An absolute path inside the base is stored relative to it.
		api := f.create(t, agentA, "api", filepath.Join(f.base, "gomod"))
		if api.GetPath() != "gomod" {
			t.Errorf("absolute path stored as %q, want gomod", api.GetPath())
		}
		whole := f.create(t, agentA, "all", ".")

		got, err := f.client.Get(as(agentA), &projectsv1.GetRequest{ProjectId: web.GetId()})
		if err != nil || cmp.Diff(web, got.GetProject(), protocmp.Transform()) != "" {
			t.Errorf("Get = %v, %v; want %v", got.GetProject(), err, web)
		}
		if _, err := f.client.Get(as(agentB), &projectsv1.GetRequest{ProjectId: web.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Get: %v, want not_found", err)
		}

		list, err := f.client.List(as(agentA), &projectsv1.ListRequest{})
		if err != nil || cmp.Diff([]string{whole.GetId(), api.GetId(), web.GetId()}, prototest.IDs(list.GetProjects())) != "" {
			t.Errorf("List = %v, %v; want all, api, web", prototest.IDs(list.GetProjects()), err)
		}

		archived, err := f.client.Archive(as(agentA), &projectsv1.ArchiveRequest{ProjectId: api.GetId()})
		if err != nil || archived.GetProject().GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED || archived.GetProject().GetArchiveTime() == nil {
			t.Fatalf("Archive = %v, %v", archived, err)
		}
		if !contains(f.engine.stopped, api.GetId()) {
			t.Errorf("the health workflow of %s was not stopped: %v", api.GetId(), f.engine.stopped)
		}
		again, err := f.client.Archive(as(agentA), &projectsv1.ArchiveRequest{ProjectId: api.GetId()})
		if err != nil || !again.GetProject().GetArchiveTime().AsTime().Equal(archived.GetProject().GetArchiveTime().AsTime()) {
			t.Errorf("Archive again = %v, %v; want it unchanged", again, err)
		}
		if _, err := f.client.Archive(as(agentB), &projectsv1.ArchiveRequest{ProjectId: web.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Archive: %v, want not_found", err)
		}
		list, _ = f.client.List(as(agentA), &projectsv1.ListRequest{})
		withArchived, _ := f.client.List(as(agentA), &projectsv1.ListRequest{IncludeArchived: true})
		if len(list.GetProjects()) != 2 || withArchived.GetPage().GetTotal() != 3 {
			t.Errorf("after archiving: %d active, %d in all; want 2 and 3", len(list.GetProjects()), withArchived.GetPage().GetTotal())
		}
		// An archived project's code is not read; its name is free.
		if _, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: api.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("CodeSymbols of an archived project: %v, want failed_precondition", err)
		}
		if again := f.create(t, agentA, "api", "gomod"); again.GetId() == api.GetId() {
			t.Errorf("a new project under an archived name has the archived one's id")
		}
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A name is a key: the same create again returns the project, another
// create under the name is a conflict. An idempotency key is one too.
func TestCreateRetries(t *testing.T) {
	eachProtocol(t, projects.Config{}, func(t *testing.T, f *fixture) {
		first := f.create(t, agentA, "web", "ts")
		if again := f.create(t, agentA, "web", "ts"); again.GetId() != first.GetId() {
			t.Errorf("the same create again made %s, want %s", again.GetId(), first.GetId())
		}
		_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "web", Path: "py"})
		if servertest.Code(t, err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), first.GetId()) {
			t.Errorf("another create under the name: %v, want already_exists naming %s", err, first.GetId())
		}
		keyed := servertest.WithIdempotencyKey(as(agentA), "create-py")
		if _, err := f.client.Create(keyed, &projectsv1.CreateRequest{Name: "py", Path: "py"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Create(keyed, &projectsv1.CreateRequest{Name: "js", Path: "js"}); servertest.Code(t, err) != connect.CodeAlreadyExists ||
			!strings.Contains(err.Error(), "create-py") {
			t.Errorf("a reused key: %v, want already_exists naming the key", err)
		}
		// Another agent's names are its own.
		if theirs := f.create(t, agentB, "web", "ts"); theirs.GetId() == first.GetId() {
			t.Error("another agent's project of the same name is the first agent's")
		}
		// A create whose health workflow could not start stores the project
		// and says so; the same create again finishes it.
		f.engine.failStarts(errTemporalDown)
		_, err = f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "js", Path: "js"})
		if servertest.Code(t, err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "again") {
			t.Errorf("create with Temporal down: %v, want unavailable, asking for a retry", err)
		}
		f.engine.failStarts(nil)
		js := f.create(t, agentA, "js", "js")
		if f.engine.health(js.GetId()) == nil {
			t.Error("the retry did not start the health workflow")
		}
		if list, _ := f.client.List(as(agentA), &projectsv1.ListRequest{}); list.GetPage().GetTotal() != 3 {
			t.Errorf("%d projects, want web, py and js: %v", list.GetPage().GetTotal(), prototest.IDs(list.GetProjects()))
		}
	})
}

// A code root must be a directory inside the base, whatever the path says:
// .., an absolute path elsewhere and a symbolic link out are refused when
// the project is created; a link changed to lead out later is refused at
// the next read.
func TestPathsThatEscapeTheBaseAreRefused(t *testing.T) {
	f := start(t, projects.Config{})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.go"), []byte("package secret\n\nconst Token = \"s3cr3t\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.base, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.base, "py"), filepath.Join(f.base, "pylink")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"..", "../" + filepath.Base(outside), "ts/../..", outside, "out", "out/.", "/etc", "missing", "ts/repo.ts"} {
		_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "x", Path: path})
		if servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("Create at %q: %v, want invalid_argument", path, err)
		}
	}
	// A link that stays inside is followed.
	p := f.create(t, agentA, "py", "pylink")
	if p.GetPath() != "py" {
		t.Errorf("a link inside the base is stored as %q, want its target py", p.GetPath())
	}

	// A project whose root is a link, changed after the create to lead out.
	if err := os.Symlink(filepath.Join(f.base, "js"), filepath.Join(f.base, "moving")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.base, "linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.base, "js"), filepath.Join(f.base, "linked", "code")); err != nil {
		t.Fatal(err)
	}
	moving := f.create(t, agentA, "moving", "linked")
	if res, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: moving.GetId()}); err != nil || res.GetIndex()[0].GetFiles() != 0 {
		// The link inside the project is not followed: nothing to index.
		t.Errorf("CodeSymbols of a project holding only a link: %v, %v; want no file", res.GetIndex(), err)
	}
	if err := os.Remove(filepath.Join(f.base, "linked", "code")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.base, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.base, "linked")); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.CodeSymbols(as(agentA), &projectsv1.CodeSymbolsRequest{ProjectId: moving.GetId()})
	if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "outside the project base") {
		t.Errorf("CodeSymbols once the root leads out: %v, want failed_precondition, outside the project base", err)
	}
	res, err := f.client.FindReferences(as(agentA), &projectsv1.FindReferencesRequest{Symbol: "Token"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetReferences()) != 0 || len(res.GetDeclarations()) != 0 {
		t.Errorf("a search of every project found %v %v; the secret is outside the base", res.GetDeclarations(), res.GetReferences())
	}
	var refused bool
	for _, r := range res.GetIndex() {
		refused = refused || r.GetProjectId() == moving.GetId() && strings.Contains(r.GetCutReason(), "outside the project base")
	}
	if !refused {
		t.Errorf("the search of every project does not say %s was refused: %v", moving.GetId(), res.GetIndex())
	}
}

// RecordHealth is for the health workflow only.
// A path given as a file:// URI (a client's root) names the directory of
// this machine: inside the base it is the code root, outside it is refused,
// naming the base; a URI of another host is refused.
func TestFileURIPaths(t *testing.T) {
	f := start(t, projects.Config{})
	base, err := filepath.EvalSymlinks(f.base)
	if err != nil {
		t.Fatal(err)
	}
	if p := f.create(t, agentA, "rooted", "file://"+filepath.Join(base, "py")); p.GetPath() != "py" {
		t.Errorf("a file URI inside the base is stored as %q, want py", p.GetPath())
	}
	if p := f.create(t, agentA, "local", "file://localhost"+filepath.Join(base, "ts")); p.GetPath() != "ts" {
		t.Errorf("a file://localhost URI inside the base is stored as %q, want ts", p.GetPath())
	}
	outside := t.TempDir()
	_, err = f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "astray", Path: "file://" + outside})
	if servertest.Code(t, err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "outside the project base "+base) {
		t.Errorf("Create at a file URI outside the base: %v, want invalid_argument naming the base %s", err, base)
	}
	for _, path := range []string{"file://elsewhere" + filepath.Join(base, "py"), "file:py", "file://"} {
		_, err := f.client.Create(as(agentA), &projectsv1.CreateRequest{Name: "astray", Path: path})
		if servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("Create at %q: %v, want invalid_argument", path, err)
		}
	}
	if res, err := f.client.List(as(agentA), &projectsv1.ListRequest{}); err != nil || len(res.GetProjects()) != 2 {
		t.Errorf("List = %v, %v; want the two projects inside the base", res.GetProjects(), err)
	}
}

func TestRecordHealthIsForTheWorkflow(t *testing.T) {
	f := start(t, projects.Config{})
	p := f.create(t, agentA, "web", "ts")
	_, err := f.client.RecordHealth(as(agentA), &projectsv1.RecordHealthRequest{ProjectId: p.GetId(), Key: "k"})
	if servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("RecordHealth by an agent: %v, want permission_denied", err)
	}
	_, err = f.client.RecordHealth(asWorker(), &projectsv1.RecordHealthRequest{ProjectId: "prj_01hzy3d5q8w9x7v6t5s4r3p2n1", Key: "k"})
	if servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("RecordHealth of an unknown project: %v, want not_found", err)
	}
}

func TestBadRequestsAreRefusedByTheContract(t *testing.T) {
	f := start(t, projects.Config{})
	ctx := as(agentA)
	for what, call := range map[string]func() error{
		"no source": func() error { _, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x"}); return err },
		"two sources": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x", Path: "ts", GitUrl: "https://example.com/x.git"})
			return err
		},
		"a ref without a URL": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x", Path: "ts", GitRef: "main"})
			return err
		},
		"a blank path": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x", Path: "  "})
			return err
		},
		"an upper name": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "Web", Path: "ts"})
			return err
		},
		"an ssh URL": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x", GitUrl: "git@host:x.git"})
			return err
		},
		"an option ref": func() error {
			_, err := f.client.Create(ctx, &projectsv1.CreateRequest{Name: "x", GitUrl: "https://h/x", GitRef: "--upload-pack=x"})
			return err
		},
		"a blank symbol": func() error {
			_, err := f.client.FindReferences(ctx, &projectsv1.FindReferencesRequest{Symbol: " "})
			return err
		},
		"a dotted path symbol": func() error {
			_, err := f.client.FindReferences(ctx, &projectsv1.FindReferencesRequest{Symbol: "a.b.c"})
			return err
		},
		"too many days": func() error {
			_, err := f.client.HealthTrends(ctx, &projectsv1.HealthTrendsRequest{ProjectId: "prj_01hzy3d5q8w9x7v6t5s4r3p2n1", Days: 366})
			return err
		},
	} {
		if err := call(); servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", what, err)
		}
	}
}
