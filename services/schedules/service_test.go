package schedules_test

import (
	"context"
	"fmt"
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
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/services/schedules"
	"github.com/toolmesh/toolmesh/services/schedules/schedulesstore"
)

// now is the service's clock in these tests: Monday 2 March 2026, 10:07 UTC.
var now = time.Date(2026, 3, 2, 10, 7, 0, 0, time.UTC)

type fixture struct {
	client schedulesv1connect.SchedulesServiceClient
	engine *fakeEngine
	store  *schedulesstore.Store
	srv    *servertest.Server
	logs   *logtest.Buffer
}

// start serves the schedules service on SQLite with a fake engine, and a
// Connect client of it.
func start(t *testing.T, cfg schedules.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := schedulesstore.Open(ctx, sqldbtest.SQLite().Open(t))
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
	as := servertest.Bearer("agent-rest")
	body := `{"interval_seconds":3600,"action":{"tool":"tasks_create","arguments":{"description":"from REST"}}}`
	code, out := f.srv.REST(t, as, http.MethodPost, "/v1/schedules", body)
	if code != http.StatusOK || !strings.Contains(out, `"status":"SCHEDULE_STATUS_PENDING_APPROVAL"`) {
		t.Fatalf("POST /v1/schedules: %d %s", code, out)
	}
	id := regexp.MustCompile(`"id":"(sch_[0-9a-z]{26})"`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("POST /v1/schedules answered no schedule id: %s", out)
	}
	if code, out := f.srv.REST(t, as, http.MethodPatch, "/v1/schedules/"+id[1], `{"interval_seconds":7200}`); code != http.StatusOK ||
		!strings.Contains(out, `"interval_seconds":7200`) || !strings.Contains(out, `"revision":1`) {
		t.Errorf("PATCH /v1/schedules/%s: %d %s", id[1], code, out)
	}
	if code, out := f.srv.REST(t, as, http.MethodPost, "/v1/schedules:preview", `{"cron":"0 9 * * *","count":1}`); code != http.StatusOK || !strings.Contains(out, `"run_times":["2026-03-03T09:00:00Z"]`) {
		t.Errorf("POST /v1/schedules:preview: %d %s", code, out)
	}
}
