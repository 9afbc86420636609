package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// start returns a function that serves the tasks service with cfg (daily
// cap and clock) on a fresh SQLite store.
func start(cfg tasks.Config) func(t *testing.T) *servertest.Server {
	return func(t *testing.T) *servertest.Server {
		t.Helper()
		st, err := tasksstore.Open(t.Context(), sqldbtest.SQLite().Open(t))
		if err != nil {
			t.Fatal(err)
		}
		return servertest.Start(t, tasks.New(st, cfg).Registration())
	}
}

func TestCreateGetListWithPagination(t *testing.T) {
	// Each task is created a millisecond after the one before: "newest
	// first" orders by creation time, and tasks created in the same
	// millisecond have no order among them but their ids'.
	now := clock.Stepping(time.Now(), time.Millisecond)
	servertest.EachProtocol(t, start(tasks.Config{Now: now}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		var created []*tasksv1.Task
		for i := range 5 {
			res, err := c.Create(ctx, &tasksv1.CreateRequest{Description: fmt.Sprintf("task %d", i)})
			if err != nil {
				t.Fatalf("Create %d: %v", i, err)
			}
			created = append(created, res.GetTask())
		}
		first := created[0]
		if first.GetStatus() != tasksv1.TaskStatus_TASK_STATUS_PENDING || first.GetAgentId() != "agent-a" ||
			first.GetPriority() != tasksv1.TaskPriority_TASK_PRIORITY_NORMAL {
			t.Errorf("new task = %v, want pending, normal priority, owned by agent-a", first)
		}

		got, err := c.Get(ctx, &tasksv1.GetRequest{TaskId: first.GetId()})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(first, got.GetTask(), protocmp.Transform()); diff != "" {
			t.Errorf("Get returned a different task than Create (-create +get):\n%s", diff)
		}

		page1, err := c.List(ctx, &tasksv1.ListRequest{Limit: 2})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		wantIDs := []string{created[4].GetId(), created[3].GetId()}
		if diff := cmp.Diff(wantIDs, prototest.IDs(page1.GetTasks())); diff != "" {
			t.Errorf("first page is not the two newest tasks (-want +got):\n%s", diff)
		}
		next := int32(2)
		if diff := cmp.Diff(&pagev1.Page{Offset: 0, Limit: 2, Total: 5, NextOffset: &next}, page1.GetPage(), protocmp.Transform()); diff != "" {
			t.Errorf("first page (-want +got):\n%s", diff)
		}
		last, err := c.List(ctx, &tasksv1.ListRequest{Offset: 4, Limit: 2})
		if err != nil {
			t.Fatalf("List last page: %v", err)
		}
		if diff := cmp.Diff([]string{created[0].GetId()}, prototest.IDs(last.GetTasks())); diff != "" {
			t.Errorf("last page (-want +got):\n%s", diff)
		}
		if last.GetPage().NextOffset != nil {
			t.Errorf("last page has next_offset %d, want none", last.GetPage().GetNextOffset())
		}
		all, err := c.List(ctx, &tasksv1.ListRequest{})
		if err != nil {
			t.Fatalf("List default: %v", err)
		}
		if all.GetPage().GetLimit() != 50 || len(all.GetTasks()) != 5 {
			t.Errorf("default List: limit %d with %d tasks, want limit 50 with 5", all.GetPage().GetLimit(), len(all.GetTasks()))
		}

		other := servertest.As(context.Background(), "agent-b")
		if _, err := c.Get(other, &tasksv1.GetRequest{TaskId: first.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Get: code %v, want not_found", connect.CodeOf(err))
		}
		if res, err := c.List(other, &tasksv1.ListRequest{}); err != nil || res.GetPage().GetTotal() != 0 {
			t.Errorf("another agent lists %d tasks (err %v), want 0", res.GetPage().GetTotal(), err)
		}
	})
}

// A task may name one of its agent's projects; tasks_list keeps the tasks
// of one project. The id is checked for its shape only (docs/projects.md
// says why tasks does not ask the projects service).
func TestTasksOfAProject(t *testing.T) {
	servertest.EachProtocol(t, start(tasks.Config{Now: clock.Stepping(time.Now(), time.Millisecond)}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		const web, api = "prj_01hzy3d5q8w9x7v6t5s4r3p2n1", "prj_01hzy3d5q8w9x7v6t5s4r3p2n2"
		var ids []string
		for i, project := range []string{web, "", api, web} {
			res, err := c.Create(ctx, &tasksv1.CreateRequest{Description: fmt.Sprintf("task %d", i), ProjectId: project})
			if err != nil {
				t.Fatalf("Create %d: %v", i, err)
			}
			if res.GetTask().GetProjectId() != project {
				t.Errorf("task %d has project %q, want %q", i, res.GetTask().GetProjectId(), project)
			}
			ids = append(ids, res.GetTask().GetId())
		}
		got, err := c.Get(ctx, &tasksv1.GetRequest{TaskId: ids[0]})
		if err != nil || got.GetTask().GetProjectId() != web {
			t.Errorf("Get = %v, %v; want the task of project %s", got.GetTask(), err, web)
		}
		for _, tc := range []struct {
			project string
			want    []string
		}{
			{web, []string{ids[3], ids[0]}},
			{api, []string{ids[2]}},
			{"", []string{ids[3], ids[2], ids[1], ids[0]}},
			{"prj_01hzy3d5q8w9x7v6t5s4r3p2n3", []string{}},
		} {
			res, err := c.List(ctx, &tasksv1.ListRequest{ProjectId: tc.project})
			if err != nil {
				t.Fatalf("List(project %q): %v", tc.project, err)
			}
			if diff := cmp.Diff(tc.want, prototest.IDs(res.GetTasks())); diff != "" || res.GetPage().GetTotal() != int32(len(tc.want)) {
				t.Errorf("List(project %q): total %d (-want +got):\n%s", tc.project, res.GetPage().GetTotal(), diff)
			}
		}
		if res, err := c.List(servertest.As(context.Background(), "agent-b"), &tasksv1.ListRequest{ProjectId: web}); err != nil || len(res.GetTasks()) != 0 {
			t.Errorf("another agent lists %v (err %v) of project %s, want none", res.GetTasks(), err, web)
		}
		for _, bad := range []string{"web", "prj_SHOUT", "tsk_01hzy3d5q8w9x7v6t5s4r3p2n1"} {
			if _, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "x", ProjectId: bad}); servertest.Code(t, err) != connect.CodeInvalidArgument {
				t.Errorf("Create with project %q: %v, want invalid_argument", bad, err)
			}
			if _, err := c.List(ctx, &tasksv1.ListRequest{ProjectId: bad}); servertest.Code(t, err) != connect.CodeInvalidArgument {
				t.Errorf("List of project %q: %v, want invalid_argument", bad, err)
			}
		}
	})
}

