package mcpdoor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// firstDeadline is the task call timeout of the edge in these tests: a
// task's first deadline, long enough for the test to extend a task it just
// started on a loaded machine.
const firstDeadline = 8 * time.Second

// extendTask calls calls_extend_task through cs, with the idempotency key
// key ("" for none), and returns its envelope.
func extendTask(t *testing.T, cs *mcp.ClientSession, id string, seconds int, reason, key string) edgetest.FullEnvelope {
	t.Helper()
	params := &mcp.CallToolParams{Name: "calls_extend_task", Arguments: map[string]any{"task_id": id, "extend_seconds": seconds, "reason": reason}}
	if key != "" {
		params.Meta = mcp.Meta{edge.MetaIdempotencyKey: key}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	return edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
}

// On a real dev server, with a calls worker that records in a real audit
// service: an agent's running MCP task, extended by the agent through the
// go-sdk client, outlives its first deadline and completes with its
// result; a retry with the same idempotency key is the same extension
// (one audit record, with the reason); another agent's extension is
// not_found; a task nobody extends is given up at its deadline,
// deadline_exceeded. calls_extend_task is listed with extend_seconds
// required.
func TestAgentExtendsItsRunningTask(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	auditSrv := edgetest.StartAudit(t, 0)
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  edgetest.TestingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: m.Svc.URL, auditv1connect.AuditServiceName: auditSrv.URL},
		HTTPClient: m.Svc.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(m.Tc, m.Queue, worker.Options{})
	calls.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	short := func(c *edge.Config) { c.Elicitation.TaskCallTimeout = firstDeadline }
	f := m.Edge(t, short)
	cs := f.Connect(t, edge.ModernProtocol, "", nil)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "calls_extend_task" })
	if i < 0 {
		t.Fatal("tools/list has no calls_extend_task")
	}
	var schema struct {
		Required []string `json:"required"`
	}
	if b, _ := json.Marshal(tools.Tools[i].InputSchema); json.Unmarshal(b, &schema) != nil || !slices.Contains(schema.Required, "extend_seconds") || !slices.Contains(schema.Required, "reason") {
		t.Errorf("calls_extend_task's input schema = %s, want extend_seconds and reason required", tools.Tools[i].InputSchema)
	}

	iss := identitytest.NewIssuer(t)
	other := m.Edge(t, func(c *edge.Config) { short(c); c.Auth = iss.AuthConfig(t) })
	mallory := other.Connect(t, edge.ModernProtocol, iss.Sign(t, jose.RS256, iss.Valid(edgetest.ResourceFor(other.HTTP), "mallory", "toolmesh:write")), nil)

	// The wait takes two first deadlines; the lone one, nobody extends.
	started := time.Now()
	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": (2 * firstDeadline).Milliseconds()}}, edgetest.TasksCaps))
	lone := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 60000}}, edgetest.TasksCaps))
	if created.ResultType != "task" || lone.ResultType != "task" {
		t.Fatalf("created = %+v and %+v, want tasks", created, lone)
	}

	first := extendTask(t, cs, created.TaskID, 600, "the wait is longer than planned", "extend-1")
	again := extendTask(t, cs, created.TaskID, 600, "the wait is longer than planned", "extend-1")
	var got, retried struct {
		Deadline    time.Time `json:"deadline"`
		MaxDeadline time.Time `json:"max_deadline"`
	}
	if first.Status != "ok" || json.Unmarshal(first.Data, &got) != nil || !got.Deadline.After(started.Add(firstDeadline+9*time.Minute)) {
		t.Fatalf("the agent's extension = %+v, want its task's deadline ten minutes later", first)
	}
	if again.Status != "ok" || json.Unmarshal(again.Data, &retried) != nil || !retried.Deadline.Equal(got.Deadline) {
		t.Errorf("the retried extension = %+v, want the same deadline as the first, %s", again, got.Deadline)
	}
	if env := extendTask(t, cs, created.TaskID, 60, " ", ""); env.Status != "error" || env.DomainCode != "invalid_argument" {
		t.Errorf("an extension without a reason = %+v, want invalid_argument", env)
	}
	if env := extendTask(t, mallory, created.TaskID, 600, "mine now", ""); env.Status != "error" || env.DomainCode != "not_found" {
		t.Errorf("another agent's extension = %+v, want not_found", env)
	}

	done := awaitTask(t, f.URL, created.TaskID, "the task to end", terminal)
	if done.Status != "completed" || done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"waited_millis"`) {
		t.Errorf("the extended task = %+v, want completed with the wait's result", done)
	}
	if took := time.Since(started); took < 2*firstDeadline {
		t.Errorf("the task ended after %s, before the wait could", took)
	}

	list, err := auditv1connect.NewAuditServiceClient(auditSrv.Client(), auditSrv.URL, servertest.ClientOptions(nil)...).List(
		mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "owner", Agent: "owner", Roles: []string{mesh.RoleOwner}}}),
		&auditv1.ListRequest{Tool: "calls_extend_task"})
	if err != nil {
		t.Fatal(err)
	}
	if recs := list.GetRecords(); len(recs) != 1 || recs[0].GetReason() != "the wait is longer than planned" || recs[0].GetActor() != identity.DevSubject {
		t.Errorf("audit records of calls_extend_task = %v, want one, with the reason, by %s", recs, identity.DevSubject)
	}

	// Nobody extended this one: it was given up at its first deadline.
	given := awaitTask(t, f.URL, lone.TaskID, "the task to end", terminal)
	if given.Status != "completed" || given.Result == nil || !given.Result.IsError || !strings.Contains(string(given.Result.StructuredContent), "deadline_exceeded") {
		t.Errorf("the task nobody extended = %+v, want completed with deadline_exceeded", given)
	}
}
