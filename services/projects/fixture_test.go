package projects_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
	"github.com/toolmesh/toolmesh/services/projects"
	"github.com/toolmesh/toolmesh/services/projects/projectsstore"
)

const agentA, agentB = "agent-a", "agent-b"

// fakeEngine stands in for Temporal in the service's tests: it records the
// health workflows started and stopped. The workflow itself is tested in
// workers/projects, and the two together against a real Temporal dev
// server in cmd/toolmesh.
type fakeEngine struct {
	mu       sync.Mutex
	started  map[string]*projectsv1.HealthInput // by project id
	stopped  []string
	startErr error
}

func (f *fakeEngine) StartHealth(_ context.Context, in *projectsv1.HealthInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	if _, ok := f.started[in.GetProjectId()]; !ok {
		f.started[in.GetProjectId()] = in
	}
	return nil
}

func (f *fakeEngine) StopHealth(_ context.Context, _, projectID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, projectID)
	return nil
}

func (f *fakeEngine) health(projectID string) *projectsv1.HealthInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started[projectID]
}

func (f *fakeEngine) failStarts(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}

// fixture is a projects service on SQLite, a fake engine, and a base
// directory holding a copy of the parser fixtures (code/testdata): gomod,
// ts, js and py.
type fixture struct {
	client projectsv1connect.ProjectsServiceClient
	engine *fakeEngine
	base   string
	srv    *servertest.Server
	now    *clockAt
}

// clockAt is a settable clock.
type clockAt struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clockAt) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clockAt) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// start serves the service with cfg (its Base is the fixture's base).
func start(t *testing.T, cfg projects.Config) *fixture {
	t.Helper()
	base := t.TempDir()
	if err := os.CopyFS(base, os.DirFS("code/testdata")); err != nil {
		t.Fatal(err)
	}
	b, err := projects.NewBase(base)
	if err != nil {
		t.Fatal(err)
	}
	st, err := projectsstore.Open(t.Context(), sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{engine: &fakeEngine{started: map[string]*projectsv1.HealthInput{}}, base: base,
		now: &clockAt{t: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}}
	cfg.Base = b
	if cfg.Now == nil {
		cfg.Now = f.now.Now
	}
	f.srv = servertest.Start(t, projects.New(st, f.engine, cfg).Registration())
	f.client = projectsv1connect.NewProjectsServiceClient(f.srv.Client(), f.srv.URL, servertest.ClientOptions(nil)...)
	return f
}

// eachProtocol runs fn against a fresh fixture once over Connect and once
// over gRPC.
func eachProtocol(t *testing.T, cfg projects.Config, fn func(t *testing.T, f *fixture)) {
	var f *fixture
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		f = start(t, cfg)
		return f.srv
	}, projectsv1connect.NewProjectsServiceClient, func(t *testing.T, c projectsv1connect.ProjectsServiceClient) {
		f.client = c
		fn(t, f)
	})
}

func as(agent string) context.Context { return servertest.As(context.Background(), agent) }

// asWorker is the health workflow's identity.
func asWorker() context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{
		Subject: "toolmesh-worker-projects", Agent: "toolmesh-worker-projects", Roles: []string{mesh.RoleService},
	}})
}

// create creates a path project of agent and fails the test on error.
func (f *fixture) create(t *testing.T, agent, name, path string) *projectsv1.Project {
	t.Helper()
	res, err := f.client.Create(as(agent), &projectsv1.CreateRequest{Name: name, Path: path})
	if err != nil {
		t.Fatalf("Create %s at %s: %v", name, path, err)
	}
	return res.GetProject()
}

// write writes a file under the base.
func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(f.base, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

var errTemporalDown = errors.New("temporal is down")