func TestStatusMachine(t *testing.T) {
	servertest.EachProtocol(t, start(tasks.Config{}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		newTask := func() string {
			res, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "work"})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetTask().GetId()
		}
		move := func(id string, to tasksv1.TaskStatus, result string) (*tasksv1.Task, error) {
			res, err := c.UpdateStatus(ctx, &tasksv1.UpdateStatusRequest{TaskId: id, Status: to, Result: result})
			return res.GetTask(), err
		}

		id := newTask()
		if _, err := move(id, tasksv1.TaskStatus_TASK_STATUS_RUNNING, ""); err != nil {
			t.Fatalf("pending -> running: %v", err)
		}
		done, err := move(id, tasksv1.TaskStatus_TASK_STATUS_COMPLETED, "all good")
		if err != nil {
			t.Fatalf("running -> completed: %v", err)
		}
		if done.GetStatus() != tasksv1.TaskStatus_TASK_STATUS_COMPLETED || done.GetResult() != "all good" {
			t.Errorf("completed task = %v, want status completed with result", done)
		}
		_, err = move(id, tasksv1.TaskStatus_TASK_STATUS_RUNNING, "")
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("completed -> running: code %v, want failed_precondition", connect.CodeOf(err))
		}
		if !strings.Contains(err.Error(), "cannot move from completed to running") {
			t.Errorf("completed -> running: message %q does not say which move was refused", err)
		}
		if _, err := c.Cancel(ctx, &tasksv1.CancelRequest{TaskId: id}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("cancel completed task: code %v, want failed_precondition", connect.CodeOf(err))
		}

		id2 := newTask()
		if _, err := move(id2, tasksv1.TaskStatus_TASK_STATUS_FAILED, ""); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("pending -> failed: code %v, want failed_precondition", connect.CodeOf(err))
		}
		res, err := c.Cancel(ctx, &tasksv1.CancelRequest{TaskId: id2, Reason: "not needed"})
		if err != nil {
			t.Fatalf("cancel pending task: %v", err)
		}
		if res.GetTask().GetStatus() != tasksv1.TaskStatus_TASK_STATUS_CANCELLED || res.GetTask().GetCancelReason() != "not needed" {
			t.Errorf("cancelled task = %v, want cancelled with reason", res.GetTask())
		}
		got, err := c.Get(ctx, &tasksv1.GetRequest{TaskId: id2})
		if err != nil || got.GetTask().GetStatus() != tasksv1.TaskStatus_TASK_STATUS_CANCELLED {
			t.Errorf("after cancel Get = %v (err %v), want the cancelled task", got.GetTask(), err)
		}

		missing := "tsk_00000000000000000000000000"
		if _, err := c.Cancel(ctx, &tasksv1.CancelRequest{TaskId: missing}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("cancel unknown task: code %v, want not_found", connect.CodeOf(err))
		}
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	servertest.EachProtocol(t, start(tasks.Config{}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		cases := []struct {
			name string
			call func() error
			want map[string][]string
		}{
			{"empty description", func() error {
				_, err := c.Create(ctx, &tasksv1.CreateRequest{})
				return err
			}, map[string][]string{"description": {"required"}}},
			{"blank description", func() error {
				_, err := c.Create(ctx, &tasksv1.CreateRequest{Description: " \t\n\u00a0\u3000"})
				if err != nil && !strings.Contains(err.Error(), "description: must not be empty or only whitespace") {
					t.Errorf("a blank description is refused with %q, want it to say the description must not be only whitespace", err)
				}
				return err
			}, map[string][]string{"description": {"string.non_blank"}}},
			{"too long description", func() error {
				_, err := c.Create(ctx, &tasksv1.CreateRequest{Description: strings.Repeat("x", 4001)})
				return err
			}, map[string][]string{"description": {"string.max_len"}}},
			{"undefined priority", func() error {
				_, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "x", Priority: 42})
				return err
			}, map[string][]string{"priority": {"enum.defined_only"}}},
			{"malformed task id", func() error {
				_, err := c.Get(ctx, &tasksv1.GetRequest{TaskId: "task-1"})
				return err
			}, map[string][]string{"task_id": {"string.pattern"}}},
			{"limit over the bound", func() error {
				_, err := c.List(ctx, &tasksv1.ListRequest{Limit: 201})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"negative offset", func() error {
				_, err := c.List(ctx, &tasksv1.ListRequest{Offset: -1})
				return err
			}, map[string][]string{"offset": {"int32.gte_lte"}}},
			{"move back to pending", func() error {
				_, err := c.UpdateStatus(ctx, &tasksv1.UpdateStatusRequest{TaskId: "tsk_00000000000000000000000000", Status: tasksv1.TaskStatus_TASK_STATUS_PENDING})
				return err
			}, map[string][]string{"status": {"enum.not_in"}}},
			{"result while running", func() error {
				_, err := c.UpdateStatus(ctx, &tasksv1.UpdateStatusRequest{TaskId: "tsk_00000000000000000000000000", Status: tasksv1.TaskStatus_TASK_STATUS_RUNNING, Result: "early"})
				return err
			}, map[string][]string{"": {"result_only_when_finished"}}},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, servertest.Violations(t, tc.call())); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		if res, err := c.List(ctx, &tasksv1.ListRequest{}); err != nil || res.GetPage().GetTotal() != 0 {
			t.Errorf("rejected requests stored something: %d tasks (err %v)", res.GetPage().GetTotal(), err)
		}
	})
}

