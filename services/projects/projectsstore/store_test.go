package projectsstore_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
	"github.com/toolmesh/toolmesh/services/projects/projectsstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the projects store on SQLite and on
// PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create, get and lookup", Test: testCreateGet},
		{Name: "a name or a key is a retry", Test: testRetries},
		{Name: "concurrent creates of one name", Test: testConcurrentName},
		{Name: "list by name", Test: testList},
		{Name: "archive", Test: testArchive},
		{Name: "index entries", Test: testFiles},
		{Name: "symbol search", Test: testSymbols},
		{Name: "declarations", Test: testDeclarations},
		{Name: "health snapshots", Test: testSnapshots},
	})
}

const (
	agentA = "agent-a"
	agentB = "agent-b"
)

var day1 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *projectsstore.Store {
	return sqldbtest.OpenStore(t, db, projectsstore.Open)
}

func newProject(agent, name string, at time.Time) *projectsv1.Project {
	at = at.Truncate(time.Millisecond)
	return &projectsv1.Project{
		Id: ids.NewAt("prj", at), AgentId: agent, Name: name, Description: "the " + name + " code", Path: "src/" + name,
		Status: projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at),
	}
}

// call is an idempotency call whose digest stands for the request that
// makes p (its name and path).
func call(key string, p *projectsv1.Project) idempotency.Call {
	return idempotency.Call{Key: key, Digest: "digest:" + p.GetName() + ":" + p.GetPath() + ":" + p.GetGitUrl()}
}

func create(t *testing.T, s *projectsstore.Store, p *projectsv1.Project, key string) *projectsv1.Project {
	t.Helper()
	got, created, err := s.Create(t.Context(), p, call(key, p))
	if err != nil || !created {
		t.Fatalf("Create %s: created %v, %v", p.GetName(), created, err)
	}
	return got
}

func testCreateGet(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	p := newProject(agentA, "web", day1)
	p.GitUrl, p.GitRef, p.Path = "https://example.com/web.git", "main", ""
	create(t, s, p, "")
	got, err := s.Get(ctx, agentA, p.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got, protocmp.Transform()); diff != "" {
		t.Errorf("Get (-stored +got):\n%s", diff)
	}
	if got, err := s.Lookup(ctx, p.GetId()); err != nil || got.GetAgentId() != agentA {
		t.Errorf("Lookup = %v, %v; want the project", got, err)
	}
	_, err = s.Get(ctx, agentB, p.GetId())
	sqldbtest.WantErr(t, "another agent's Get", err, projects.ErrNotFound)
	_, err = s.Lookup(ctx, ids.NewAt("prj", day1))
	sqldbtest.WantErr(t, "Lookup of an unknown id", err, projects.ErrNotFound)
}

func testRetries(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	first := create(t, s, newProject(agentA, "web", day1), "key-1")

	// The same name and request under another key, or none: the first.
	for _, key := range []string{"key-2", ""} {
		again := newProject(agentA, "web", day1.Add(time.Minute))
		got, created, err := s.Create(ctx, again, call(key, again))
		if err != nil || created || got.GetId() != first.GetId() {
			t.Errorf("Create again with key %q = %s, created %v, %v; want %s", key, got.GetId(), created, err, first.GetId())
		}
	}
	// The same key with another name and request: the first, refused.
	other := newProject(agentA, "api", day1.Add(time.Minute))
	got, _, err := s.Create(ctx, other, call("key-1", other))
	if !errors.Is(err, idempotency.ErrKeyReused) || got.GetId() != first.GetId() {
		t.Errorf("Create with a used key = %v, %v; want ErrKeyReused with the first", got, err)
	}
	// The same name with another request.
	moved := newProject(agentA, "web", day1.Add(time.Minute))
	moved.Path = "elsewhere"
	if _, _, err := s.Create(ctx, moved, call("", moved)); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Errorf("Create of a taken name with another path: %v, want ErrKeyReused", err)
	}
	// Another agent's names and keys are its own.
	theirs := newProject(agentB, "web", day1.Add(time.Minute))
	if _, created, err := s.Create(ctx, theirs, call("key-1", theirs)); err != nil || !created {
		t.Errorf("another agent's Create of the same name and key: created %v, %v", created, err)
	}
	// Archiving frees the name (its key stays used).
	if _, err := s.Archive(ctx, agentA, first.GetId(), day1.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, created, err := s.Create(ctx, moved, call("", moved)); err != nil || !created {
		t.Errorf("Create of an archived project's name: created %v, %v", created, err)
	}
}

