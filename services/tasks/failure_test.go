package tasks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// storeFixture is the tasks service on a SQLite file whose store a test
// breaks.
type storeFixture struct {
	srv  *servertest.Server
	db   *sqldb.DB
	path string
	logs *logtest.Buffer
}

func startOnFile(t *testing.T) *storeFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.db")
	db := sqldbtest.Open(t, path)
	st, err := tasksstore.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	srv := servertest.StartWith(t, servertest.Options{Log: logging.New(logs, nil)}, tasks.New(st, tasks.Config{}).Registration())
	return &storeFixture{srv: srv, db: db, path: path, logs: logs}
}

// answer is what a caller got: the code, the message and the error id.
type answer struct {
	code    connect.Code
	message string
	id      string
}

// call makes one RPC over transport ("connect", "grpc" or "rest"): REST
// as method and path with body, the others through a client.
func (f *storeFixture) call(t *testing.T, transport, agent string, rpc func(context.Context, tasksv1connect.TasksServiceClient) error, method, path, body string) answer {
	t.Helper()
	if transport != "rest" {
		var opts []connect.ClientOption
		for _, p := range servertest.Protocols() {
			if p.Name == transport {
				opts = p.Opts
			}
		}
		c := tasksv1connect.NewTasksServiceClient(f.srv.Client(), f.srv.URL, servertest.ClientOptions(opts)...)
		err := rpc(servertest.As(context.Background(), agent), c)
		if err == nil {
			return answer{}
		}
		ce, _ := err.(*connect.Error)
		return answer{code: connect.CodeOf(err), message: ce.Message(), id: rpcerror.ID(err)}
	}
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", servertest.Bearer(agent))
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return answer{}
	}
	var e struct {
		Code    int
		Message string
		Details []struct{ Metadata map[string]string }
	}
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
		t.Fatalf("REST error body: %v", err)
	}
	a := answer{code: connect.Code(e.Code), message: e.Message}
	for _, d := range e.Details {
		if id := d.Metadata[rpcerror.MetadataErrorID]; id != "" {
			a.id = id
		}
	}
	return a
}

// TestStoreFailuresShowNoInternalText breaks the real store three ways — a
// missing table, a database locked by another connection, a trigger that
// refuses with a file path in its text — and checks what Connect, gRPC and
// REST callers get: a fixed message with an error id, the cause logged
// under that id, and a locked database as retryable Unavailable.
func TestStoreFailuresShowNoInternalText(t *testing.T) {
	const hook = "/var/lib/toolmesh/hooks/tasks-insert.sh"
	create := func(ctx context.Context, c tasksv1connect.TasksServiceClient) error {
		_, err := c.Create(ctx, &tasksv1.CreateRequest{Description: "write the report"})
		return err
	}
	for _, transport := range []string{"connect", "grpc", "rest"} {
		t.Run(transport, func(t *testing.T) {
			t.Run("missing table", func(t *testing.T) {
				f := startOnFile(t)
				if a := f.call(t, transport, "agent-a", create, http.MethodPost, "/v1/tasks", `{"description":"write the report"}`); a.code != 0 {
					t.Fatalf("create before the failure: %+v", a)
				}
				if _, err := f.db.ExecContext(t.Context(), `DROP TABLE tasks`); err != nil {
					t.Fatal(err)
				}
				get := func(ctx context.Context, c tasksv1connect.TasksServiceClient) error {
					_, err := c.Get(ctx, &tasksv1.GetRequest{TaskId: "tsk_01jd8x00000000000000000000"})
					return err
				}
				a := f.call(t, transport, "agent-a", get, http.MethodGet, "/v1/tasks/tsk_01jd8x00000000000000000000", "")
				f.wantHidden(t, a, connect.CodeInternal, "no such table: tasks", "tasks", f.path)
			})
			t.Run("failing trigger", func(t *testing.T) {
				f := startOnFile(t)
				if _, err := f.db.ExecContext(t.Context(),
					`CREATE TRIGGER tasks_hook BEFORE INSERT ON tasks BEGIN SELECT RAISE(ABORT, 'refused by `+hook+`'); END`); err != nil {
					t.Fatal(err)
				}
				a := f.call(t, transport, "agent-a", create, http.MethodPost, "/v1/tasks", `{"description":"write the report"}`)
				f.wantHidden(t, a, connect.CodeInternal, hook, hook, "hooks", "refused", "tasks")
			})
			t.Run("locked database", func(t *testing.T) {
				f := startOnFile(t)
				// The service's one connection waits 50 ms for a lock.
				f.db.SetMaxOpenConns(1)
				if _, err := f.db.ExecContext(t.Context(), `PRAGMA busy_timeout = 50`); err != nil {
					t.Fatal(err)
				}
				holder, err := sqldbtest.Open(t, f.path).Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Close()
				if _, err := holder.ExecContext(t.Context(), `BEGIN EXCLUSIVE`); err != nil {
					t.Fatal(err)
				}
				a := f.call(t, transport, "agent-a", create, http.MethodPost, "/v1/tasks", `{"description":"write the report"}`)
				f.wantHidden(t, a, connect.CodeUnavailable, "database is locked", "locked", f.path)
				if _, err := holder.ExecContext(t.Context(), `ROLLBACK`); err != nil {
					t.Fatal(err)
				}
				// Unavailable means nothing was done: the retry creates the
				// one task.
				if a := f.call(t, transport, "agent-a", create, http.MethodPost, "/v1/tasks", `{"description":"write the report"}`); a.code != 0 {
					t.Fatalf("retry after the lock is released: %+v", a)
				}
				var n int
				if err := f.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM tasks`).Scan(&n); err != nil || n != 1 {
					t.Errorf("tasks after a refused create and its retry: %d (%v), want 1", n, err)
				}
			})
		})
	}
}

// wantHidden checks that a is code with the fixed message and an error id,
// shows none of causes, and that the one rpc.error event under its id holds
// the cause (logged, containing logged).
func (f *storeFixture) wantHidden(t *testing.T, a answer, code connect.Code, logged string, causes ...string) {
	t.Helper()
	want := rpcerror.MessageInternal
	if code == connect.CodeUnavailable {
		want = rpcerror.MessageBusy
	}
	if a.code != code || a.id == "" || a.message != rpcerror.WithID(want, a.id) {
		t.Fatalf("answer %+v, want %s with %q and an error id", a, code, want)
	}
	if leaked := servertest.InternalText(a.message, causes...); len(leaked) > 0 {
		t.Errorf("answer %q shows %q", a.message, leaked)
	}
	event := servertest.LoggedError(t, f.logs, a.id)
	if got, _ := event["error"].(string); !strings.Contains(got, logged) || event["code"] != code.String() {
		t.Errorf("rpc.error under %s: %v, want code %s and a cause containing %q", a.id, event, code, logged)
	}
}
