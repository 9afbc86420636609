package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
	"github.com/toolmesh/toolmesh/services/projects"
	"github.com/toolmesh/toolmesh/services/projects/projectsstore"
	projectsworker "github.com/toolmesh/toolmesh/workers/projects"
)

// projectsBaseEnv names the directory path projects must be inside.
const projectsBaseEnv = "TOOLMESH_PROJECTS_BASE"

// clonesDir is where, under --data, the projects service clones git
// projects.
const clonesDir = "clones"

// projectsOptions binds the projects domain's options: the base path
// projects must be inside, the health interval, the limits of one call's
// reading, and how git projects are cloned (through the egress guard). Its health workflows run on the
// Temporal frontend serve dialled (--temporal).
func projectsOptions(s *config.Set) buildFunc {
	var (
		base                     string
		interval, indexTimeout   time.Duration
		maxFiles                 int
		maxFileBytes, cloneBytes int64
		cloneTimeout             time.Duration
		gitAllow                 []string
	)
	s.String(&base, ".", config.Opt{Flag: "base", Env: projectsBaseEnv,
		Usage:   "directory a project's path must be inside (links and .. resolved), not the file system's root; under toolmesh up, the directory it was started in",
		Default: "the working directory"})
	s.Duration(&interval, projects.DefaultHealthInterval, config.Opt{Flag: "health-interval", Env: "TOOLMESH_PROJECTS_HEALTH_INTERVAL",
		Usage: "time between two health snapshots of a project (at least 1s)"})
	s.Duration(&indexTimeout, projects.DefaultIndexTimeout, config.Opt{Flag: "index-timeout", Env: "TOOLMESH_PROJECTS_INDEX_TIMEOUT",
		Usage: "how long one call reads a project's code before it answers with what it read (at least 1s)"})
	s.Int(&maxFiles, projects.DefaultMaxFiles, config.Opt{Flag: "max-files", Env: "TOOLMESH_PROJECTS_MAX_FILES",
		Usage: "source files of a project that are indexed; the rest are skipped"})
	s.Int64(&maxFileBytes, projects.DefaultMaxFileBytes, config.Opt{Flag: "max-file-bytes", Env: "TOOLMESH_PROJECTS_MAX_FILE_BYTES",
		Usage: "largest source file indexed, in bytes"})
	s.Duration(&cloneTimeout, projects.DefaultCloneTimeout, config.Opt{Flag: "clone-timeout", Env: "TOOLMESH_PROJECTS_CLONE_TIMEOUT",
		Usage: "how long one git clone or fetch may take (at least 1s)"})
	s.Int64(&cloneBytes, projects.DefaultCloneMaxBytes, config.Opt{Flag: "clone-max-bytes", Env: "TOOLMESH_PROJECTS_CLONE_MAX_BYTES",
		Usage: "largest clone kept on disk, in bytes; a larger repository is refused"})
	s.List(&gitAllow, config.Opt{Flag: "egress-allow", Env: "TOOLMESH_PROJECTS_EGRESS_ALLOW",
		Usage: "an internal address (CIDR prefix or single IP) git clones may reach anyway"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		cfg := projects.Config{
			Git:            &projects.Git{Dir: filepath.Join(deps.DataDir, clonesDir), Timeout: cloneTimeout, MaxBytes: cloneBytes},
			Limits:         projects.Limits{MaxFiles: maxFiles, MaxFileBytes: maxFileBytes, Timeout: indexTimeout},
			HealthInterval: interval,
			Log:            deps.Log,
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		b, err := projects.NewBase(base)
		if err != nil {
			return nil, fmt.Errorf("--base (%s): %w", projectsBaseEnv, err)
		}
		allow, err := egress.ParsePrefixes(gitAllow...)
		if err != nil {
			return nil, fmt.Errorf("--egress-allow (TOOLMESH_PROJECTS_EGRESS_ALLOW): %w", err)
		}
		if len(allow) > 0 {
			deps.Log.Warn("egress.allow", "setting", "TOOLMESH_PROJECTS_EGRESS_ALLOW", "allowed", cli.JoinPrefixes(allow), "message", "git clones may reach these internal addresses")
		}
		deps.Log.Info("projects.base", "base", b.Dir(), "clones", filepath.Join(deps.DataDir, clonesDir))
		cfg.Base, cfg.Git.Egress = b, egress.Policy{Allow: allow}
		return buildProjects(ctx, db, deps, cfg)
	}
}

func buildProjects(ctx context.Context, db *sqldb.DB, deps serveDeps, cfg projects.Config) ([]server.Service, error) {
	st, err := projectsstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	return []server.Service{projects.New(st, projects.NewTemporalEngine(deps.Temporal), cfg).Registration()}, nil
}

// registerProjects runs the health workflow of projects; its activity
// calls ProjectsService.RecordHealth as the worker. A snapshot may take
// minutes (a clone refreshed, go vet): the activity's own timeout bounds
// the call, not --call-timeout.
func registerProjects(w worker.Worker, deps workerDeps) error {
	url := deps.Services[projectsv1connect.ProjectsServiceName]
	if url == "" {
		return errors.New("worker projects needs the projects service (--service projects=http://...)")
	}
	projectsworker.Register(w, &projectsworker.Activities{
		// No deadline of the worker's: the activity's own timeout bounds
		// the call.
		Projects: meshclient.New(meshclient.Config{HTTP: deps.HTTPClient, Signer: deps.Mesh, Telemetry: deps.Telemetry},
			projectsv1connect.NewProjectsServiceClient, url),
		Self: workerSelf("projects"),
	})
	return nil
}