// Racing creates of one name, each under its own key: one project.
func testConcurrentName(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	const n = 10
	got := make([]*projectsv1.Project, n)
	errs := make([]error, n)
	sqldbtest.Race(t, db, n, func(i int) {
		p := newProject(agentA, "web", day1.Add(time.Duration(i)*time.Millisecond))
		got[i], _, errs[i] = s.Create(t.Context(), p, call(fmt.Sprint("key-", i), p))
	})
	for i, err := range errs {
		if err != nil || got[i].GetId() != got[0].GetId() {
			t.Errorf("create %d: %s, %v; want %s", i, got[i].GetId(), err, got[0].GetId())
		}
	}
	if list, total, err := s.List(t.Context(), agentA, true, 0, 50); err != nil || total != 1 {
		t.Errorf("List: %d projects (%v), %v; want one", total, prototest.IDs(list), err)
	}
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	var byName []*projectsv1.Project
	for i, name := range []string{"zeta", "alpha", "mid"} {
		byName = append(byName, create(t, s, newProject(agentA, name, day1.Add(time.Duration(i)*time.Minute)), ""))
	}
	create(t, s, newProject(agentB, "beta", day1), "")
	archived, err := s.Archive(ctx, agentA, byName[0].GetId(), day1.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		archived      bool
		offset, limit int
		want          []string
		total         int
	}{
		{false, 0, 50, []string{byName[1].GetId(), byName[2].GetId()}, 2},
		{true, 0, 50, []string{byName[1].GetId(), byName[2].GetId(), archived.GetId()}, 3},
		{true, 1, 1, []string{byName[2].GetId()}, 3},
	} {
		got, total, err := s.List(ctx, agentA, tc.archived, tc.offset, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, prototest.IDs(got)); diff != "" || total != tc.total {
			t.Errorf("List(archived %v, %d, %d): total %d, want %d (-want +got):\n%s", tc.archived, tc.offset, tc.limit, total, tc.total, diff)
		}
	}
}

func testArchive(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	p := create(t, s, newProject(agentA, "web", day1), "")
	at := day1.Add(time.Hour)
	got, err := s.Archive(ctx, agentA, p.GetId(), at)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED || !got.GetArchiveTime().AsTime().Equal(at) || !got.GetUpdateTime().AsTime().Equal(at) {
		t.Errorf("Archive = %v, want archived at %s", got, at)
	}
	again, err := s.Archive(ctx, agentA, p.GetId(), at.Add(time.Hour))
	if err != nil || !again.GetArchiveTime().AsTime().Equal(at) {
		t.Errorf("Archive again = %v, %v; want it unchanged, archived at %s", again, err, at)
	}
	_, err = s.Archive(ctx, agentB, p.GetId(), at)
	sqldbtest.WantErr(t, "another agent's Archive", err, projects.ErrNotFound)
}

func symbol(project, path, name, container string, kind projectsv1.SymbolKind, line int32) *projectsv1.Symbol {
	return &projectsv1.Symbol{ProjectId: project, Path: path, Name: name, Kind: kind, Language: projectsv1.Language_LANGUAGE_GO,
		Line: line, Column: 6, EndLine: line + 2, Container: container, Signature: "func " + name + "()"}
}