func TestDailyCap(t *testing.T) {
	day := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	now := day
	servertest.EachProtocol(t, start(tasks.Config{MaxPerDay: 3, Now: func() time.Time { return now }}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		now = day
		ctx := servertest.As(context.Background(), "agent-a")
		for i := range 3 {
			if _, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "x"}); err != nil {
				t.Fatalf("create %d of 3: %v", i+1, err)
			}
		}
		_, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "one too many"})
		if servertest.Code(t, err) != connect.CodeResourceExhausted {
			t.Fatalf("4th create: code %v, want resource_exhausted", connect.CodeOf(err))
		}
		var ce *connect.Error
		errors.As(err, &ce)
		if got, want := ce.Message(), "Rate limit exceeded: maximum 3 work tasks per day."; got != want {
			t.Errorf("4th create message = %q, want %q", got, want)
		}
		if _, err := c.Create(servertest.As(context.Background(), "agent-b"), &tasksv1.CreateRequest{Description: "x"}); err != nil {
			t.Errorf("another agent is capped too: %v", err)
		}
		now = day.Add(2 * time.Minute) // the next UTC day
		if _, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "tomorrow"}); err != nil {
			t.Errorf("create on the next UTC day: %v", err)
		}
		res, err := c.List(ctx, &tasksv1.ListRequest{})
		if err != nil || res.GetPage().GetTotal() != 4 {
			t.Errorf("agent-a has %d tasks (err %v), want 4: the refused create must store nothing", res.GetPage().GetTotal(), err)
		}
	})
}

