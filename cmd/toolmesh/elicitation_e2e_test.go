package main

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// question is one form a user was shown.
type question struct {
	message string
	fields  []string
}

// scriptedUser answers the forms it is shown, one answer per round.
type scriptedUser struct {
	mu      sync.Mutex
	answers []map[string]any
	asked   []question
}

func (u *scriptedUser) elicit(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	raw, _ := json.Marshal(req.Params.RequestedSchema)
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(raw, &s)
	u.asked = append(u.asked, question{message: req.Params.Message, fields: slices.Sorted(maps.Keys(s.Properties))})
	if len(u.answers) == 0 {
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	a := u.answers[0]
	u.answers = u.answers[1:]
	return &mcp.ElicitResult{Action: "accept", Content: a}, nil
}

// schedules_create is the genuinely multi-round tool: asked without a spec,
// the edge asks for one; round 2's question depends on round 1's answer —
// it shows the next three run times schedules_preview gives for it (and,
// when the preview refuses the spec, asks for the spec again, saying why);
// confirmed, the schedule is created once, through the calls worker, and
// waits for the owner's approval.
func TestSchedulesCreateAsksTheSpecThenConfirmsTheNextRuns(t *testing.T) {
	m := startSchedulesMesh(t, "5m", false)
	services := map[string]string{
		schedulesv1connect.SchedulesServiceName: m.schedulesURL,
		tasksv1connect.TasksServiceName:         m.tasksURL,
	}
	w := worker.New(m.temporal, "calls", worker.Options{})
	if err := workerQueues["calls"].register(w, workerDeps{
		Temporal: m.temporal, Mesh: servertest.MeshSigner(), HTTPClient: servertest.HTTPClient(),
		Services: services, Log: logging.Discard(), CallTimeout: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	key, _ := requeststate.GenerateKey()
	sealer, _ := requeststate.NewSealer(key)
	e, err := edge.New(edge.Config{
		Services: services, Mesh: servertest.MeshSigner(), DevAgent: "agent-planner",
		HTTPClient:  servertest.HTTPClient(),
		Elicitation: &edge.Elicitation{Temporal: m.temporal, States: sealer},
	}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)

	user := &scriptedUser{answers: []map[string]any{
		{"cron": "0 9 * * MON-FRI", "interval_seconds": 3600}, // both: the preview refuses it
		{"cron": "0 9 * * MON-FRI", "timezone": "Europe/Paris"},
		{"confirm": true},
	}}
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: user.elicit})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: edge.ModernProtocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "schedules_create", Arguments: map[string]any{
		"description": "weekday stand-up task",
		"action":      map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "prepare the stand-up"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &env); err != nil || env.Status != "ok" {
		t.Fatalf("schedules_create = %s", raw)
	}
	var created schedulesv1.CreateResponse
	if err := protojson.Unmarshal(env.Data, &created); err != nil {
		t.Fatal(err)
	}
	sch := created.GetSchedule()
	if sch.GetCron() != "0 9 * * MON-FRI" || sch.GetTimezone() != "Europe/Paris" || sch.GetStatus() != schedulesv1.ScheduleStatus_SCHEDULE_STATUS_PENDING_APPROVAL {
		t.Errorf("created %+v, want the answered spec, pending approval", sch)
	}

	asked := user.asked
	if len(asked) != 3 {
		t.Fatalf("asked %d questions, want 3: %+v", len(asked), asked)
	}
	spec := []string{"cron", "interval_seconds", "timezone"}
	if !slices.Equal(asked[0].fields, spec) || !strings.HasPrefix(asked[0].message, "Create schedule needs more information") {
		t.Errorf("round 1 = %+v, want the spec", asked[0])
	}
	if !slices.Equal(asked[1].fields, spec) || !strings.Contains(asked[1].message, "give exactly one of cron or interval_seconds") {
		t.Errorf("round 2 = %+v, want the spec again with the preview's reason", asked[1])
	}
	// Round 3 shows the next three runs of the answered spec: the ones
	// schedules_preview gives for it.
	pre, err := m.schedules.Preview(servertest.As(context.Background(), "agent-planner"), &schedulesv1.PreviewRequest{Cron: "0 9 * * MON-FRI", Timezone: "Europe/Paris"})
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, r := range pre.GetRunTimes() {
		runs = append(runs, r.AsTime().UTC().Format(time.RFC3339))
	}
	if len(runs) != 3 || !slices.Equal(asked[2].fields, []string{"confirm"}) || !strings.Contains(asked[2].message, "run times: "+strings.Join(runs, ", ")) {
		t.Errorf("round 3 = %+v, want a confirmation showing the next three runs %v", asked[2], runs)
	}
	list, err := m.schedules.List(servertest.As(context.Background(), "agent-planner"), &schedulesv1.ListRequest{})
	if err != nil || len(list.GetSchedules()) != 1 {
		t.Errorf("agent-planner has %d schedules (%v), want exactly one", len(list.GetSchedules()), err)
	}
}
