// Package projects is the projects domain: an agent names the code it works
// on, a directory the mesh may read (inside the project base) or a git
// repository the mesh clones, and navigates it by parsing it (package
// code); a workflow records the project's health on a schedule.
//
// What a call may read:
//   - a path project's code root is resolved and checked to be inside the
//     Base at create and again at every read (Base.Open); a git project's
//     clone is the mesh's own directory (Git), reached through the egress
//     guard;
//   - indexing is incremental (a file is parsed again only when its
//     content changed) and bounded by Limits: a call answers what it read
//     and says when it was cut short.
//
// Who may do what: an agent sees only its own projects; RecordHealth is
// for the health workflow (mesh role service).
package projects

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
)

// Defaults of Config.
const (
	DefaultHealthInterval = 24 * time.Hour
	DefaultMaxFiles       = 20000
	DefaultMaxFileBytes   = 1 << 20
	DefaultIndexTimeout   = 30 * time.Second
	DefaultCloneTimeout   = 2 * time.Minute
	DefaultCloneMaxBytes  = 512 << 20
)

// Capability gaps the service names.
const (
	GapGit        = "projects.git"
	GapTreeSitter = "projects.tree_sitter"
)

// Limits bound how much of a project's code one call reads.
type Limits struct {
	// MaxFiles is how many source files of a project are indexed; the rest
	// are skipped and the index is reported cut.
	MaxFiles int
	// MaxFileBytes is the largest source file indexed; larger ones are
	// skipped.
	MaxFileBytes int64
	// Timeout bounds the indexing and the reference search of one call;
	// what was read by then is answered, reported cut.
	Timeout time.Duration
}

// Config tunes the service.
type Config struct {
	// Base is the directory path projects must be inside (required).
	Base Base
	// Git clones git projects; without it, creating one answers the
	// capability gap projects.git.
	Git *Git
	// Limits bound the reading of one call; zero fields take the defaults.
	Limits Limits
	// HealthInterval is the time between two health snapshots of a project.
	HealthInterval time.Duration
	// GoCommand is the go binary that runs go vet ("go" on PATH when
	// empty); without one, the go vet metric is reported missing.
	GoCommand string
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events; discarded when nil.
	Log *slog.Logger
}

// Validate reports a limit out of its range. New takes a zero field as
// its default; a setting bound from a flag is a value, so Validate does not.
func (c Config) Validate() error {
	switch {
	case c.HealthInterval < time.Second:
		return fmt.Errorf("projects: the health interval must be at least 1s, got %s", c.HealthInterval)
	case c.Limits.Timeout < time.Second:
		return fmt.Errorf("projects: the index timeout must be at least 1s, got %s", c.Limits.Timeout)
	case c.Limits.MaxFiles < 1:
		return fmt.Errorf("projects: the most files indexed must be positive, got %d", c.Limits.MaxFiles)
	case c.Limits.MaxFileBytes < 1:
		return fmt.Errorf("projects: the largest file indexed must be positive, got %d bytes", c.Limits.MaxFileBytes)
	case c.Git != nil && c.Git.Timeout < time.Second:
		return fmt.Errorf("projects: the clone timeout must be at least 1s, got %s", c.Git.Timeout)
	case c.Git != nil && c.Git.MaxBytes < 1:
		return fmt.Errorf("projects: the largest clone must be positive, got %d bytes", c.Git.MaxBytes)
	}
	return nil
}

// Service implements toolmesh.projects.v1.ProjectsService.
type Service struct {
	store  Store
	engine Engine
	cfg    Config
	log    *slog.Logger
	// locks serialise the indexing and the git work of one project.
	locks [64]sync.Mutex
	seed  maphash.Seed
}

var _ projectsv1connect.ProjectsServiceHandler = (*Service)(nil)

