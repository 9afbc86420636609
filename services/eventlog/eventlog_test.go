package eventlog_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1/outboxv1connect"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/eventlog"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func types(t *testing.T) []*toolcatalog.EventType {
	t.Helper()
	ts, err := toolcatalog.EventTypes(toolcatalog.Contracts())
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// as is ctx carrying agent's call (the owner's with owner true).
func as(ctx context.Context, agent string, owner bool) context.Context {
	c := mesh.Caller{Subject: agent, Agent: agent}
	if owner {
		c.Roles = []string{mesh.RoleOwner}
	}
	return mesh.WithCall(ctx, mesh.Call{Caller: c})
}

func askEvent(name, agent, ask string, at time.Time) *outboxv1.Occurrence {
	a := &ownerv1.Ask{AskId: ask, AgentId: agent, Question: "?", CreateTime: timestamppb.New(at)}
	var payload proto.Message
	switch name {
	case "ask.created":
		payload = &ownerv1.AskEventCreated{AskId: ask, AgentId: agent, Ask: a}
	default:
		payload = &ownerv1.AskEventAnswered{AskId: ask, AgentId: agent, Ask: a}
	}
	return outbox.New(outbox.ID(name, ask), name, payload, at)
}

// poll polls name as ctx's caller from cursor (nil: from now).
func poll(t *testing.T, ctx context.Context, svc *eventlog.Service, name string, cursor *string, args string) *eventsv1.PollResponse {
	t.Helper()
	res, err := svc.Poll(ctx, &eventsv1.PollRequest{Name: name, Cursor: cursor, Arguments: args})
	if err != nil {
		t.Fatalf("poll %s: %v", name, err)
	}
	return res
}

func ids(res *eventsv1.PollResponse) []string {
	var out []string
	for _, e := range res.GetEvents() {
		out = append(out, e.GetEventId())
	}
	return out
}

// TestRelayAndPoll: events written to a domain's outbox reach the log
// through the relay, each once, and the outbox empties; a poll shows an
// agent its own events and the owner everyone's, from a cursor any
// service replica understands; arguments narrow it; retention truncates.
func TestRelayAndPoll(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		ctx := t.Context()
		domain := e.Open(t)
		if err := outbox.Migrate(ctx, domain); err != nil {
			t.Fatal(err)
		}
		srv := servertest.Start(t, outbox.NewService(domain).Registration())
		src := meshclient.New(meshclient.Config{HTTP: srv.Client(), Signer: servertest.MeshSigner()}, outboxv1connect.NewOutboxServiceClient, srv.URL)

		logDB := e.Open(t)
		st := sqldbtest.OpenStore(t, logDB, eventlogstore.Open)
		now := time.Now().UTC().Truncate(time.Millisecond)
		clock := now
		svc, err := eventlog.New(st, eventlog.Config{Types: types(t), Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		// A second replica over the same log answers the same cursors.
		replica, err := eventlog.New(sqldbtest.OpenStore(t, logDB, eventlogstore.Open), eventlog.Config{Types: types(t)})
		if err != nil {
			t.Fatal(err)
		}

		alice, bob, owner := as(ctx, "alice", false), as(ctx, "bob", false), as(ctx, "root", true)
		start := poll(t, alice, svc, "ask.created", nil, "")
		if len(start.GetEvents()) != 0 || start.GetCursor() == "" {
			t.Fatalf("poll from now = %v", start)
		}
		cur := start.GetCursor()

		written := []*outboxv1.Occurrence{
			askEvent("ask.created", "alice", "ask_00000000000000000000000001", now),
			askEvent("ask.created", "bob", "ask_00000000000000000000000002", now),
			askEvent("ask.answered", "alice", "ask_00000000000000000000000001", now),
		}
		for _, o := range written {
			if err := outbox.Write(ctx, domain, o); err != nil {
				t.Fatal(err)
			}
		}
		// A change retried writes its event again: kept once.
		if err := outbox.Write(ctx, domain, written[0]); err != nil {
			t.Fatal(err)
		}

		rctx, stop := context.WithCancel(ctx)
		relayed := make(chan struct{})
		go func() {
			defer close(relayed)
			svc.RunRelay(rctx, eventlog.Sources{"owner": src}, mesh.Caller{Subject: "events", Agent: "events", Roles: []string{mesh.RoleService}}, 10*time.Millisecond)
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := outbox.Len(ctx, domain)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the outbox still holds %d events", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		<-relayed

		got := poll(t, alice, replica, "ask.created", &cur, "")
		if want := []string{written[0].GetEventId()}; !equal(ids(got), want) {
			t.Errorf("alice's ask.created = %v, want %v", ids(got), want)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(got.GetEvents()[0].GetData()), &data); err != nil || data["agent_id"] != "alice" || data["ask_id"] != "ask_00000000000000000000000001" {
			t.Errorf("data = %s (%v)", got.GetEvents()[0].GetData(), err)
		}
		if got := poll(t, bob, svc, "ask.created", &cur, ""); !equal(ids(got), []string{written[1].GetEventId()}) {
			t.Errorf("bob's ask.created = %v", ids(got))
		}
		all := poll(t, owner, svc, "ask.created", &cur, "")
		if !equal(ids(all), []string{written[0].GetEventId(), written[1].GetEventId()}) {
			t.Errorf("the owner's ask.created = %v", ids(all))
		}
		if got := poll(t, owner, svc, "ask.created", &cur, `{"agent_id":"bob"}`); !equal(ids(got), []string{written[1].GetEventId()}) {
			t.Errorf("the owner's ask.created of bob = %v", ids(got))
		}
		// From the last cursor: nothing new, and no need to hurry.
		last := all.GetCursor()
		if again := poll(t, owner, svc, "ask.created", &last, ""); len(again.GetEvents()) != 0 || again.GetHasMore() || again.GetNextPollMs() == 0 {
			t.Errorf("poll from the last cursor = %v", again)
		}
		// One event at a time: hasMore until the end.
		one, err := svc.Poll(owner, &eventsv1.PollRequest{Name: "ask.created", Cursor: &cur, MaxEvents: 1})
		if err != nil || len(one.GetEvents()) != 1 || !one.GetHasMore() || one.GetNextPollMs() != 0 {
			t.Errorf("poll of one event = %v, %v; want one event and hasMore", one, err)
		}

		// The relay died after recording, before acknowledging: the events
		// come again and are recorded as nothing new.
		if _, err := svc.Record(as(ctx, "events", false), &eventsv1.RecordRequest{Occurrences: written}); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("Record by an agent: %v, want permission denied", err)
		}
		res, err := svc.Record(mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Agent: "events", Roles: []string{mesh.RoleService}}}), &eventsv1.RecordRequest{Occurrences: written})
		if err != nil || res.GetRecorded() != 0 || res.GetDuplicates() != 3 {
			t.Errorf("recording the events again = %v, %v; want 3 duplicates", res, err)
		}

		// Arguments are checked against the type's rules, each fault named by
		// its path, as a tool's arguments are.
		for args, want := range map[string]string{
			`{"agent_id":"Not An Agent"}`:      "arguments.agent_id: does not match regex pattern",
			`{"status":"DONE"}`:                `arguments.status: must be one of TASK_STATUS_PENDING, TASK_STATUS_RUNNING`,
			`{"stauts":"TASK_STATUS_RUNNING"}`: `arguments.stauts: unknown field "stauts"; this event type accepts: status, project_id`,
		} {
			name := "work_task.status_changed"
			if strings.Contains(args, "agent_id") {
				name = "ask.created"
			}
			if _, err := svc.Poll(owner, &eventsv1.PollRequest{Name: name, Cursor: &cur, Arguments: args}); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
				t.Errorf("poll with arguments %s: %v, want invalid argument saying %q", args, err, want)
			}
		}
		if _, err := svc.Poll(owner, &eventsv1.PollRequest{Name: "work_task.status_changed", Cursor: &cur, Arguments: `{"status":"TASK_STATUS_RUNNING"}`}); err != nil {
			t.Errorf("poll of task events with a status: %v", err)
		}

		// Past the retention the events go; a cursor from before them
		// answers truncated.
		clock = now.Add(eventlog.DefaultRetention + time.Hour)
		if n, err := st.Prune(ctx, clock.Add(-eventlog.DefaultRetention)); err != nil || n != 3 {
			t.Fatalf("prune = %d, %v; want 3", n, err)
		}
		if got := poll(t, owner, svc, "ask.created", &cur, ""); !got.GetTruncated() || len(got.GetEvents()) != 0 {
			t.Errorf("poll from before the pruned events = %v, want truncated", got)
		}
		if got := poll(t, owner, svc, "ask.created", &last, ""); got.GetTruncated() {
			t.Errorf("poll from the last cursor after pruning = %v, want not truncated (it missed nothing)", got)
		}
		fresh := poll(t, owner, svc, "ask.created", nil, "")
		if got := poll(t, owner, svc, "ask.created", &fresh.Cursor, ""); got.GetTruncated() {
			t.Errorf("poll from a cursor taken after pruning = %v, want not truncated", got)
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
