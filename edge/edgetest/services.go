package edgetest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// StartTasks serves a real tasks service on SQLite.
func StartTasks(t *testing.T) *servertest.Server { return StartTasksB(t) }

func StartTasksB(t testing.TB) *servertest.Server {
	svc, _ := StartTasksWithStore(t)
	return svc
}

func StartTasksWithStore(t testing.TB) (*servertest.Server, *tasksstore.Store) {
	t.Helper()
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "tasks.db"))
	st, err := tasksstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, tasks.New(st, tasks.Config{}).Registration()), st
}

// StartEdge serves an edge with cfg and returns a connected go-sdk client
// session.
func StartEdge(t *testing.T, cfg edge.Config) *mcp.ClientSession { return StartEdgeB(t, cfg) }

func StartEdgeB(t testing.TB, cfg edge.Config) *mcp.ClientSession {
	t.Helper()
	url := ServeEdgeB(t, cfg)
	client := mcp.NewClient(&mcp.Implementation{Name: "edge-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect MCP client: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// ServeEdgeB serves an edge with cfg and returns its base URL.
func ServeEdgeB(t testing.TB, cfg edge.Config) string {
	t.Helper()
	if cfg.Mesh == nil {
		cfg.Mesh = servertest.MeshSigner() // the key every test service accepts
	}
	e, err := edge.New(cfg, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// TasksOnly configures an edge whose only backend is svc (nil: an
// unreachable address). The edge shares svc's client so the test server can
// close its connections when it stops.
func TasksOnly(svc *servertest.Server) edge.Config {
	if svc == nil {
		return edge.Config{Services: map[string]string{tasksv1connect.TasksServiceName: "http://127.0.0.1:1"}, Mesh: servertest.MeshSigner()}
	}
	return edge.Config{
		Services:    map[string]string{tasksv1connect.TasksServiceName: svc.URL},
		CallTimeout: 5 * time.Second,
		HTTPClient:  svc.Client(),
		Mesh:        servertest.MeshSigner(),
	}
}

// Envelope is the decoded structuredContent of a tool result.
type Envelope struct {
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data"`
	Pagination *struct {
		Offset, Limit, Total int
		NextOffset           *int `json:"next_offset"`
	} `json:"pagination"`
	Tool       string `json:"tool"`
	ErrorType  string `json:"error_type"`
	DomainCode string `json:"domain_code"`
	Message    string `json:"message"`
	Violations []struct {
		Field, Rule, Message string
	} `json:"violations"`
}

func Call(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var env Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("structuredContent is not an envelope: %s", raw)
	}
	if len(res.Content) != 1 {
		t.Fatalf("result has %d content blocks, want 1", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	var fromText, structured any
	if err := json.Unmarshal([]byte(text.Text), &fromText); err != nil {
		t.Fatalf("text content is not JSON: %s", text.Text)
	}
	_ = json.Unmarshal(raw, &structured)
	if !cmp.Equal(structured, fromText) {
		t.Errorf("text content %s does not match structuredContent %s", text.Text, raw)
	}
	if res.IsError != (env.Status != "ok") {
		t.Errorf("isError = %v for status %q", res.IsError, env.Status)
	}
	CheckOutput(t, cs, tool, raw)
	return res, env
}

// OutputSchemas holds, per client session, the compiled output schemas of
// the tools it lists.
var OutputSchemas sync.Map

// CheckOutput checks a result's structuredContent against the output schema
// its tool declares, as a client that validates results does: every
// result, success or error, must validate.
func CheckOutput(t *testing.T, cs *mcp.ClientSession, tool string, structured []byte) {
	t.Helper()
	v, ok := OutputSchemas.Load(cs)
	if !ok {
		schemas := map[string]*jsonschema.Resolved{}
		for tl, err := range cs.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			raw, err := json.Marshal(tl.OutputSchema)
			if err != nil {
				t.Fatal(err)
			}
			schemas[tl.Name] = schematest.Compile(t, raw)
		}
		v, _ = OutputSchemas.LoadOrStore(cs, schemas)
	}
	rs, listed := v.(map[string]*jsonschema.Resolved)[tool]
	if !listed {
		return // a tool hidden from this caller
	}
	if err := schematest.Check(rs, structured); err != nil {
		t.Errorf("%s: structuredContent does not validate against the tool's outputSchema: %v\n%s", tool, err, structured)
	}
}

// StartAudit serves a real audit service on SQLite holding n records of
// tasks_cancel calls, appended the way the edge appends them.
func StartAudit(t *testing.T, n int) *servertest.Server {
	t.Helper()
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "audit.db"))
	st, err := auditstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, audit.New(st, audit.Config{}).Registration())
	rec := audittrail.NewRecorder(auditv1connect.NewAuditServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...), audittrail.RecorderOptions{})
	for i := range n {
		if _, err := rec.Record(ctx, audittrail.Entry{
			CallID: "mcp-seed-" + string(rune('a'+i)), Actor: "local", Tool: "tasks_cancel", Reason: "cleanup",
			Arguments: &tasksv1.CancelRequest{TaskId: "tsk_00000000000000000000000000"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// NewNotesFixture serves an edge in front of the test backend's testing and
// notes services.
func NewNotesFixture(t *testing.T, configure func(*edge.Config)) *Fixture {
	t.Helper()
	backend := testingsvc.New()
	svc := servertest.Start(t, backend.Server(), backend.NotesServer())
	return NewFixtureOn(t, backend, svc, func(c *edge.Config) {
		c.Contracts = []protoreflect.ServiceDescriptor{TestingService(),
			testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingNotesService")}
		c.Services[testingv1connect.TestingNotesServiceName] = svc.URL
		if configure != nil {
			configure(c)
		}
	})
}