func testFiles(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	const p = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1"
	a := projects.ParsedFile{
		IndexedFile: projects.IndexedFile{Path: "a.go", Hash: "h1", Size: 10, ModTime: 100, Language: projectsv1.Language_LANGUAGE_GO, Lines: 3, Todos: 1, Test: true},
		Decls:       []*projectsv1.Symbol{symbol(p, "a.go", "A", "", projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, 1)},
	}
	b := projects.ParsedFile{IndexedFile: projects.IndexedFile{Path: "dir/b.py", Hash: "h2", Size: 20, ModTime: 200, Language: projectsv1.Language_LANGUAGE_PYTHON, Fixmes: 2}}
	if err := s.SaveFiles(ctx, p, []projects.ParsedFile{a, b}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Files(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wantA := a.IndexedFile
	wantA.Symbols = 1
	if diff := cmp.Diff(map[string]projects.IndexedFile{"a.go": wantA, "dir/b.py": b.IndexedFile}, got); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	// Touched, not changed: the declarations stay.
	touched := projects.ParsedFile{IndexedFile: wantA, KeepDecls: true}
	touched.ModTime = 150
	if err := s.SaveFiles(ctx, p, []projects.ParsedFile{touched}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Files(ctx, p); got["a.go"].ModTime != 150 || got["a.go"].Symbols != 1 {
		t.Errorf("after a touch: %+v, want time 150 and its one symbol", got["a.go"])
	}
	if list, total, err := s.Symbols(ctx, projects.SymbolQuery{ProjectIDs: []string{p}}, 0, 50); err != nil || total != 1 {
		t.Errorf("symbols after a touch: %v, %d, %v; want A", list, total, err)
	}
	// Changed: the declarations are replaced.
	changed := a
	changed.Hash, changed.Decls = "h3", []*projectsv1.Symbol{
		symbol(p, "a.go", "B", "", projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, 1), symbol(p, "a.go", "C", "", projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, 5),
	}
	if err := s.SaveFiles(ctx, p, []projects.ParsedFile{changed}); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.Symbols(ctx, projects.SymbolQuery{ProjectIDs: []string{p}}, 0, 50)
	if err != nil || len(list) != 2 || list[0].GetName() != "B" || list[1].GetName() != "C" {
		t.Errorf("symbols after a change: %v, %v; want B and C", list, err)
	}
	if err := s.DeleteFiles(ctx, p, []string{"a.go"}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Files(ctx, p)
	if _, ok := got["a.go"]; ok || len(got) != 1 {
		t.Errorf("Files after a delete: %v, want dir/b.py only", got)
	}
	if _, total, _ := s.Symbols(ctx, projects.SymbolQuery{ProjectIDs: []string{p}}, 0, 50); total != 0 {
		t.Errorf("%d symbols left of a deleted file", total)
	}
}

func testSymbols(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	const p1, p2 = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1", "prj_01hzy3d5q8w9x7v6t5s4r3p2n2"
	fn, method := projectsv1.SymbolKind_SYMBOL_KIND_FUNCTION, projectsv1.SymbolKind_SYMBOL_KIND_METHOD
	save := func(project, path string, lang projectsv1.Language, decls ...*projectsv1.Symbol) {
		for _, d := range decls {
			d.Language = lang
		}
		if err := s.SaveFiles(ctx, project, []projects.ParsedFile{{IndexedFile: projects.IndexedFile{Path: path, Hash: path, Language: lang}, Decls: decls}}); err != nil {
			t.Fatal(err)
		}
	}
	save(p1, "src/create.go", projectsv1.Language_LANGUAGE_GO,
		symbol(p1, "src/create.go", "recreate", "", fn, 3),
		symbol(p1, "src/create.go", "Create", "Service", method, 10),
		symbol(p1, "src/create.go", "CreateTask", "", fn, 20))
	save(p1, "srcx/other.go", projectsv1.Language_LANGUAGE_GO, symbol(p1, "srcx/other.go", "create_100%", "", fn, 1))
	save(p1, "web/app.py", projectsv1.Language_LANGUAGE_PYTHON, symbol(p1, "web/app.py", "create", "App", method, 4))
	save(p2, "src/create.go", projectsv1.Language_LANGUAGE_GO, symbol(p2, "src/create.go", "Create", "", fn, 1))

	both := []string{p1, p2}
	name := func(list []*projectsv1.Symbol) []string {
		var out []string
		for _, s := range list {
			out = append(out, s.GetProjectId()[len(s.GetProjectId())-1:]+":"+s.GetPath()+":"+s.GetName())
		}
		return out
	}
	for _, tc := range []struct {
		what string
		q    projects.SymbolQuery
		want []string
	}{
		{"exact, then prefix, then the rest", projects.SymbolQuery{ProjectIDs: []string{p1}, Name: "create"},
			[]string{"1:src/create.go:Create", "1:web/app.py:create", "1:src/create.go:CreateTask", "1:srcx/other.go:create_100%", "1:src/create.go:recreate"}},
		{"two projects", projects.SymbolQuery{ProjectIDs: both, Name: "create", Path: "src"},
			[]string{"1:src/create.go:Create", "2:src/create.go:Create", "1:src/create.go:CreateTask", "1:src/create.go:recreate"}},
		{"a directory is not a prefix of its name", projects.SymbolQuery{ProjectIDs: []string{p1}, Path: "src/"},
			[]string{"1:src/create.go:recreate", "1:src/create.go:Create", "1:src/create.go:CreateTask"}},
		{"one file", projects.SymbolQuery{ProjectIDs: []string{p1}, Path: "web/app.py"}, []string{"1:web/app.py:create"}},
		{"wildcards are plain characters", projects.SymbolQuery{ProjectIDs: []string{p1}, Name: "_100%"}, []string{"1:srcx/other.go:create_100%"}},
		{"a kind", projects.SymbolQuery{ProjectIDs: both, Kind: method}, []string{"1:src/create.go:Create", "1:web/app.py:create"}},
		{"a language", projects.SymbolQuery{ProjectIDs: both, Language: projectsv1.Language_LANGUAGE_PYTHON}, []string{"1:web/app.py:create"}},
		{"no match", projects.SymbolQuery{ProjectIDs: both, Name: "zzz"}, nil},
	} {
		got, total, err := s.Symbols(ctx, tc.q, 0, 50)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if diff := cmp.Diff(tc.want, name(got)); diff != "" || total != len(tc.want) {
			t.Errorf("%s: total %d (-want +got):\n%s", tc.what, total, diff)
		}
	}
	page, total, err := s.Symbols(ctx, projects.SymbolQuery{ProjectIDs: []string{p1}, Name: "create"}, 1, 2)
	if err != nil || total != 5 || cmp.Diff([]string{"1:web/app.py:create", "1:src/create.go:CreateTask"}, name(page)) != "" {
		t.Errorf("page 2 of 2: %v of %d, %v", name(page), total, err)
	}
	got, _, _ := s.Symbols(ctx, projects.SymbolQuery{ProjectIDs: []string{p1}, Name: "createtask"}, 0, 1)
	want := symbol(p1, "src/create.go", "CreateTask", "", fn, 20)
	if len(got) != 1 || cmp.Diff(want, got[0], protocmp.Transform()) != "" {
		t.Errorf("stored symbol = %v, want %v", got, want)
	}
}

func testDeclarations(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	const p1, p2 = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1", "prj_01hzy3d5q8w9x7v6t5s4r3p2n2"
	method := projectsv1.SymbolKind_SYMBOL_KIND_METHOD
	for _, f := range []struct {
		project, path string
		decls         []*projectsv1.Symbol
	}{
		{p1, "a.go", []*projectsv1.Symbol{symbol(p1, "a.go", "Add", "Cart", method, 3), symbol(p1, "a.go", "Add", "Wishlist", method, 9)}},
		{p2, "b.go", []*projectsv1.Symbol{symbol(p2, "b.go", "Add", "Cart", method, 1)}},
	} {
		if err := s.SaveFiles(ctx, f.project, []projects.ParsedFile{{IndexedFile: projects.IndexedFile{Path: f.path, Hash: "x"}, Decls: f.decls}}); err != nil {
			t.Fatal(err)
		}
	}
	where := func(list []*projectsv1.Symbol) []string {
		var out []string
		for _, d := range list {
			out = append(out, fmt.Sprintf("%s:%d", d.GetPath(), d.GetLine()))
		}
		return out
	}
	for _, tc := range []struct {
		projects        []string
		name, container string
		limit           int
		want            []string
	}{
		{[]string{p1}, "Add", "", 10, []string{"a.go:3", "a.go:9"}},
		{[]string{p1}, "Add", "Cart", 10, []string{"a.go:3"}},
		{[]string{p1, p2}, "Add", "Cart", 10, []string{"a.go:3", "b.go:1"}},
		{[]string{p1, p2}, "Add", "", 2, []string{"a.go:3", "a.go:9"}},
		{[]string{p1}, "add", "", 10, nil},
	} {
		got, err := s.Declarations(ctx, tc.projects, tc.name, tc.container, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, where(got)); diff != "" {
			t.Errorf("Declarations(%v, %s, %q): (-want +got):\n%s", tc.projects, tc.name, tc.container, diff)
		}
	}
}

func testSnapshots(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	const p = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1"
	vet := int64(3)
	snap := func(day int, files int64) *projectsv1.HealthSnapshot {
		return &projectsv1.HealthSnapshot{ProjectId: p, TakeTime: timestamppb.New(day1.AddDate(0, 0, day)), Files: files, Lines: 10 * files,
			Symbols: 5, Todos: 1, Fixmes: 2, TestFiles: 1, GoVetMissing: "the go command is not installed"}
	}
	first := snap(0, 4)
	if got, created, err := s.AddSnapshot(ctx, first, "k0"); err != nil || !created || cmp.Diff(first, got, protocmp.Transform()) != "" {
		t.Fatalf("AddSnapshot = %v, %v, %v", got, created, err)
	}
	second := snap(1, 5)
	second.GoVetFindings, second.GoVetMissing, second.Truncated = &vet, "", true
	if _, _, err := s.AddSnapshot(ctx, second, "k1"); err != nil {
		t.Fatal(err)
	}
	// A retry under a used key keeps the first snapshot.
	if got, created, err := s.AddSnapshot(ctx, snap(2, 99), "k1"); err != nil || created || cmp.Diff(second, got, protocmp.Transform()) != "" {
		t.Errorf("AddSnapshot again under k1 = %v, created %v, %v; want the first", got, created, err)
	}
	if got, err := s.Snapshot(ctx, p, "k1"); err != nil || cmp.Diff(second, got, protocmp.Transform()) != "" {
		t.Errorf("Snapshot(k1) = %v, %v", got, err)
	}
	_, err := s.Snapshot(ctx, p, "k9")
	sqldbtest.WantErr(t, "Snapshot of an unknown key", err, projects.ErrNotFound)
	all, err := s.Snapshots(ctx, p, day1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*projectsv1.HealthSnapshot{first, second}, all, protocmp.Transform()); diff != "" {
		t.Errorf("Snapshots (-want +got):\n%s", diff)
	}
	if recent, _ := s.Snapshots(ctx, p, day1.Add(time.Hour)); len(recent) != 1 || recent[0].GetFiles() != 5 {
		t.Errorf("Snapshots since an hour later = %v, want the second", recent)
	}
}
