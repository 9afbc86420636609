package testingsvc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// Jobs implements toolmesh.testing.v1.TestingJobsService: jobs that run
// until the test ends them (End) or their agent cancels them. An agent
// sees only its own jobs.
type Jobs struct {
	testingv1connect.UnimplementedTestingJobsServiceHandler
	mu      sync.Mutex
	jobs    map[string]*testingv1.Job
	agents  map[string]string
	changed chan struct{} // closed and replaced on every change
}

// NewJobs returns a service without jobs.
func NewJobs() *Jobs {
	return &Jobs{jobs: map[string]*testingv1.Job{}, agents: map[string]string{}, changed: make(chan struct{})}
}

// Server describes the service.
func (j *Jobs) Server() server.Service {
	return server.Register(testingv1connect.TestingJobsServiceName, testingv1connect.TestingJobsServiceHandler(j),
		testingv1connect.NewTestingJobsServiceHandler, nil)
}

// StartJob starts a job and waits for it at most wait_seconds.
func (j *Jobs) StartJob(ctx context.Context, req *testingv1.StartJobRequest) (*testingv1.StartJobResponse, error) {
	agent := mesh.FromContext(ctx).Caller.Agent
	j.mu.Lock()
	id := fmt.Sprintf("job_%d", len(j.jobs)+1)
	job := &testingv1.Job{JobId: id, TaskId: "job/" + agent + "/" + id, Name: req.GetName(),
		Status: testingv1.JobStatus_JOB_STATUS_RUNNING, CreateTime: timestamppb.Now(), Attempts: 1}
	j.jobs[id], j.agents[id] = job, agent
	j.mu.Unlock()
	wait := time.NewTimer(time.Duration(req.GetWaitSeconds()) * time.Second)
	defer wait.Stop()
	for {
		j.mu.Lock()
		out, changed := proto.CloneOf(job), j.changed
		j.mu.Unlock()
		if out.GetStatus() != testingv1.JobStatus_JOB_STATUS_RUNNING {
			return &testingv1.StartJobResponse{Job: out}, nil
		}
		select {
		case <-changed:
		case <-wait.C:
			return &testingv1.StartJobResponse{Job: out}, nil
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// GetJob shows one of the caller's jobs.
func (j *Jobs) GetJob(ctx context.Context, req *testingv1.GetJobRequest) (*testingv1.GetJobResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, err := j.own(ctx, req.GetJobId())
	if err != nil {
		return nil, err
	}
	return &testingv1.GetJobResponse{Job: proto.CloneOf(job)}, nil
}

// CancelJob cancels one of the caller's jobs that still runs.
func (j *Jobs) CancelJob(ctx context.Context, req *testingv1.CancelJobRequest) (*testingv1.CancelJobResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, err := j.own(ctx, req.GetJobId())
	if err != nil {
		return nil, err
	}
	if job.GetStatus() == testingv1.JobStatus_JOB_STATUS_RUNNING {
		j.end(job, testingv1.JobStatus_JOB_STATUS_CANCELLED, "")
	}
	return &testingv1.CancelJobResponse{Job: proto.CloneOf(job)}, nil
}

// End ends a running job as the test says: done with result, or failed
// with it as the reason.
func (j *Jobs) End(id string, failed bool, result string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	status := testingv1.JobStatus_JOB_STATUS_DONE
	if failed {
		status = testingv1.JobStatus_JOB_STATUS_FAILED
	}
	if job := j.jobs[id]; job != nil && job.GetStatus() == testingv1.JobStatus_JOB_STATUS_RUNNING {
		j.end(job, status, result)
	}
}

func (j *Jobs) end(job *testingv1.Job, status testingv1.JobStatus, result string) {
	job.Status, job.Result, job.EndTime = status, result, timestamppb.Now()
	close(j.changed)
	j.changed = make(chan struct{})
}

// own returns the caller's job id (j.mu held).
func (j *Jobs) own(ctx context.Context, id string) (*testingv1.Job, error) {
	job := j.jobs[id]
	if job == nil || j.agents[id] != mesh.FromContext(ctx).Caller.Agent {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("job %s not found", id))
	}
	return job, nil
}
