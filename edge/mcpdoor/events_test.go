package mcpdoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/testsupport/mcpevents"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/eventlog"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
)

// eventsFixture is an edge in front of an event log over the mesh's
// contracts.
type eventsFixture struct {
	*edgetest.Fixture
	record func(occs ...*outboxv1.Occurrence)
}

func newEventsFixture(t *testing.T, configure func(*edge.Config)) *eventsFixture {
	t.Helper()
	types, err := toolcatalog.EventTypes(toolcatalog.Contracts())
	if err != nil {
		t.Fatal(err)
	}
	st := sqldbtest.OpenStore(t, sqldbtest.SQLite().Open(t), eventlogstore.Open)
	sealer, err := seal.New(make([]byte, seal.KeySize), eventlog.SealPurpose)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := eventlog.New(st, eventlog.Config{Types: types, Webhooks: eventlog.Webhooks{Sealer: sealer, AllowLoopback: true, MaxPerPrincipal: 2, Deliveries: noDeliveries{}}})
	if err != nil {
		t.Fatal(err)
	}
	log := servertest.Start(t, svc.Registration())
	f := edgetest.NewFixture(t, func(c *edge.Config) {
		c.Contracts = append(toolcatalog.Contracts(), edgetest.TestingService())
		c.Services[eventsv1connect.EventsServiceName] = log.URL
		if configure != nil {
			configure(c)
		}
	})
	client := meshclient.New(meshclient.Config{HTTP: log.Client(), Signer: servertest.MeshSigner()}, eventsv1connect.NewEventsServiceClient, log.URL)
	return &eventsFixture{Fixture: f, record: func(occs ...*outboxv1.Occurrence) {
		t.Helper()
		ctx := mesh.WithCall(t.Context(), mesh.Call{Caller: mesh.Caller{Agent: "relay", Roles: []string{mesh.RoleService}}})
		if _, err := client.Record(ctx, &eventsv1.RecordRequest{Occurrences: occs}); err != nil {
			t.Fatal(err)
		}
	}}
}

// noDeliveries starts no delivery workflow (workers/eventlog's tests run
// them).
type noDeliveries struct{}

func (noDeliveries) Start(context.Context, *eventsv1.DeliveryWorkflowInput) error { return nil }

func statusChanged(agent, task string, status tasksv1.TaskStatus) *outboxv1.Occurrence {
	return outbox.New(outbox.ID("work_task.status_changed", task, status.String()), "work_task.status_changed",
		&tasksv1.WorkTaskStatusChanged{TaskId: task, AgentId: agent, Status: status, Task: &tasksv1.Task{Id: task, AgentId: agent, Status: status}}, time.Now())
}

// TestEventsDiscoverListAndPoll: server/discover declares MCP events both
// ways deployed clients read them; events/list shows the types the
// caller's selection reaches, with their schemas; events/poll reads from
// now, then what happened after its cursor, and refuses a type outside
// the selection at each poll.
func TestEventsDiscoverListAndPoll(t *testing.T) {
	f := newEventsFixture(t, nil)

	// server/discover: the extension and the top-level capability.
	var disc struct {
		Instructions string `json:"instructions"`
		Capabilities struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
			Events     json.RawMessage            `json:"events"`
		} `json:"capabilities"`
	}
	if err := (&mcpevents.Client{URL: f.URL}).Call(t.Context(), "server/discover", map[string]any{}, &disc); err != nil {
		t.Fatal(err)
	}
	if _, ok := disc.Capabilities.Extensions[edge.ExtensionEvents]; !ok || string(disc.Capabilities.Events) != "{}" {
		t.Errorf("server/discover capabilities: extensions %v, events %s; want both", disc.Capabilities.Extensions, disc.Capabilities.Events)
	}
	if disc.Instructions == "" {
		t.Error("server/discover lost its instructions")
	}

	all := &mcpevents.Client{URL: f.URL}
	types, err := all.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ty := range types {
		names = append(names, ty.Name)
	}
	if want := []string{"ask.answered", "ask.cancelled", "ask.created", "ask.expired", "work_task.status_changed"}; !slices.Equal(names, want) {
		t.Fatalf("events/list = %v, want %v", names, want)
	}
	task := types[4]
	if !slices.Equal(task.Delivery, []string{"poll", "webhook"}) || !strings.Contains(string(task.InputSchema), `"project_id"`) ||
		!strings.Contains(string(task.PayloadSchema), `"previous_status"`) || task.Description == "" {
		t.Errorf("work_task.status_changed = %+v", task)
	}

	// A selection of the tasks toolset sees the task events only, and is
	// refused the ask events.
	tasksOnly := &mcpevents.Client{URL: f.HTTP.URL + edge.PathToolsets + "tasks"}
	if types, err := tasksOnly.List(t.Context()); err != nil || len(types) != 1 || types[0].Name != "work_task.status_changed" {
		t.Errorf("events/list through the tasks toolset = %v, %v", types, err)
	}
	var rpcErr *mcpevents.Error
	if _, err := tasksOnly.Poll(t.Context(), mcpevents.PollParams{Name: "ask.created"}); !errors.As(err, &rpcErr) || rpcErr.Code != -32024 {
		t.Errorf("poll of ask.created through the tasks toolset: %v, want -32024", err)
	}

	// From now, then what happened after.
	f.record(statusChanged("local", "tsk_00000000000000000000000001", tasksv1.TaskStatus_TASK_STATUS_RUNNING))
	start, err := tasksOnly.Poll(t.Context(), mcpevents.PollParams{Name: "work_task.status_changed"})
	if err != nil || len(start.Events) != 0 || start.Cursor == "" {
		t.Fatalf("poll from now = %+v, %v", start, err)
	}
	done := statusChanged("local", "tsk_00000000000000000000000001", tasksv1.TaskStatus_TASK_STATUS_COMPLETED)
	f.record(done, statusChanged("local", "tsk_00000000000000000000000002", tasksv1.TaskStatus_TASK_STATUS_RUNNING))
	got, err := tasksOnly.Poll(t.Context(), mcpevents.PollParams{Name: "work_task.status_changed", Cursor: &start.Cursor,
		Arguments: map[string]any{"status": "TASK_STATUS_COMPLETED"}})
	if err != nil || len(got.Events) != 1 || got.Events[0].EventID != done.GetEventId() || got.HasMore || got.NextPollMs < 1000 {
		t.Fatalf("poll of completed tasks = %+v, %v; want %s", got, err, done.GetEventId())
	}
	var data struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(got.Events[0].Data, &data); err != nil || data.Status != "TASK_STATUS_COMPLETED" || data.TaskID != "tsk_00000000000000000000000001" {
		t.Errorf("data = %s", got.Events[0].Data)
	}
	if _, err := tasksOnly.Poll(t.Context(), mcpevents.PollParams{Name: "work_task.status_changed", Cursor: &start.Cursor,
		Arguments: map[string]any{"status": "TASK_STATUS_DONE"}}); !errors.As(err, &rpcErr) || rpcErr.Code != -32602 {
		t.Errorf("poll with an unknown status: %v, want -32602", err)
	}
	if _, err := tasksOnly.Poll(t.Context(), mcpevents.PollParams{Name: "no.such_event"}); !errors.As(err, &rpcErr) || rpcErr.Code != -32023 {
		t.Errorf("poll of an unknown type: %v, want -32023", err)
	}
}

