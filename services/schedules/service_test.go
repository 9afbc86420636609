package schedules_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/sqldbtest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulestore"
)

// now is the service's clock in these tests: Monday 2 March 2026, 10:07 UTC.
var now = time.Date(2026, 3, 2, 10, 7, 0, 0, time.UTC)

type fixture struct {
	client schedulesv1connect.SchedulesServiceClient
	engine *fakeEngine
	store  *schedulestore.Store
	srv    *servertest.Server
	logs   *logtest.Buffer
}

// start serves the schedules service on SQLite with a fake engine, and a
// Connect client of it.
func start(t *testing.T, cfg schedules.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := schedulestore.Open(ctx, sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return now }
	}
	engine := newFakeEngine()
	svc, err := schedules.New(st, engine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	srv := servertest.StartWith(t, servertest.Options{Log: logging.New(logs, nil)}, svc.Registration())
	client := schedulesv1connect.NewSchedulesServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	engine.client = client
	return &fixture{client: client, engine: engine, store: st, srv: srv, logs: logs}
}

// eachProtocol runs fn against a fresh server once over Connect and once
// over gRPC: the test and the fake engine call it with that protocol's
// client.
func eachProtocol(t *testing.T, cfg schedules.Config, fn func(t *testing.T, f *fixture)) {
	var f *fixture
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		f = start(t, cfg)
		return f.srv
	}, schedulesv1connect.NewSchedulesServiceClient, func(t *testing.T, c schedulesv1connect.SchedulesServiceClient) {
		f.client, f.engine.client = c, c
		fn(t, f)
	})
}

const agentA, agentB = "agent-a", "agent-b"

// asOwner acts as the owner (the development principal's shape).
func asOwner(ctx context.Context) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: "owner-1", Agent: "local", Roles: []string{mesh.RoleOwner}}})
}

func asAgent(ctx context.Context, agent string, depth int) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Depth: depth}})
}

func args(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func taskAction(t *testing.T) *schedulesv1.Action {
	return &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": "write the daily report"})}
}

func create(t *testing.T, f *fixture, ctx context.Context, req *schedulesv1.CreateRequest) *schedulesv1.Schedule {
	t.Helper()
	res, err := f.client.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return res.GetSchedule()
}

func hourly(t *testing.T) *schedulesv1.CreateRequest {
	return &schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: taskAction(t), Description: "daily report"}
}

func stampsAt(ts ...string) []*timestamppb.Timestamp {
	out := make([]*timestamppb.Timestamp, len(ts))
	for i, s := range ts {
		v, _ := time.Parse(time.RFC3339, s)
		out[i] = timestamppb.New(v)
	}
	return out
}

func TestCreateAsksTheOwnerAboutAPausedSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := asAgent(context.Background(), agentA, 1)
		got := create(t, f, ctx, &schedulesv1.CreateRequest{
			Cron: "0 9 * * MON-FRI", Timezone: "Europe/Paris", Action: taskAction(t), Description: "daily report",
		})
		if !regexp.MustCompile(`^sch_[0-9a-z]{26}$`).MatchString(got.GetId()) || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got.GetSpecHash()) {
			t.Fatalf("created id %q, spec hash %q: want sch_<26> and 32 hex digits", got.GetId(), got.GetSpecHash())
		}
		want := &schedulesv1.Schedule{
			Id: got.GetId(), AgentId: agentA, Description: "daily report",
			Cron: "0 9 * * MON-FRI", Timezone: "Europe/Paris", Action: taskAction(t),
			Status:             schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL,
			NextRunTimes:       stampsAt("2026-03-03T08:00:00Z", "2026-03-04T08:00:00Z", "2026-03-05T08:00:00Z"),
			SpecHash:           got.GetSpecHash(),
			ApprovalWorkflowId: "schedule-approval/" + got.GetId() + "/" + got.GetSpecHash(),
			TemporalScheduleId: "schedule/" + got.GetId(),
			Depth:              1,
			CreateTime:         timestamppb.New(now), UpdateTime: timestamppb.New(now),
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("created schedule (-want +got):\n%s", diff)
		}
		ts, ok := f.engine.schedule(got.GetTemporalScheduleId())
		if !ok || !ts.paused {
			t.Fatalf("Temporal Schedule %s: exists %v, paused %v; want it created paused", got.GetTemporalScheduleId(), ok, ts.paused)
		}
		wantRun := &schedulesv1.RunInput{ScheduleId: got.GetId(), AgentId: agentA, Tool: "tasks_create",
			Arguments: taskAction(t).GetArguments(), Depth: 2}
		if diff := cmp.Diff(wantRun, ts.run, protocmp.Transform()); diff != "" {
			t.Errorf("each run calls (-want +got):\n%s", diff)
		}
		a, ok := f.engine.approval(got.GetApprovalWorkflowId())
		if !ok {
			t.Fatalf("no approval workflow %s started", got.GetApprovalWorkflowId())
		}
		if a.in.GetSpecHash() != got.GetSpecHash() || a.in.GetTimeout().AsDuration() != schedules.DefaultApprovalTimeout ||
			a.in.GetSpecSummary() != "cron 0 9 * * MON-FRI in Europe/Paris" || len(a.in.GetNextRunTimes()) != 3 {
			t.Errorf("approval input = %v; want the spec hash, the default timeout, the spec in words and 3 run times", a.in)
		}
		// Get shows the same schedule.
		res, err := f.client.Get(ctx, &schedulesv1.GetRequest{ScheduleId: got.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, res.GetSchedule(), protocmp.Transform()); diff != "" {
			t.Errorf("Get (-create +get):\n%s", diff)
		}
	})
}