func TestIdempotencyKeyRule(t *testing.T) {
	servertest.EachProtocol(t, start(tasks.Config{}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		servertest.KeyRule(t, ctx, "k1", func(ctx context.Context, variant int) (string, error) {
			res, err := c.Create(ctx, &tasksv1.CreateRequest{Description: fmt.Sprintf("request %d", variant)})
			return res.GetTask().GetId(), err
		})
		// Another key is another task; another agent's k1 is its own.
		if _, err := c.Create(withKey(ctx, "k2"), &tasksv1.CreateRequest{Description: "request 1"}); err != nil {
			t.Error(err)
		}
		if _, err := c.Create(withKey(servertest.As(context.Background(), "agent-b"), "k1"), &tasksv1.CreateRequest{Description: "request 1"}); err != nil {
			t.Error(err)
		}
		res, _ := c.List(ctx, &tasksv1.ListRequest{})
		if res.GetPage().GetTotal() != 2 {
			t.Errorf("agent-a has %d tasks, want 2", res.GetPage().GetTotal())
		}
	})
}

func TestCallWithoutIdentityIsUnauthenticated(t *testing.T) {
	servertest.EachProtocol(t, start(tasks.Config{}), tasksv1connect.NewTasksServiceClient, func(t *testing.T, c tasksv1connect.TasksServiceClient) {
		_, err := c.Create(context.Background(), &tasksv1.CreateRequest{Description: "x"})
		if servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("code %v, want unauthenticated", connect.CodeOf(err))
		}
	})
}

func TestServesReflectionHealthAndREST(t *testing.T) {
	srv := start(tasks.Config{})(t)
	ctx := context.Background()

	stream := grpcreflect.NewClient(srv.Client(), srv.URL, connect.WithGRPC()).NewStream(ctx)
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("reflection ListServices: %v", err)
	}
	found := false
	for _, n := range names {
		found = found || n == tasksv1connect.TasksServiceName
	}
	if !found {
		t.Errorf("reflection lists %v, want %s among them", names, tasksv1connect.TasksServiceName)
	}
	stream.Close()

	health := grpchealth.NewClient(srv.Client(), srv.URL, connect.WithGRPC())
	res, err := health.Check(ctx, &grpchealth.CheckRequest{Service: tasksv1connect.TasksServiceName})
	if err != nil || res.Status != grpchealth.StatusServing {
		t.Errorf("health = %v (err %v), want SERVING", res, err)
	}

	as := servertest.Bearer("agent-rest")
	if code, out := srv.REST(t, as, http.MethodPost, "/v1/tasks", `{"description":"from REST"}`); code != http.StatusOK ||
		!strings.Contains(out, `"description":"from REST"`) || !strings.Contains(out, `"agent_id":"agent-rest"`) {
		t.Errorf("POST /v1/tasks = %d %s, want 200 with the created task", code, out)
	}
	if code, out := srv.REST(t, as, http.MethodPost, "/v1/tasks", `{"description":""}`); code != http.StatusBadRequest || !strings.Contains(out, "description") {
		t.Errorf("POST /v1/tasks with empty description = %d %s, want 400 naming description", code, out)
	}
}

func withKey(ctx context.Context, key string) context.Context {
	return servertest.WithIdempotencyKey(ctx, key)
}
