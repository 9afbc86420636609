package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// schedulesMesh is a real Temporal dev server, the tasks and schedules
// services as `toolmesh serve` builds them, and the schedules worker as
// `toolmesh worker schedules` registers it, in process. Tasks are reached
// through a proxy that loses the answer to the first call of every
// idempotency key (when lossy), so every run's tool call is retried.
type schedulesMesh struct {
	dev       *temporaltest.Server
	temporal  client.Client
	schedules schedulesv1connect.SchedulesServiceClient
	tasks     tasksv1connect.TasksServiceClient
	lossy     *lossyProxy
	// notices are what the owner service's webhook channel received.
	notices *webhookInbox
	// schedulesURL and tasksURL are where the services listen.
	schedulesURL, tasksURL string
}

// webhookInbox is a webhook channel's receiving end.
type webhookInbox struct {
	mu       sync.Mutex
	payloads []*ownerv1.WebhookPayload
}

func (in *webhookInbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p ownerv1.WebhookPayload
	if err := protojson.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	in.mu.Lock()
	in.payloads = append(in.payloads, &p)
	in.mu.Unlock()
}

// about returns the notices whose message mentions s.
func (in *webhookInbox) about(s string) []*ownerv1.WebhookPayload {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []*ownerv1.WebhookPayload
	for _, p := range in.payloads {
		if strings.Contains(p.GetMessage(), s) {
			out = append(out, p)
		}
	}
	return out
}

func startSchedulesMesh(t testing.TB, minInterval string, lossy bool) *schedulesMesh {
	t.Helper()
	ctx := context.Background()
	m := &schedulesMesh{dev: temporaltest.Start(t)}
	tc, err := temporalclient.Dial(ctx, temporalclient.Config{HostPort: m.dev.HostPort, Namespace: m.dev.Namespace}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	m.temporal = tc
	open := func(name string) *sqldb.DB {
		db, err := sqldb.Open(ctx, filepath.Join(t.TempDir(), name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}

	tst, err := tasksstore.Open(ctx, open("tasks"))
	if err != nil {
		t.Fatal(err)
	}
	tasksSrv := servertest.Start(t, tasks.New(tst, tasks.Config{}).Registration())
	tasksURL := tasksSrv.URL
	if lossy {
		m.lossy = newLossyProxy(t, tasksSrv.URL, tasksv1connect.TasksServiceCreateProcedure)
		tasksURL = m.lossy.URL
	}

	env := map[string]string{"TOOLMESH_SCHEDULES_MIN_INTERVAL": minInterval, ownerWebhookAllowEnv: "127.0.0.1"}
	getenv := func(k string) string { return env[k] }

	// The owner service, with a webhook channel: approval requests reach
	// the owner through it.
	ownerSvc, err := domainBuild(t, "owner", getenv)(ctx, open("owner"), serveDeps{Getenv: getenv, Log: logging.Discard(), Temporal: tc})
	if err != nil {
		t.Fatal(err)
	}
	ownerSrv := servertest.Start(t, ownerSvc...)
	m.notices = &webhookInbox{}
	hook := httptest.NewServer(m.notices)
	t.Cleanup(hook.Close)
	ownerClient := ownerv1connect.NewOwnerServiceClient(ownerSrv.Client(), ownerSrv.URL, servertest.ClientOptions(nil)...)
	if _, err := ownerClient.CreateChannel(ownerCtx(ctx), &ownerv1.CreateChannelRequest{
		Name: "inbox", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK, WebhookUrl: hook.URL,
	}); err != nil {
		t.Fatal(err)
	}

	svc, err := domainBuild(t, "schedules", getenv)(ctx, open("schedules"), serveDeps{Getenv: getenv, Log: logging.Discard(), Temporal: tc})
	if err != nil {
		t.Fatal(err)
	}
	schedSrv := servertest.Start(t, svc...)

	w := worker.New(tc, "schedules", worker.Options{})
	if err := workerQueues["schedules"].register(w, workerDeps{
		Temporal: tc, Mesh: servertest.MeshSigner(), HTTPClient: servertest.HTTPClient(),
		Services: map[string]string{
			tasksv1connect.TasksServiceName:         tasksURL,
			schedulesv1connect.SchedulesServiceName: schedSrv.URL,
			ownerv1connect.OwnerServiceName:         ownerSrv.URL,
		},
		Getenv: func(string) string { return "" }, Log: logging.Discard(),
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	m.schedulesURL, m.tasksURL = schedSrv.URL, tasksSrv.URL
	m.schedules = schedulesv1connect.NewSchedulesServiceClient(schedSrv.Client(), schedSrv.URL, servertest.ClientOptions(nil)...)
	m.tasks = tasksv1connect.NewTasksServiceClient(tasksSrv.Client(), tasksSrv.URL, servertest.ClientOptions(nil)...)
	return m
}

func ownerCtx(ctx context.Context) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: "owner-1", Agent: "local", Roles: []string{mesh.RoleOwner}}})
}

func createTickSchedule(t testing.TB, m *schedulesMesh, agent, description string, intervalSeconds int32) *schedulesv1.Schedule {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"description": description})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.schedules.Create(servertest.As(context.Background(), agent), &schedulesv1.CreateRequest{
		IntervalSeconds: intervalSeconds, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args}, Description: description,
	})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	return res.GetSchedule()
}