func TestCreateRefusesBadSpecsAndActions(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := asAgent(context.Background(), agentA, 0)
		big := strings.Repeat("x", 17<<10)
		for _, tc := range []struct {
			name  string
			req   *schedulesv1.CreateRequest
			field string
			rule  string
		}{
			{"the action's arguments break the tool's contract",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": ""})}},
				"action.arguments.description", "required"},
			{"an argument the tool does not have",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": "x", "owner": "me"})}},
				"action.arguments.owner", "unknown_field"},
			{"an argument of the wrong type",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": "x", "priority": "URGENT"})}},
				"action.arguments.priority", "type"},
			{"arguments too large",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "tasks_create", Arguments: args(t, map[string]any{"description": big})}},
				"action.arguments", "schedules.arguments"},
			{"an unknown tool",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "tasks_explode"}},
				"action.tool", "schedules.tool"},
			{"an admin tool",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "agents_register", Arguments: args(t, map[string]any{"agent_id": "x"})}},
				"action.tool", "schedules.tool"},
			{"a schedules tool",
				&schedulesv1.CreateRequest{IntervalSeconds: 3600, Action: &schedulesv1.Action{Tool: "schedules_list"}},
				"action.tool", "schedules.tool"},
			{"an interval under the minimum",
				&schedulesv1.CreateRequest{IntervalSeconds: 299, Action: taskAction(t)},
				"interval_seconds", "schedules.min_interval"},
			{"a cron running closer than the minimum",
				&schedulesv1.CreateRequest{Cron: "0,2 * * * *", Action: taskAction(t)},
				"cron", "schedules.min_interval"},
			{"a cron that is not one",
				&schedulesv1.CreateRequest{Cron: "0 9 * *", Action: taskAction(t)},
				"cron", "schedules.cron"},
			{"an unknown time zone",
				&schedulesv1.CreateRequest{Cron: "0 9 * * *", Timezone: "Europe/Atlantis", Action: taskAction(t)},
				"timezone", "schedules.timezone"},
			{"both cron and interval (a request rule)",
				&schedulesv1.CreateRequest{Cron: "0 9 * * *", IntervalSeconds: 3600, Action: taskAction(t)},
				"", "spec_exactly_one"},
			{"no action (a request rule)",
				&schedulesv1.CreateRequest{Cron: "0 9 * * *"},
				"action", "required"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := f.client.Create(ctx, tc.req)
				got := servertest.Violations(t, err)
				if rules := got[tc.field]; len(rules) != 1 || rules[0] != tc.rule {
					t.Errorf("violations = %v, want %s on %q", got, tc.rule, tc.field)
				}
			})
		}
		if res, err := f.client.List(ctx, &schedulesv1.ListRequest{}); err != nil || res.GetPage().GetTotal() != 0 {
			t.Errorf("after refused creates: %d schedules (err %v), want none", res.GetPage().GetTotal(), err)
		}
	})
}

func TestMinimumIntervalIsConfigurable(t *testing.T) {
	f := start(t, schedules.Config{MinInterval: time.Second})
	ctx := asAgent(context.Background(), agentA, 0)
	sch := create(t, f, ctx, &schedulesv1.CreateRequest{IntervalSeconds: 2, Action: taskAction(t)})
	if got := sch.GetNextRunTimes(); len(got) != 3 || got[1].AsTime().Sub(got[0].AsTime()) != 2*time.Second {
		t.Errorf("next runs %v, want three 2 s apart", got)
	}
}

