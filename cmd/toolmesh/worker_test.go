package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	schedulesworker "github.com/toolmesh/toolmesh/workers/schedules"
)

// activityWorker registers a queue's activities in a test activity
// environment and drops its workflows.
type activityWorker struct {
	worker.Worker
	env *testsuite.TestActivityEnvironment
}

func (w activityWorker) RegisterActivityWithOptions(a any, o activity.RegisterOptions) {
	w.env.RegisterActivityWithOptions(a, o)
}

func (activityWorker) RegisterWorkflowWithOptions(any, workflow.RegisterOptions) {}

// TestWorkerCallTimeoutReachesSchedules runs a schedule's tool call
// against a service that answers after 3s: with the worker's call timeout
// set to 100ms (by flag or by variable) the call ends deadline_exceeded; with
// the 15s default it would get the service's answer.
func TestWorkerCallTimeoutReachesSchedules(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
			http.Error(w, "late", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(slow.Close)
	url := slow.URL

	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := mesh.NewSigner(key, "toolmesh-worker-schedules")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{name: "flag", args: []string{"--call-timeout", "100ms"}},
		{name: "variable", env: map[string]string{"TOOLMESH_CALL_TIMEOUT": "100ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			s := cli.NewConfig("worker schedules", getenv, io.Discard)
			c := bindWorker(s, getenv, "schedules", workerQueues["schedules"])
			if err := s.Parse(append(tc.args, "--service", "schedules="+url, "--service", "tasks="+url)); err != nil {
				t.Fatal(err)
			}
			urls, err := topology.ServiceURLs(c.services)
			if err != nil {
				t.Fatal(err)
			}
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			deps := workerDeps{Mesh: signer, MeshKey: key, Services: urls, HTTPClient: slow.Client(), Getenv: getenv,
				Log: slog.New(slog.DiscardHandler), CallTimeout: c.callTimeout, Telemetry: telemetry.Providers{}}
			if err := registerSchedules(activityWorker{env: env}, deps); err != nil {
				t.Fatal(err)
			}
			args, err := structpb.NewStruct(map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = env.ExecuteActivity(schedulesworker.ActivityCallTool, &schedulesv1.CallToolInput{
				Run:            &schedulesv1.RunInput{ScheduleId: "s1", AgentId: "a1", Tool: "tasks_list", Arguments: args},
				IdempotencyKey: "run-1",
			})
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != toolcall.CodeDeadlineExceeded {
				t.Errorf("the run's tool call ended with %v; want %s after the worker's 100ms call timeout", err, toolcall.CodeDeadlineExceeded)
			}
		})
	}
}

func TestRetiredSchedulesCallTimeout(t *testing.T) {
	err := run(t.Context(), []string{"worker", "schedules"}, func(k string) string {
		return map[string]string{"TOOLMESH_SCHEDULES_CALL_TIMEOUT": "5s"}[k]
	}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOOLMESH_SCHEDULES_CALL_TIMEOUT is no longer read: use TOOLMESH_CALL_TIMEOUT") {
		t.Errorf("worker schedules with the retired variable: %v", err)
	}
}
