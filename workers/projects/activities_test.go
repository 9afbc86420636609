package projects_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
	"github.com/toolmesh/toolmesh/workers/projects"
)

// fakeProjects is a ProjectsService whose RecordHealth remembers who asked
// for what, and answers with the status the test sets.
type fakeProjects struct {
	projectsv1connect.UnimplementedProjectsServiceHandler
	mu      sync.Mutex
	keys    []string
	callers []mesh.Call
	status  projectsv1.ProjectStatus
	err     error
	next    time.Duration
}

func (f *fakeProjects) RecordHealth(ctx context.Context, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, req.GetKey())
	f.callers = append(f.callers, mesh.FromContext(ctx))
	if f.err != nil {
		return nil, f.err
	}
	res := &projectsv1.RecordHealthResponse{Status: f.status, NextAfter: durationpb.New(f.next)}
	if f.status == projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE {
		res.Snapshot = &projectsv1.HealthSnapshot{ProjectId: req.GetProjectId(), Files: int64(len(f.keys))}
	}
	return res, nil
}

func (f *fakeProjects) set(status projectsv1.ProjectStatus, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.err = status, err
}

func (f *fakeProjects) snapshots() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

var self = mesh.Caller{Subject: "toolmesh-worker-projects", Agent: "toolmesh-worker-projects", Roles: []string{mesh.RoleService}}

func startFakeProjects(t *testing.T, next time.Duration) (*fakeProjects, *projects.Activities) {
	t.Helper()
	f := &fakeProjects{status: projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, next: next}
	srv := servertest.Start(t, server.Register(projectsv1connect.ProjectsServiceName, projectsv1connect.ProjectsServiceHandler(f), projectsv1connect.NewProjectsServiceHandler, nil))
	return f, &projects.Activities{
		Projects: projectsv1connect.NewProjectsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...),
		Self:     self,
	}
}

// The activity calls as the worker, with the snapshot's key as the call's
// idempotency key, and sorts the service's refusals.
func TestRecordHealthActsAsTheWorker(t *testing.T) {
	f, acts := startFakeProjects(t, time.Hour)
	req := &projectsv1.RecordHealthRequest{ProjectId: projectID, Key: "project-health/agent-a/" + projectID + "/1"}
	res, err := acts.RecordHealth(context.Background(), req)
	if err != nil || res.GetSnapshot() == nil || res.GetNextAfter().AsDuration() != time.Hour {
		t.Fatalf("RecordHealth = %v, %v", res, err)
	}
	if c := f.callers[0]; c.Caller.Agent != self.Agent || !c.Caller.HasRole(mesh.RoleService) || c.IdempotencyKey != req.GetKey() {
		t.Errorf("called as %+v, want the worker with the snapshot's key", c)
	}
	for _, tc := range []struct {
		err       error
		errorType string
	}{
		{connect.NewError(connect.CodeNotFound, errors.New("project not found")), projects.ErrProjectGone},
		{connect.NewError(connect.CodePermissionDenied, errors.New("no")), "ProjectsServiceRefused"},
		{connect.NewError(connect.CodeUnavailable, errors.New("down")), ""},
	} {
		f.set(projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE, tc.err)
		_, err := acts.RecordHealth(context.Background(), req)
		var appErr *temporal.ApplicationError
		got := ""
		if errors.As(err, &appErr) && appErr.NonRetryable() {
			got = appErr.Type()
		}
		if err == nil || got != tc.errorType {
			t.Errorf("%v: error %v, non-retryable type %q; want %q", tc.err, err, got, tc.errorType)
		}
	}
	if _, err := (&projects.Activities{}).RecordHealth(context.Background(), req); err == nil {
		t.Error("activities without a client answered")
	}
}