func TestIdempotencyKeyRule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := asAgent(context.Background(), agentA, 0)
		servertest.KeyRule(t, ctx, "create-1", func(ctx context.Context, variant int) (string, error) {
			req := hourly(t)
			req.Description = fmt.Sprintf("request %d", variant)
			res, err := f.client.Create(ctx, req)
			return res.GetSchedule().GetId(), err
		})
		if res, _ := f.client.List(ctx, &schedulesv1.ListRequest{}); res.GetPage().GetTotal() != 1 || len(f.engine.schedules) != 1 {
			t.Errorf("%d schedules stored, %d in Temporal; want one of each", res.GetPage().GetTotal(), len(f.engine.schedules))
		}
	})
}

func TestFailedCreateLeavesNothingBehind(t *testing.T) {
	f := start(t, schedules.Config{})
	ctx := servertest.WithIdempotencyKey(asAgent(context.Background(), agentA, 0), "create-1")
	f.engine.failStart = errUnavailable
	_, err := f.client.Create(ctx, hourly(t))
	if servertest.Code(t, err) != connect.CodeUnavailable {
		t.Fatalf("Create with Temporal down: %v, want unavailable", err)
	}
	// What did not happen is said; Temporal's error is logged under the
	// answer's error id, not sent.
	id := rpcerror.ID(err)
	if msg := err.(*connect.Error).Message(); id == "" || !strings.Contains(msg, "nothing was created, try again") || strings.Contains(msg, errUnavailable.Error()) {
		t.Errorf("answer %q (error id %q), want what did not happen and an error id, without Temporal's error", msg, id)
	} else if event := servertest.LoggedError(t, f.logs, id); !strings.Contains(event["error"].(string), errUnavailable.Error()) {
		t.Errorf("rpc.error under %s = %v, want Temporal's error", id, event)
	}
	if res, _ := f.client.List(ctx, &schedulesv1.ListRequest{}); res.GetPage().GetTotal() != 0 || len(f.engine.schedules) != 0 {
		t.Fatalf("after a failed create: %d stored, %d in Temporal; want none", res.GetPage().GetTotal(), len(f.engine.schedules))
	}
	f.engine.failStart = nil
	if sch := create(t, f, ctx, hourly(t)); sch.GetSpecHash() == "" {
		t.Errorf("retry after the failure: %v, want a schedule waiting for approval", sch)
	}
}

func TestApproveUnpausesTheSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))

		// Agents cannot approve, not even their own schedules.
		if _, err := f.client.Approve(asAgent(ctx, agentA, 0), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent's Approve: %v, want permission_denied", err)
		}
		// A hash the owner was not asked about is refused.
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), SpecHash: strings.Repeat("0", 32)}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve of another hash: %v, want failed_precondition", err)
		}
		res, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId(), Reason: "useful", SpecHash: sch.GetSpecHash()})
		if err != nil {
			t.Fatalf("Approve: %v", err)
		}
		got := res.GetSchedule()
		if got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE || got.GetDecision().GetDecidedBy() != "owner-1" ||
			got.GetDecision().GetNote() != "useful" || len(got.GetNextRunTimes()) != 3 {
			t.Errorf("approved schedule = %v; want active, decided by owner-1 with the note, and next runs", got)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); ts.paused || ts.note != "approved by owner-1: useful" {
			t.Errorf("Temporal Schedule paused %v, note %q; want unpaused with the approval's note", ts.paused, ts.note)
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("a second Approve: %v, want failed_precondition", err)
		}
	})
}

func TestApproveIsRefusedWhenTheSpecChangedAfterTheAsk(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		f.engine.tamper(sch.GetTemporalScheduleId())

		_, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "changed since the owner was asked") {
			t.Fatalf("Approve after the spec changed: %v, want failed_precondition saying it changed", err)
		}
		if ts, _ := f.engine.schedule(sch.GetTemporalScheduleId()); !ts.paused {
			t.Error("the changed schedule was unpaused")
		}
		got, _ := f.client.Get(asOwner(ctx), &schedulesv1.GetRequest{ScheduleId: sch.GetId()})
		if got.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
			t.Errorf("status after the refused approval = %v, want pending_approval", got.GetSchedule().GetStatus())
		}
		// The owner can still deny it.
		if _, err := f.client.Deny(asOwner(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Errorf("Deny after the refused approval: %v", err)
		}
	})
}

func TestDenyDeletesTheSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sch := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		if _, err := f.client.Deny(asAgent(ctx, agentA, 0), &schedulesv1.DenyRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent's Deny: %v, want permission_denied", err)
		}
		res, err := f.client.Deny(asOwner(ctx), &schedulesv1.DenyRequest{ScheduleId: sch.GetId(), Reason: "too often"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.GetSchedule(); got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DENIED ||
			got.GetDecision().GetNote() != "too often" || len(got.GetNextRunTimes()) != 0 {
			t.Errorf("denied schedule = %v; want denied with the reason and no next runs", got)
		}
		if _, ok := f.engine.schedule(sch.GetTemporalScheduleId()); ok {
			t.Error("the denied schedule's Temporal Schedule still exists")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve after Deny: %v, want failed_precondition", err)
		}
	})
}

func TestPauseAndResume(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		sch := create(t, f, a, hourly(t))
		tid := sch.GetTemporalScheduleId()
		// Waiting for approval: neither pause nor resume moves it.
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Resume before approval: %v, want failed_precondition", err)
		}
		if _, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Pause before approval: %v, want failed_precondition", err)
		}
		if ts, _ := f.engine.schedule(tid); !ts.paused {
			t.Fatal("the schedule runs before approval")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}

		res, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId(), Reason: "holiday"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.GetSchedule(); got.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PAUSED || got.GetPausedBy() != agentA {
			t.Errorf("paused schedule = %v, want paused by %s", got, agentA)
		}
		if ts, _ := f.engine.schedule(tid); !ts.paused || ts.note != "paused by agent-a: holiday" {
			t.Errorf("Temporal Schedule paused %v, note %q", ts.paused, ts.note)
		}
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatalf("Resume by the agent that paused it: %v", err)
		}
		if ts, _ := f.engine.schedule(tid); ts.paused {
			t.Error("resumed schedule is still paused in Temporal")
		}

		// What the owner pauses, only the owner resumes.
		if _, err := f.client.Pause(asOwner(ctx), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Resume(a, &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("the agent resuming what the owner paused: %v, want permission_denied", err)
		}
		if res, err := f.client.Resume(asOwner(ctx), &schedulesv1.ResumeRequest{ScheduleId: sch.GetId()}); err != nil ||
			res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_ACTIVE {
			t.Errorf("the owner's Resume = %v, %v; want active", res.GetSchedule(), err)
		}
		// Another agent does not see it at all.
		if _, err := f.client.Pause(asAgent(ctx, agentB, 0), &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Pause: %v, want not_found", err)
		}
	})
}

func TestDelete(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		pending := create(t, f, a, hourly(t))
		res, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: pending.GetId()})
		if err != nil || res.GetSchedule().GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_DELETED {
			t.Fatalf("Delete of a pending schedule = %v, %v; want deleted", res.GetSchedule(), err)
		}
		if _, ok := f.engine.schedule(pending.GetTemporalScheduleId()); ok {
			t.Error("the deleted schedule's Temporal Schedule still exists")
		}
		if ap, _ := f.engine.approval(pending.GetApprovalWorkflowId()); !ap.withdrawn {
			t.Error("the deleted schedule's approval request was not withdrawn")
		}
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: pending.GetId()}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("Approve of a deleted schedule: %v, want failed_precondition", err)
		}
		// Deleting again changes nothing.
		again, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: pending.GetId()})
		if err != nil || !cmp.Equal(res.GetSchedule(), again.GetSchedule(), protocmp.Transform()) {
			t.Errorf("second Delete = %v, %v; want the deleted schedule unchanged", again.GetSchedule(), err)
		}

		active := create(t, f, a, hourly(t))
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: active.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Delete(asAgent(ctx, agentB, 0), &schedulesv1.DeleteRequest{ScheduleId: active.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Delete: %v, want not_found", err)
		}
		if _, err := f.client.Delete(a, &schedulesv1.DeleteRequest{ScheduleId: active.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.engine.schedule(active.GetTemporalScheduleId()); ok {
			t.Error("the deleted active schedule's Temporal Schedule still exists")
		}
	})
}

