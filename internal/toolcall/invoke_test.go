package toolcall_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	testingv1connect "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestEveryCodeHasItsDomainCode: each Connect code a service answers with
// becomes one domain code and error type, and the service's message is
// passed on (scrubbed), so a model can tell fixing its arguments from
// waiting from giving up.
func TestEveryCodeHasItsDomainCode(t *testing.T) {
	cases := []struct {
		code       connect.Code
		domainCode string
		errorType  string
		message    string
	}{
		{connect.CodeInvalidArgument, toolcall.CodeInvalidArgument, "ArgumentValidationError", "said the service"},
		{connect.CodeOutOfRange, toolcall.CodeInvalidArgument, "ArgumentValidationError", "said the service"},
		{connect.CodeNotFound, toolcall.CodeNotFound, "NotFoundError", "said the service"},
		{connect.CodeAlreadyExists, toolcall.CodeConflict, "ConflictError", "said the service"},
		{connect.CodeAborted, toolcall.CodeConflict, "ConflictError", "said the service"},
		{connect.CodeFailedPrecondition, toolcall.CodeConflict, "ConflictError", "said the service"},
		{connect.CodeResourceExhausted, toolcall.CodeRateLimited, "RateLimitError", "said the service"},
		{connect.CodePermissionDenied, toolcall.CodePermissionDenied, "PermissionDeniedError", "said the service"},
		{connect.CodeUnauthenticated, toolcall.CodeUnauthenticated, "UnauthenticatedError", "said the service"},
		{connect.CodeUnimplemented, toolcall.CodeNotSupported, "NotSupportedError", "said the service"},
		{connect.CodeUnavailable, toolcall.CodeUnavailable, "UnavailableError", "said the service"},
		{connect.CodeDeadlineExceeded, toolcall.CodeDeadlineExceeded, "DeadlineExceededError", "the service did not answer in time"},
		{connect.CodeCanceled, toolcall.CodeUnavailable, "UnavailableError", "the call was cancelled"},
		{connect.CodeDataLoss, toolcall.CodeInternal, "InternalError", "said the service"},
	}
	for _, c := range cases {
		t.Run(c.code.String(), func(t *testing.T) {
			logs := &logtest.Buffer{}
			err := connect.NewWireError(c.code, errors.New("said the service"))
			env := toolcall.FromError(context.Background(), logging.New(logs, nil), "testing_echo", err)
			want := &toolcall.Envelope{Status: "error", Tool: "testing_echo", DomainCode: c.domainCode, ErrorType: c.errorType, Message: c.message}
			if diff := cmp.Diff(want, env, cmpopts.IgnoreUnexported(toolcall.Envelope{})); diff != "" {
				t.Errorf("envelope (-want +got):\n%s", diff)
			}
			if !env.IsError() {
				t.Error("IsError() = false for an error envelope")
			}
			if logs.String() != "" {
				t.Errorf("a service's deliberate answer was logged: %s", logs)
			}
		})
	}
	// A message with a secret in it is scrubbed on the way.
	env := toolcall.FromError(context.Background(), logging.New(&logtest.Buffer{}, nil), "testing_echo",
		connect.NewWireError(connect.CodeNotFound, errors.New("no row for password=hunter2hunter2")))
	if env.Message != "no row for password=[REDACTED]" {
		t.Errorf("message = %q, want the secret scrubbed", env.Message)
	}
	// An unknown domain code is internal, never a made-up class.
	if env := toolcall.Fail("testing_echo", "made_up", "m"); env.DomainCode != toolcall.CodeInternal || env.ErrorType != "InternalError" {
		t.Errorf("Fail with an unknown code = %+v, want internal", env)
	}
}

// callMesh is a testing service behind a real h2c listener and the
// bindings of its tools.
type callMesh struct {
	backend *testingsvc.Service
	tools   map[string]*toolcall.Binding
	logs    *logtest.Buffer
}

