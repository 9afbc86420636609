package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/memory"
	"github.com/toolmesh/toolmesh/services/memory/memorystore"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// TestStoreFailuresReachToolsAsErrorIDs breaks the stores behind the edge
// — a trigger that refuses with a file path, a locked database, a missing
// table — and checks the tool results an MCP client gets: the fixed message
// and an error_id, nothing of the cause, and the same id on the service's
// rpc.error event that holds the cause.
func TestStoreFailuresReachToolsAsErrorIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logs := &logtest.Buffer{}
	opts := servertest.Options{Log: logging.New(logs, nil)}

	memDB := sqldbtest.Open(t, filepath.Join(dir, "memory.db"))
	mst, err := memorystore.Open(ctx, memDB)
	if err != nil {
		t.Fatal(err)
	}
	msvc, err := memory.New(ctx, mst, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	memSrv := servertest.StartWith(t, opts, msvc.Registration())
	tasksPath := filepath.Join(dir, "tasks.db")
	tasksDB := sqldbtest.Open(t, tasksPath)
	tst, err := tasksstore.Open(ctx, tasksDB)
	if err != nil {
		t.Fatal(err)
	}
	tasksSrv := servertest.StartWith(t, opts, tasks.New(tst, tasks.Config{}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			memoryv1connect.MemoryServiceName: memSrv.URL,
			tasksv1connect.TasksServiceName:   tasksSrv.URL,
		},
		DevAgent:   "local",
		HTTPClient: edgeClient,
	})

	t.Run("failing trigger", func(t *testing.T) {
		const policy = "/etc/toolmesh/memory-policy.d/deny.rules"
		if _, err := memDB.ExecContext(ctx, `CREATE TRIGGER memories_policy BEFORE INSERT ON memories
			BEGIN SELECT RAISE(ABORT, 'blocked by `+policy+`'); END`); err != nil {
			t.Fatal(err)
		}
		raw, env := callRaw(t, s, "memory_save", map[string]any{"key": "deploy/checklist", "content": "Run migrations first."})
		wantHiddenTool(t, logs, raw, env, "internal", policy, policy, "memories", "deny.rules", "blocked")
	})

	t.Run("locked database", func(t *testing.T) {
		tasksDB.SetMaxOpenConns(1)
		if _, err := tasksDB.ExecContext(ctx, `PRAGMA busy_timeout = 50`); err != nil {
			t.Fatal(err)
		}
		holder, err := sqldbtest.Open(t, tasksPath).Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		if _, err := holder.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
			t.Fatal(err)
		}
		raw, env := callRaw(t, s, "tasks_create", map[string]any{"description": "write the report"})
		wantHiddenTool(t, logs, raw, env, "unavailable", "database is locked", "locked", tasksPath)
		if _, err := holder.ExecContext(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("missing table", func(t *testing.T) {
		var created struct{ Task struct{ ID string } }
		okData(t, callTool(t, s, "tasks_create", map[string]any{"description": "write the report"}), &created)
		if _, err := tasksDB.ExecContext(ctx, `DROP TABLE tasks`); err != nil {
			t.Fatal(err)
		}
		raw, env := callRaw(t, s, "tasks_get", map[string]any{"task_id": created.Task.ID})
		wantHiddenTool(t, logs, raw, env, "internal", "no such table: tasks", "read task", tasksPath)
	})
}

// toolError is the error envelope's fields these checks read.
type toolError struct {
	Status     string `json:"status"`
	DomainCode string `json:"domain_code"`
	Message    string `json:"message"`
	ErrorID    string `json:"error_id"`
}

// callRaw calls a tool and returns the whole result as JSON (content and
// structuredContent) and its envelope.
func callRaw(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (string, toolError) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var env toolError
	if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &env) != nil {
		t.Fatalf("tools/call %s: structuredContent %v is not an envelope", name, res.StructuredContent)
	}
	if !res.IsError {
		t.Fatalf("tools/call %s succeeded (%s), want an error", name, raw)
	}
	return string(raw), env
}

// wantHiddenTool checks an error tool result: domain code, the fixed
// message with error_id, none of causes anywhere in the result (content and
// structuredContent), and the cause (containing logged) on the one
// rpc.error event under that id.
func wantHiddenTool(t *testing.T, logs *logtest.Buffer, raw string, env toolError, code, logged string, causes ...string) {
	t.Helper()
	want := rpcerror.MessageInternal
	if code == "unavailable" {
		want = rpcerror.MessageBusy
	}
	// The edge may add how to retry a write after the service's message.
	if env.Status != "error" || env.DomainCode != code || env.ErrorID == "" || !strings.HasPrefix(env.Message, rpcerror.WithID(want, env.ErrorID)) {
		t.Fatalf("envelope %+v, want %s with %q and an error_id", env, code, want)
	}
	if leaked := servertest.InternalText(raw, append(causes, logged)...); len(leaked) > 0 {
		t.Errorf("tool result %s shows %q", raw, leaked)
	}
	event := servertest.LoggedError(t, logs, env.ErrorID)
	if got, _ := event["error"].(string); !strings.Contains(got, logged) {
		t.Errorf("rpc.error under %s: %v, want a cause containing %q", env.ErrorID, event, logged)
	}
}