func TestVisibilityAndListing(t *testing.T) {
	var tick atomic.Int64 // a clock that moves, so creation order is listing order
	clock := func() time.Time { return now.Add(time.Duration(tick.Add(1)) * time.Second) }
	eachProtocol(t, schedules.Config{Now: clock}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		mine := create(t, f, asAgent(ctx, agentA, 0), hourly(t))
		theirs := create(t, f, asAgent(ctx, agentB, 0), hourly(t))

		if _, err := f.client.Get(asAgent(ctx, agentB, 0), &schedulesv1.GetRequest{ScheduleId: mine.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Get: %v, want not_found", err)
		}
		if _, err := f.client.Get(asOwner(ctx), &schedulesv1.GetRequest{ScheduleId: mine.GetId()}); err != nil {
			t.Errorf("the owner's Get of an agent's schedule: %v", err)
		}
		res, err := f.client.List(asAgent(ctx, agentA, 0), &schedulesv1.ListRequest{})
		if err != nil || len(res.GetSchedules()) != 1 || res.GetSchedules()[0].GetId() != mine.GetId() {
			t.Errorf("agent A lists %v (err %v), want only its own", res.GetSchedules(), err)
		}
		if _, err := f.client.List(asAgent(ctx, agentA, 0), &schedulesv1.ListRequest{AllAgents: true}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent listing all agents' schedules: %v, want permission_denied", err)
		}
		all, err := f.client.List(asOwner(ctx), &schedulesv1.ListRequest{AllAgents: true,
			Status: schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if all.GetPage().GetTotal() != 2 || len(all.GetSchedules()) != 1 || all.GetSchedules()[0].GetId() != theirs.GetId() {
			t.Errorf("the owner's first page of pending schedules = %v of %d, want the newest of 2", all.GetSchedules(), all.GetPage().GetTotal())
		}
	})
}

func TestRunsAreRecordedAndListed(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 0)
		sch := create(t, f, a, hourly(t))
		due := now.Add(53 * time.Minute)
		run := &schedulesv1.Execution{
			RunId: "schedule-run/" + sch.GetId() + "-" + due.Format(time.RFC3339), ScheduleId: sch.GetId(),
			ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), EndTime: timestamppb.New(due.Add(time.Second)),
			Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, Attempts: 1,
			Result: args(t, map[string]any{"status": "ok", "data": map[string]any{"task": map[string]any{"id": "tsk_1"}}}),
		}
		if _, err := f.client.RecordExecution(a, &schedulesv1.RecordExecutionRequest{Execution: run}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent recording a run: %v, want permission_denied", err)
		}
		if _, err := f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: run}); err != nil {
			t.Fatalf("the worker recording a run: %v", err)
		}
		other := &schedulesv1.Execution{RunId: "r", ScheduleId: "sch_" + strings.Repeat("0", 26), ScheduledTime: timestamppb.New(due),
			Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}
		if _, err := f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: other, Action: taskAction(t)}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("recording a run of an unknown schedule: %v, want not_found", err)
		}
		res, err := f.client.Executions(a, &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetExecutions()) != 1 || !cmp.Equal(run, res.GetExecutions()[0], protocmp.Transform()) || res.GetPage().GetTotal() != 1 {
			t.Errorf("Executions = %v, want the recorded run", res.GetExecutions())
		}
		if _, err := f.client.Executions(asAgent(ctx, agentB, 0), &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's Executions: %v, want not_found", err)
		}
		if _, err := f.client.ApplyDecision(a, &schedulesv1.ApplyDecisionRequest{ScheduleId: sch.GetId(), SpecHash: sch.GetSpecHash(),
			Kind: schedulesv1.DecisionKind_DECISION_KIND_APPROVE}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("an agent applying a decision: %v, want permission_denied", err)
		}
	})
}

func TestPreview(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := asAgent(context.Background(), agentA, 0)
		res, err := f.client.Preview(ctx, &schedulesv1.PreviewRequest{Cron: "*/15 * * * *"})
		if err != nil {
			t.Fatal(err)
		}
		want := &schedulesv1.PreviewResponse{
			RunTimes: stampsAt("2026-03-02T10:15:00Z", "2026-03-02T10:30:00Z", "2026-03-02T10:45:00Z"),
			Timezone: "UTC", Summary: "cron */15 * * * * in UTC",
		}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("Preview (-want +got):\n%s", diff)
		}
		res, err = f.client.Preview(ctx, &schedulesv1.PreviewRequest{IntervalSeconds: 86400, Count: 2,
			After: timestamppb.New(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))})
		if err != nil {
			t.Fatal(err)
		}
		want = &schedulesv1.PreviewResponse{RunTimes: stampsAt("2026-06-02T00:00:00Z", "2026-06-03T00:00:00Z"), Timezone: "UTC", Summary: "every 1 day"}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("Preview of an interval (-want +got):\n%s", diff)
		}
		_, err = f.client.Preview(ctx, &schedulesv1.PreviewRequest{Cron: "* * * * *"})
		if v := servertest.Violations(t, err); len(v["cron"]) != 1 {
			t.Errorf("Preview of a spec create refuses: violations %v, want one on cron", v)
		}
	})
}