func executions(t testing.TB, m *schedulesMesh, agent, id string) []*schedulesv1.Execution {
	t.Helper()
	res, err := m.schedules.Executions(servertest.As(context.Background(), agent), &schedulesv1.ExecutionsRequest{ScheduleId: id, Limit: 200})
	if err != nil {
		t.Fatalf("executions: %v", err)
	}
	return res.GetExecutions()
}

func ended(list []*schedulesv1.Execution) []*schedulesv1.Execution {
	var out []*schedulesv1.Execution
	for _, e := range list {
		if e.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			out = append(out, e)
		}
	}
	return out
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// afterDueTime returns once the schedule's second due time has passed —
// the moment it would have run twice had it been active — and how many
// actions Temporal says it took (0 when its Temporal Schedule is gone).
// What a test reads after it is what a run would have left.
func afterDueTime(t testing.TB, m *schedulesMesh, sch *schedulesv1.Schedule) int {
	t.Helper()
	due := sch.GetCreateTime().AsTime().Add(2 * time.Duration(sch.GetIntervalSeconds()) * time.Second)
	eventually(t, time.Minute, "the schedule's second due time passed", func() bool { return time.Now().After(due) })
	d, err := m.temporal.ScheduleClient().GetHandle(context.Background(), sch.GetTemporalScheduleId()).Describe(context.Background())
	if _, gone := err.(*serviceerror.NotFound); gone {
		return 0
	}
	if err != nil {
		t.Fatalf("describe the schedule's Temporal Schedule: %v", err)
	}
	return d.Info.NumActions
}