// New returns the service over store, running health workflows on engine.
func New(store Store, engine Engine, cfg Config) *Service {
	if cfg.Limits.MaxFiles <= 0 {
		cfg.Limits.MaxFiles = DefaultMaxFiles
	}
	if cfg.Limits.MaxFileBytes <= 0 {
		cfg.Limits.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.Limits.Timeout <= 0 {
		cfg.Limits.Timeout = DefaultIndexTimeout
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.GoCommand == "" {
		cfg.GoCommand = "go"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, engine: engine, cfg: cfg, log: cfg.Log, seed: maphash.MakeSeed()}
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(projectsv1connect.ProjectsServiceName, projectsv1connect.ProjectsServiceHandler(s), projectsv1connect.NewProjectsServiceHandler, projectsv1.RegisterProjectsServiceHandler)
}

// lock takes the lock of a project's indexing and git work.
func (s *Service) lock(projectID string) (unlock func()) {
	m := &s.locks[maphash.String(s.seed, projectID)%uint64(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// Create implements ProjectsService.Create.
func (s *Service) Create(ctx context.Context, req *projectsv1.CreateRequest) (*projectsv1.CreateResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC().Truncate(time.Millisecond)
	p := &projectsv1.Project{
		Id: ids.NewAt("prj", now), AgentId: agent, Name: req.GetName(), Description: req.GetDescription(),
		Status: projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now),
	}
	if req.GetPath() != "" {
		if p.Path, err = s.cfg.Base.Resolve(req.GetPath()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	} else {
		p.GitUrl, p.GitRef = req.GetGitUrl(), req.GetGitRef()
		if err := s.clone(ctx, p.GetId(), p.GetGitUrl(), p.GetGitRef()); err != nil {
			return nil, err
		}
	}
	call := idempotency.CallOf(ctx, req)
	stored, created, err := s.store.Create(ctx, p, call)
	if p.GetGitUrl() != "" && (!created || err != nil) {
		s.removeClone(p.GetId())
	}
	if errors.Is(err, idempotency.ErrKeyReused) {
		if stored.GetName() == req.GetName() && stored.GetStatus() == projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("you already have a project named %q (%s) with another code root or description; archive it or choose another name", stored.GetName(), stored.GetId()))
		}
		return nil, idempotency.KeyConflict(call.Key)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("create project: %w", err))
	}
	if !created {
		idempotency.MarkReplay(ctx, call.Key)
		if stored.GetGitUrl() != "" {
			// A retry finishes what the first call left: its clone.
			if err := s.clone(ctx, stored.GetId(), stored.GetGitUrl(), stored.GetGitRef()); err != nil {
				return nil, err
			}
		}
	}
	if err := s.engine.StartHealth(ctx, &projectsv1.HealthInput{
		ProjectId: stored.GetId(), AgentId: agent, Interval: durationpb.New(s.cfg.HealthInterval),
	}); err != nil {
		s.log.Warn("projects.health_not_started", "project", stored.GetId(), "error", err.Error())
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf(
			"project %s is stored, but its health snapshots could not be scheduled (%v); call projects_create again with the same arguments to finish", stored.GetId(), err))
	}
	return &projectsv1.CreateResponse{Project: stored}, nil
}

// clone clones a git project's repository, mapping git's failures to what
// the caller can do about them.
func (s *Service) clone(ctx context.Context, projectID, rawURL, ref string) error {
	if s.cfg.Git == nil {
		return mesh.NewCapabilityGapError(GapGit, errors.New("this mesh does not clone git repositories: create the project from a path instead"))
	}
	unlock := s.lock(projectID)
	defer unlock()
	return gitError(s.cfg.Git.Clone(ctx, projectID, rawURL, ref))
}

func gitError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNoGit):
		return mesh.NewCapabilityGapError(GapGit, err)
	case errors.Is(err, ErrGitTimeout):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	// A refused or unresolvable host, a repository or ref that does not
	// exist: the URL is what to correct.
	return connect.NewError(connect.CodeInvalidArgument, err)
}

func (s *Service) removeClone(projectID string) {
	if s.cfg.Git == nil {
		return
	}
	if err := s.cfg.Git.Remove(projectID); err != nil {
		s.log.Warn("projects.clone_not_removed", "project", projectID, "error", err.Error())
	}
}

// Get implements ProjectsService.Get.
func (s *Service) Get(ctx context.Context, req *projectsv1.GetRequest) (*projectsv1.GetResponse, error) {
	p, err := s.own(ctx, req.GetProjectId())
	if err != nil {
		return nil, err
	}
	return &projectsv1.GetResponse{Project: p}, nil
}

// own returns the calling agent's project.
func (s *Service) own(ctx context.Context, id string) (*projectsv1.Project, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.store.Get(ctx, agent, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get project: %w", err))
	}
	return p, nil
}

// List implements ProjectsService.List.
func (s *Service) List(ctx context.Context, req *projectsv1.ListRequest) (*projectsv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, agent, req.GetIncludeArchived(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list projects: %w", err))
	}
	return &projectsv1.ListResponse{Projects: list, Page: paging.New(offset, limit, total)}, nil
}

// Archive implements ProjectsService.Archive. The health workflow is
// cancelled and a git project's clone removed; if either fails the
// project is archived all the same (the workflow ends at its next
// snapshot, which finds the project archived).
func (s *Service) Archive(ctx context.Context, req *projectsv1.ArchiveRequest) (*projectsv1.ArchiveResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.store.Archive(ctx, agent, req.GetProjectId(), s.cfg.Now().UTC().Truncate(time.Millisecond))
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s not found", req.GetProjectId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("archive project: %w", err))
	}
	if err := s.engine.StopHealth(ctx, agent, p.GetId()); err != nil {
		s.log.Warn("projects.health_not_stopped", "project", p.GetId(), "error", err.Error())
	}
	if p.GetGitUrl() != "" {
		unlock := s.lock(p.GetId())
		s.removeClone(p.GetId())
		unlock()
	}
	return &projectsv1.ArchiveResponse{Project: p}, nil
}