func TestRESTRoutes(t *testing.T) {
	f := start(t, schedules.Config{})
	body := `{"interval_seconds":3600,"action":{"tool":"tasks_create","arguments":{"description":"from REST"}}}`
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/schedules", strings.NewReader(body))
	req.Header.Set("Authorization", servertest.Bearer("agent-rest"))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"status":"SCHEDULE_STATUS_PENDING_APPROVAL"`) {
		t.Fatalf("POST /v1/schedules: %s %s", resp.Status, out)
	}
	req, _ = http.NewRequest(http.MethodPost, f.srv.URL+"/v1/schedules:preview", strings.NewReader(`{"cron":"0 9 * * *","count":1}`))
	req.Header.Set("Authorization", servertest.Bearer("agent-rest"))
	if resp, err = f.srv.Client().Do(req); err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"run_times":["2026-03-03T09:00:00Z"]`) {
		t.Errorf("POST /v1/schedules:preview: %s %s", resp.Status, out)
	}
}

func TestRunsAreCheckedAgainstTheApprovedSchedule(t *testing.T) {
	eachProtocol(t, schedules.Config{}, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := asAgent(ctx, agentA, 1)
		sch := create(t, f, a, hourly(t))
		due := now.Add(53 * time.Minute)
		n := 0
		start := func(action *schedulesv1.Action, agent string, depth int32) (*schedulesv1.RecordExecutionResponse, error) {
			n++
			run := &schedulesv1.Execution{
				RunId: fmt.Sprintf("schedule-run/%s-%d", sch.GetId(), n), ScheduleId: sch.GetId(),
				ScheduledTime: timestamppb.New(due), StartTime: timestamppb.New(due), Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
			}
			return f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: run, Action: action, AgentId: agent, Depth: depth})
		}
		refused := func(what string, action *schedulesv1.Action, agent string, depth int32, why string) {
			t.Helper()
			_, err := start(action, agent, depth)
			if servertest.Code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), why) {
				t.Errorf("%s: %v, want failed_precondition saying %q", what, err, why)
			}
		}
		refused("a run before approval", taskAction(t), agentA, 2, "is pending_approval")
		if _, err := f.client.Approve(asOwner(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		if res, err := start(taskAction(t), agentA, 2); err != nil || res.GetExecution().GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the approved call: %v, %v; want recorded running", res.GetExecution(), err)
		}
		other := taskAction(t)
		other.Arguments = args(t, map[string]any{"description": "something else"})
		refused("other arguments", other, agentA, 2, "arguments are not the approved ones")
		refused("another tool", &schedulesv1.Action{Tool: "memory_save", Arguments: other.GetArguments()}, agentA, 2, "would call memory_save")
		refused("another agent", taskAction(t), agentB, 2, "would act as agent-b")
		refused("another depth", taskAction(t), agentA, 1, "at depth 1")
		if _, err := f.client.Pause(a, &schedulesv1.PauseRequest{ScheduleId: sch.GetId()}); err != nil {
			t.Fatal(err)
		}
		refused("a run of a paused schedule", taskAction(t), agentA, 2, "is paused")

		// The refusals are listed as failed runs.
		res, err := f.client.Executions(a, &schedulesv1.ExecutionsRequest{ScheduleId: sch.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for _, e := range res.GetExecutions() {
			if e.GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_FAILED && e.GetDomainCode() == "conflict" &&
				strings.Contains(e.GetResult().GetFields()["message"].GetStringValue(), "refused") {
				failed++
			}
		}
		if failed != 6 || res.GetPage().GetTotal() != 7 {
			t.Errorf("%d of %d runs listed as refused, want 6 of 7", failed, res.GetPage().GetTotal())
		}
		// A start report must say what it is about to call.
		_, err = f.client.RecordExecution(asWorker(ctx), &schedulesv1.RecordExecutionRequest{Execution: &schedulesv1.Execution{
			RunId: "r", ScheduleId: sch.GetId(), ScheduledTime: timestamppb.New(due), Status: schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		}})
		if v := servertest.Violations(t, err); len(v[""]) != 1 {
			t.Errorf("a start report without the action: violations %v", v)
		}
	})
}