// tasksTitled returns the ids of the agent's tasks with that description.
func tasksTitled(t testing.TB, m *schedulesMesh, agent, description string) []string {
	t.Helper()
	res, err := m.tasks.List(servertest.As(context.Background(), agent), &tasksv1.ListRequest{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range res.GetTasks() {
		if task.GetDescription() == description {
			ids = append(ids, task.GetId())
		}
	}
	sort.Strings(ids)
	return ids
}

func TestSchedulesOnTemporal(t *testing.T) {
	m := startSchedulesMesh(t, "1s", true)
	ctx := context.Background()

	t.Run("approved schedule runs each due time exactly once", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-a", "tick", 1)
		// Pending approval: a due time passes, and nothing runs.
		if n := afterDueTime(t, m, sch); n != 0 {
			t.Fatalf("Temporal took %d actions of the schedule before approval, want none", n)
		}
		if got := executions(t, m, "agent-a", sch.GetId()); len(got) != 0 {
			t.Fatalf("%d runs before approval, want none", len(got))
		}
		approved := time.Now()
		res, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), Reason: "ok", SpecHash: sch.GetSpecHash()})
		if err != nil {
			t.Fatalf("approve: %v", err)
		}
		approveTook := time.Since(approved)
		if res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE {
			t.Fatalf("approved schedule is %v", res.GetSchedule().GetStatus())
		}
		var first time.Time
		eventually(t, 20*time.Second, "first run recorded", func() bool {
			if len(ended(executions(t, m, "agent-a", sch.GetId()))) > 0 {
				first = time.Now()
				return true
			}
			return false
		})
		eventually(t, 30*time.Second, "four runs recorded", func() bool { return len(ended(executions(t, m, "agent-a", sch.GetId()))) >= 4 })
		if _, err := m.schedules.Pause(servertest.As(ctx, "agent-a"), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		// Let a run that started before the pause finish.
		eventually(t, 30*time.Second, "runs in flight ended", func() bool {
			all := executions(t, m, "agent-a", sch.GetId())
			return len(ended(all)) == len(all)
		})
		runs := executions(t, m, "agent-a", sch.GetId())

		var created []string
		for _, e := range runs {
			env := e.GetResult().AsMap()
			if e.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED || env["status"] != "ok" || e.GetAttempts() != 2 {
				t.Errorf("run %s: %v after %d attempts, envelope %v; want ok on the second attempt (the first answer was lost)",
					e.GetRunId(), e.GetStatus(), e.GetAttempts(), env)
				continue
			}
			if want := "schedule-run/" + sch.GetId() + "-" + e.GetScheduledTime().AsTime().UTC().Format(time.RFC3339); e.GetRunId() != want {
				t.Errorf("run id %q, want %q", e.GetRunId(), want)
			}
			if due := e.GetScheduledTime().AsTime(); due.Before(approved.Truncate(time.Second)) {
				t.Errorf("run %s was due at %s, before the approval at %s", e.GetRunId(), due, approved)
			}
			task := env["data"].(map[string]any)["task"].(map[string]any)
			created = append(created, task["id"].(string))
		}
		sort.Strings(created)
		// Exactly once: one task per run, though every run's call was made
		// twice.
		if got := tasksTitled(t, m, "agent-a", "tick"); !slices.Equal(got, created) {
			t.Errorf("tasks created %v, runs report %v: want one task per run", got, created)
		}
		if lost := m.lossy.lostAnswers(); lost != len(runs) {
			t.Errorf("%d answers lost for %d runs, want one per run", lost, len(runs))
		}
		// Operators find runs by agent, tool, kind and status.
		wantOperatorView(t, m, runs[0].GetRunId(), map[string]string{
			"ToolmeshAgent": "agent-a", "ToolmeshTool": "tasks_create", "ToolmeshKind": "schedule-run", "ToolmeshStatus": "succeeded",
		}, "Run of schedule "+sch.GetId()+": tasks_create as agent-a")
		firstRun := runs[len(runs)-1]
		t.Logf("approval-to-first-run: approve call %s; first run due %s after approval, started %s after, recorded %s after (seen by polling at %s); due-to-recorded %s",
			approveTook.Round(time.Millisecond),
			firstRun.GetScheduledTime().AsTime().Sub(approved).Round(time.Millisecond),
			firstRun.GetStartTime().AsTime().Sub(approved).Round(time.Millisecond),
			firstRun.GetEndTime().AsTime().Sub(approved).Round(time.Millisecond),
			first.Sub(approved).Round(time.Millisecond),
			firstRun.GetEndTime().AsTime().Sub(firstRun.GetScheduledTime().AsTime()).Round(time.Millisecond))
	})

	t.Run("operators see what an approval is for and how to decide", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-e", "watched tick", 3600)
		wid := sch.GetApprovalWorkflowId()
		eventually(t, 10*time.Second, "approval waiting", func() bool {
			v, err := m.temporal.QueryWorkflow(ctx, wid, "", "state")
			var st schedulesv1.ApprovalState
			return err == nil && v.Get(&st) == nil && st.GetStatus() == "waiting"
		})
		wantOperatorView(t, m, wid, map[string]string{
			"ToolmeshAgent": "agent-e", "ToolmeshTool": "schedules_create", "ToolmeshKind": "schedule-approval", "ToolmeshStatus": "waiting",
		}, "Approve schedule "+sch.GetId()+": tasks_create every 1 hour for agent-e")
		// The owner was told, through the owner service's channels, by the
		// agent that asks.
		eventually(t, 10*time.Second, "the owner's webhook got the approval request", func() bool { return len(m.notices.about(wid)) > 0 })
		if n := m.notices.about(wid); len(n) != 1 || n[0].GetAgentId() != "agent-e" ||
			n[0].GetLevel() != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING || !strings.Contains(n[0].GetMessage(), "schedules_approve") {
			t.Errorf("notices about %s = %v; want one warning from agent-e saying how to approve", wid, n)
		}
		v, err := m.temporal.QueryWorkflow(ctx, wid, "", "__temporal_workflow_metadata")
		if err != nil {
			t.Fatal(err)
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Fatal(err)
		}
		handlers := map[string]string{}
		for _, d := range append(md.GetDefinition().GetUpdateDefinitions(), md.GetDefinition().GetQueryDefinitions()...) {
			handlers[d.GetName()] = d.GetDescription()
		}
		for _, name := range []string{"approve", "deny", "state"} {
			if handlers[name] == "" {
				t.Errorf("handler %q has no description for the UI (handlers: %v)", name, handlers)
			}
		}
		if !strings.Contains(md.GetCurrentDetails(), "Waiting for the owner") {
			t.Errorf("current details %q", md.GetCurrentDetails())
		}
		if _, err := m.schedules.Deny(ownerCtx(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		wantOperatorView(t, m, wid, map[string]string{"ToolmeshStatus": "denied"}, "")
	})

	t.Run("denied schedule never runs", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-b", "denied tick", 1)
		res, err := m.schedules.Deny(ownerCtx(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId(), Reason: "no"})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DENIED {
			t.Fatalf("denied schedule is %v", res.GetSchedule().GetStatus())
		}
		_, err = m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId()).Describe(ctx)
		if _, ok := err.(*serviceerror.NotFound); !ok {
			t.Errorf("describe the denied schedule's Temporal Schedule: %v, want not found", err)
		}
		afterDueTime(t, m, sch)
		if got := executions(t, m, "agent-b", sch.GetId()); len(got) != 0 {
			t.Errorf("denied schedule ran %d times", len(got))
		}
		if got := tasksTitled(t, m, "agent-b", "denied tick"); len(got) != 0 {
			t.Errorf("denied schedule created tasks %v", got)
		}
	})

	t.Run("a schedule changed in Temporal after the ask is not approved", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-c", "changed tick", 1)
		h := m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId())
		if err := h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			in.Description.Schedule.Spec.Intervals[0].Every = 2 * time.Second
			return &client.ScheduleUpdate{Schedule: &in.Description.Schedule}, nil
		}}); err != nil {
			t.Fatal(err)
		}
		_, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "changed since the owner was asked") {
			t.Fatalf("approve after the change: %v, want failed_precondition saying it changed", err)
		}
		d, err := h.Describe(ctx)
		if err != nil || !d.Schedule.State.Paused {
			t.Errorf("after the refused approval: describe %v, paused %v; want still paused", err, d.Schedule.State.Paused)
		}
		if _, err := m.schedules.Deny(ownerCtx(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Errorf("deny after the refused approval: %v", err)
		}
	})

	t.Run("runs make only the approved call", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-f", "approved tick", 1)
		if _, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		// Someone with access to Temporal changes what the approved
		// schedule calls (no approval is asked for a change in Temporal).
		injected, _ := structpb.NewStruct(map[string]any{"description": "injected"})
		h := m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId())
		if err := h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			act := in.Description.Schedule.Action.(*client.ScheduleWorkflowAction)
			act.Args = []any{&schedulesv1.RunInput{ScheduleId: sch.GetId(), AgentId: "agent-f", Tool: "tasks_create", Arguments: injected, Depth: 1}}
			return &client.ScheduleUpdate{Schedule: &in.Description.Schedule}, nil
		}}); err != nil {
			t.Fatal(err)
		}
		// And starts a run by hand, as another agent.
		run, err := m.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "schedule-run/" + sch.GetId() + "-by-hand", TaskQueue: "schedules"},
			"schedules.run", &schedulesv1.RunInput{ScheduleId: sch.GetId(), AgentId: "agent-g", Tool: "tasks_create", Arguments: sch.GetAction().GetArguments(), Depth: 1})
		if err != nil {
			t.Fatal(err)
		}
		var byHand schedulesv1.Execution
		if err := run.Get(ctx, &byHand); err != nil {
			t.Fatal(err)
		}
		if byHand.GetDomainCode() != "conflict" {
			t.Errorf("a run by hand as another agent = %v, want refused", &byHand)
		}
		// A run may have started with the approved call before the change;
		// every run after it is refused.
		refusedRuns := func() int {
			n := 0
			for _, e := range ended(executions(t, m, "agent-f", sch.GetId())) {
				if e.GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED && e.GetDomainCode() == "conflict" {
					n++
				}
			}
			return n
		}
		eventually(t, 20*time.Second, "runs of the changed schedule refused", func() bool { return refusedRuns() >= 3 })
		if _, err := m.schedules.Delete(servertest.As(ctx, "agent-f"), &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if got := append(tasksTitled(t, m, "agent-f", "injected"), tasksTitled(t, m, "agent-g", "approved tick")...); len(got) != 0 {
			t.Errorf("refused runs created tasks %v", got)
		}
	})

	t.Run("approve with the temporal CLI", func(t *testing.T) {
		sch := createTickSchedule(t, m, "agent-d", "cli tick", 3600)
		wd, _ := os.Getwd()
		bin, err := temporaltest.Binary(wd)
		if err != nil {
			t.Fatal(err)
		}
		// The command docs/schedules.md gives.
		cmd := exec.Command(bin, "workflow", "update", "execute", "--address", m.dev.HostPort,
			"--workflow-id", sch.GetApprovalWorkflowId(), "--name", "approve", "--input", `{"note":"from the CLI"}`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("temporal workflow update execute: %v\n%s", err, out)
		}
		res, err := m.schedules.Get(servertest.As(ctx, "agent-d"), &schedulesv1.GetRequest{ScheduleId: sch.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		got := res.GetSchedule()
		if got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || got.GetDecision().GetDecidedBy() != "temporal" ||
			got.GetDecision().GetNote() != "from the CLI" {
			t.Errorf("after the CLI approval: %v, want active, decided by temporal with the note", got)
		}
		d, err := m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId()).Describe(ctx)
		if err != nil || d.Schedule.State.Paused {
			t.Fatalf("describe: %v; want unpaused", err)
		}
		if !strings.Contains(d.Schedule.State.Note, "approved by temporal") {
			t.Errorf("schedule note %q, want the approval's", d.Schedule.State.Note)
		}
		// Temporal's own next action times agree with what the service shows.
		var temporalNext []string
		for _, nt := range d.Info.NextActionTimes[:2] {
			temporalNext = append(temporalNext, nt.UTC().Format(time.RFC3339))
		}
		var serviceNext []string
		for _, nt := range got.GetNextRunTimes()[:2] {
			serviceNext = append(serviceNext, nt.AsTime().UTC().Format(time.RFC3339))
		}
		if !slices.Equal(temporalNext, serviceNext) {
			t.Errorf("next runs: Temporal %v, service %v", temporalNext, serviceNext)
		}
		if _, err := m.schedules.Delete(servertest.As(ctx, "agent-d"), &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCronPreviewMatchesTemporal checks the service's own reading of cron
// specs against Temporal's: the run times the service shows are the ones
// Temporal will use.
func TestCronPreviewMatchesTemporal(t *testing.T) {
	m := startSchedulesMesh(t, "5m", false)
	ctx := context.Background()
	for _, tc := range []struct{ cron, tz string }{
		{"*/15 * * * *", ""},
		{"0 9 * * MON-FRI", "Europe/Paris"},
		{"30 6 1,15 * *", "America/New_York"},
		{"0 0 * JAN,JUL SUN", "Asia/Kolkata"},
		{"@hourly", "Australia/Lord_Howe"},
	} {
		args, _ := structpb.NewStruct(map[string]any{"description": "cron " + tc.cron})
		res, err := m.schedules.Create(servertest.As(ctx, "agent-cron"), &schedulesv1.CreateRequest{
			Cron: tc.cron, Timezone: tc.tz, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args},
		})
		if err != nil {
			t.Fatalf("create %q: %v", tc.cron, err)
		}
		sch := res.GetSchedule()
		if _, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatalf("approve %q: %v", tc.cron, err)
		}
		d, err := m.temporal.ScheduleClient().GetHandle(ctx, sch.GetTemporalScheduleId()).Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Info.NextActionTimes) < 5 {
			t.Fatalf("%q: Temporal lists %d next times", tc.cron, len(d.Info.NextActionTimes))
		}
		pre, err := m.schedules.Preview(servertest.As(ctx, "agent-cron"), &schedulesv1.PreviewRequest{
			Cron: tc.cron, Timezone: tc.tz, Count: 5, After: res.GetSchedule().GetCreateTime(),
		})
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for i := range 5 {
			want = append(want, d.Info.NextActionTimes[i].UTC().Format(time.RFC3339))
			got = append(got, pre.GetRunTimes()[i].AsTime().UTC().Format(time.RFC3339))
		}
		if !slices.Equal(want, got) {
			t.Errorf("%q in %q: Temporal runs at %v, the service previews %v", tc.cron, tc.tz, want, got)
		}
		if _, err := m.schedules.Delete(servertest.As(ctx, "agent-cron"), &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantOperatorView checks a workflow's search attributes and static summary
// as the Temporal UI shows them.
func wantOperatorView(t *testing.T, m *schedulesMesh, workflowID string, attrs map[string]string, summary string) {
	t.Helper()
	d, err := m.temporal.DescribeWorkflow(context.Background(), workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	fields := d.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	for name, want := range attrs {
		var got string
		if p := fields[name]; p != nil {
			_ = dc.FromPayload(p, &got)
		}
		if got != want {
			t.Errorf("%s: search attribute %s = %q, want %q", workflowID, name, got, want)
		}
	}
	if summary == "" {
		return
	}
	var got string
	if p := d.RawResponse.GetExecutionConfig().GetUserMetadata().GetSummary(); p != nil {
		_ = dc.FromPayload(p, &got)
	}
	if got != summary {
		t.Errorf("%s: summary %q, want %q", workflowID, got, summary)
	}
}