// TestEventsOnlyWhereServed: an edge without an event log declares no
// events and answers their methods "method not found".
func TestEventsOnlyWhereServed(t *testing.T) {
	f := edgetest.NewFixture(t, func(c *edge.Config) {
		c.Contracts = []protoreflect.ServiceDescriptor{edgetest.TestingService()}
	})
	var rpcErr *mcpevents.Error
	if _, err := (&mcpevents.Client{URL: f.URL}).List(t.Context()); !errors.As(err, &rpcErr) || rpcErr.Code != -32601 {
		t.Errorf("events/list without an event log: %v, want -32601", err)
	}
}

// TestEventsSubscribe: events/subscribe through the edge subscribes the
// caller by webhook, refreshes in place, and answers the extension's
// errors: a bad secret or URL (-32602), a mode other than webhook
// (-32026), a type outside the selection (-32024), the cap (-32025);
// events/unsubscribe ends the subscription.
func TestEventsSubscribe(t *testing.T) {
	f := newEventsFixture(t, nil)
	c := &mcpevents.Client{URL: f.URL}
	secret := "whsec_" + strings.Repeat("A", 43) + "="
	hook := "http://127.0.0.1:9/hook"
	var rpcErr *mcpevents.Error
	code := func(err error) int64 {
		if errors.As(err, &rpcErr) {
			return rpcErr.Code
		}
		return 0
	}
	for name, c2 := range map[string]struct {
		c    *mcpevents.Client
		p    mcpevents.SubscribeParams
		want int64
	}{
		"bad secret":   {c, mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: hook, Secret: "whsec_c2hvcnQ="}}, -32602},
		"no secret":    {c, mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: hook}}, -32602},
		"plain http":   {c, mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: "http://example.com/hook", Secret: secret}}, -32602},
		"push":         {c, mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{Mode: "push", URL: hook, Secret: secret}}, -32026},
		"unknown type": {c, mcpevents.SubscribeParams{Name: "no.such_event", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}}, -32023},
		"selection": {&mcpevents.Client{URL: f.HTTP.URL + edge.PathToolsets + "tasks"},
			mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}}, -32024},
	} {
		if _, err := c2.c.Subscribe(t.Context(), c2.p); code(err) != c2.want {
			t.Errorf("%s: %v, want %d", name, err, c2.want)
		} else if strings.Contains(err.Error(), strings.Repeat("A", 43)) {
			t.Errorf("%s: the error repeats the secret: %v", name, err)
		}
	}
	sub, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}})
	if err != nil || !strings.HasPrefix(sub.ID, "sub_") || sub.RefreshBefore == nil || sub.Cursor == "" || sub.DeliveryStatus == nil || !sub.DeliveryStatus.Active {
		t.Fatalf("subscribe = %+v, %v", sub, err)
	}
	again, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: "ask.created", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}})
	if err != nil || again.ID != sub.ID {
		t.Fatalf("refresh = %+v, %v; want the same id", again, err)
	}
	if _, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: "ask.answered", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: "ask.expired", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}}); code(err) != -32025 {
		t.Fatalf("past the cap: %v, want -32025", err)
	}
	if err := c.Unsubscribe(t.Context(), "ask.answered", nil, hook); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: "ask.expired", Delivery: mcpevents.Delivery{URL: hook, Secret: secret}}); err != nil {
		t.Fatalf("after an unsubscribe: %v", err)
	}
}