func startCallMesh(t *testing.T) *callMesh {
	t.Helper()
	m := &callMesh{backend: testingsvc.New(), logs: &logtest.Buffer{}}
	srv := servertest.Start(t, m.backend.Server())
	b, err := toolcall.BindAll(toolcall.BindConfig{
		Services:   map[string]string{testingv1connect.TestingServiceName: srv.URL},
		HTTPClient: srv.Client(),
		Log:        logging.New(m.logs, nil),
		Contracts:  bindContracts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	m.tools = b
	return m
}

// call decodes args for tool and invokes it as agent-1 with key.
func (m *callMesh) call(t *testing.T, tool, args, key string) *toolcall.Envelope {
	t.Helper()
	b := m.tools[tool]
	msg, vs := b.Decode(context.Background(), json.RawMessage(args))
	if vs != nil {
		t.Fatalf("%s(%s): %v", tool, args, vs)
	}
	return b.Invoke(context.Background(), msg, servertest.MeshSigner(), mesh.Call{
		Caller:         mesh.Caller{Subject: "user-1", Agent: "agent-1", Roles: []string{"owner"}, Depth: 1},
		IdempotencyKey: key,
	})
}

// TestListToolsAnswerTheirPage: a list tool's page leaves its data for the
// envelope's pagination, with the next offset until the last page.
func TestListToolsAnswerTheirPage(t *testing.T) {
	m := startCallMesh(t)
	next := int32(110)
	cases := []struct {
		args  string
		items int
		page  toolcall.Pagination
	}{
		{`{}`, 50, toolcall.Pagination{Offset: 0, Limit: 50, Total: testingsvc.ItemCount, NextOffset: ptr(int32(50))}},
		{`{"offset":100,"limit":10}`, 10, toolcall.Pagination{Offset: 100, Limit: 10, Total: testingsvc.ItemCount, NextOffset: &next}},
		{`{"offset":110,"limit":50}`, 10, toolcall.Pagination{Offset: 110, Limit: 50, Total: testingsvc.ItemCount}},
	}
	for _, c := range cases {
		env := m.call(t, "testing_list_items", c.args, "")
		var data map[string]json.RawMessage
		if err := json.Unmarshal(env.Data, &data); err != nil || env.Status != "ok" {
			t.Fatalf("%s: %+v (%v)", c.args, env, err)
		}
		var items []string
		_ = json.Unmarshal(data["items"], &items)
		if _, ok := data["page"]; ok || len(items) != c.items {
			t.Errorf("%s: data %s, want %d items and no page", c.args, env.Data, c.items)
		}
		if diff := cmp.Diff(&c.page, env.Pagination); diff != "" {
			t.Errorf("%s: pagination (-want +got):\n%s", c.args, diff)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestInvokeCarriesTheCallerAndTheKey: the service sees the caller's
// identity and idempotency key, and the data comes back with proto names
// and default values.
func TestInvokeCarriesTheCallerAndTheKey(t *testing.T) {
	m := startCallMesh(t)
	env := m.call(t, "testing_echo", `{"message":"hi"}`, "key-1")
	want := `{"message":"hi","agent_id":"agent-1","subject":"user-1","roles":["owner"],"depth":1,"idempotency_key":"key-1"}`
	var got, w any
	_ = json.Unmarshal(env.Data, &got)
	_ = json.Unmarshal([]byte(want), &w)
	if diff := cmp.Diff(w, got); diff != "" || env.Status != "ok" || env.Pagination != nil {
		t.Errorf("envelope %+v; data (-want +got):\n%s", env, diff)
	}
}

// TestInvokeAnswersFailuresAsEnvelopes: a service's refusal, a service's
// own validation, a missing backend and an unreachable service each give
// one error envelope.
func TestInvokeAnswersFailuresAsEnvelopes(t *testing.T) {
	m := startCallMesh(t)
	for fail, code := range map[string]string{
		"FAILURE_NOT_FOUND":        toolcall.CodeNotFound,
		"FAILURE_RATE_LIMITED":     toolcall.CodeRateLimited,
		"FAILURE_CONFLICT":         toolcall.CodeConflict,
		"FAILURE_INVALID_ARGUMENT": toolcall.CodeInvalidArgument,
	} {
		if env := m.call(t, "testing_echo", `{"message":"hi","fail":"`+fail+`"}`, ""); env.DomainCode != code {
			t.Errorf("%s: envelope %+v, want %s", fail, env, code)
		}
	}
	gap := m.call(t, "testing_echo", `{"message":"hi","fail":"FAILURE_CAPABILITY_GAP"}`, "")
	if gap.DomainCode != toolcall.CodeCapabilityGap || gap.Gap != "testing.echo_channel" {
		t.Errorf("capability gap: %+v", gap)
	}

	// The service checks the contract too: a request the edge did not
	// decode comes back with the service's violations.
	echo := m.tools["testing_echo"]
	msg, _ := echo.Decode(context.Background(), json.RawMessage(`{"message":"hi"}`))
	msg.(*testingv1.EchoRequest).Message = ""
	env := echo.Invoke(context.Background(), msg, servertest.MeshSigner(), mesh.Call{Caller: mesh.Caller{Agent: "agent-1"}})
	if want := []boundary.Violation{{Field: "message", Rule: "required", Message: "value is required"}}; env.DomainCode != toolcall.CodeInvalidArgument || !cmp.Equal(want, env.Violations) {
		t.Errorf("service validation: %+v, want violations %v", env, want)
	}

	// A tool of a contract whose service is not configured.
	take := m.tools["testing_take"]
	msg, vs := take.Decode(context.Background(), takeWith(t, nil))
	if vs != nil || take.HasBackend() {
		t.Fatalf("testing_take: %v, backend %v", vs, take.HasBackend())
	}
	if env := take.Invoke(context.Background(), msg, servertest.MeshSigner(), mesh.Call{}); env.DomainCode != toolcall.CodeNotSupported {
		t.Errorf("no backend: %+v, want not_supported", env)
	}

	// A service nobody listens for.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	logs := &logtest.Buffer{}
	b, err := toolcall.BindAll(toolcall.BindConfig{
		Services:   map[string]string{testingv1connect.TestingServiceName: url},
		HTTPClient: servertest.HTTPClient(),
		Log:        logging.New(logs, nil),
		Contracts:  bindContracts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	msg, _ = b["testing_echo"].Decode(context.Background(), json.RawMessage(`{"message":"hi"}`))
	env = b["testing_echo"].Invoke(context.Background(), msg, servertest.MeshSigner(), mesh.Call{Caller: mesh.Caller{Agent: "agent-1"}})
	if env.DomainCode != toolcall.CodeUnavailable || env.ErrorID == "" || len(logs.Events("tool.error")) != 1 {
		t.Errorf("unreachable service: %+v, logged %s; want unavailable with an error id, its cause logged once", env, logs)
	}

	// A service whose HTTP server refuses the request in plain text, as
	// net/http does a request it cannot read: no handler saw the call, so
	// it is unavailable (retryable), with net/http's reason logged.
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "400 Bad Request: malformed MIME header line", http.StatusBadRequest)
	}))
	defer refusing.Close()
	logs = &logtest.Buffer{}
	b, err = toolcall.BindAll(toolcall.BindConfig{
		Services:   map[string]string{testingv1connect.TestingServiceName: refusing.URL},
		HTTPClient: meshclient.HTTP(),
		Log:        logging.New(logs, nil),
		Contracts:  bindContracts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	env = b["testing_echo"].Invoke(context.Background(), msg, servertest.MeshSigner(), mesh.Call{Caller: mesh.Caller{Agent: "agent-1"}})
	events := logs.Events("tool.error")
	if env.DomainCode != toolcall.CodeUnavailable || env.ErrorID == "" || len(events) != 1 ||
		!strings.Contains(fmt.Sprint(events[0]["error"]), "malformed MIME header line") {
		t.Errorf("a plain-text 400: %+v, logged %s; want unavailable with an error id, net/http's reason logged once", env, logs)
	}
}
