package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
)

func TestOneEdgeServesEveryProtocolVersion(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			var mu sync.Mutex
			//lint:ignore SA1019 the 2025-era logging feature (deprecated from 2026-07-28 on) is what this test checks
			var logs []*mcp.LoggingMessageParams
			//lint:ignore SA1019 the 2025-era logging feature (deprecated from 2026-07-28 on) is what this test checks
			cs := f.Connect(t, v, "", &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
				mu.Lock()
				logs = append(logs, r.Params)
				mu.Unlock()
			}})
			init := cs.InitializeResult()
			if init.ProtocolVersion != v {
				t.Fatalf("negotiated %q, want %q", init.ProtocolVersion, v)
			}
			caps := init.Capabilities
			//lint:ignore SA1019 the 2025-era logging feature (deprecated from 2026-07-28 on) is what this test checks
			if caps.Tools == nil || caps.Logging == nil || caps.Prompts != nil || caps.Resources != nil || caps.Completions != nil {
				t.Errorf("capabilities = %+v, want exactly tools and logging", caps)
			}
			if init.ServerInfo == nil || init.ServerInfo.Name != "toolmesh" {
				t.Errorf("server info = %+v", init.ServerInfo)
			}

			ctx := context.Background()
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			if !slices.IsSorted(names) || len(names) != 11 {
				t.Errorf("tools = %v, want all 11 test tools, sorted", names)
			}

			_, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "hi"})
			var echo struct {
				AgentID        string   `json:"agent_id"`
				Subject        string   `json:"subject"`
				Roles          []string `json:"roles"`
				IdempotencyKey string   `json:"idempotency_key"`
			}
			if err := json.Unmarshal(env.Data, &echo); err != nil || env.Status != "ok" {
				t.Fatalf("testing_echo = %+v (%v)", env, err)
			}
			if echo.AgentID != "local" || echo.Subject != identity.DevSubject || !slices.Equal(echo.Roles, []string{"owner"}) || !strings.HasPrefix(echo.IdempotencyKey, "mcp-") {
				t.Errorf("identity at the service = %+v, want the local owner and an idempotency key", echo)
			}

			// Both eras can receive log messages about failed calls.
			params := &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "x", "fail": "FAILURE_NOT_FOUND"}}
			if v >= edge.ModernProtocol {
				//lint:ignore SA1019 the 2025-era logging feature (deprecated from 2026-07-28 on) is what this test checks
				params.Meta = mcp.Meta{mcp.MetaKeyLogLevel: "warning"}
				if err := cs.Ping(ctx, nil); err == nil {
					t.Error("ping succeeded on the stateless protocol, where it was removed")
				}
			} else {
				if err := cs.Ping(ctx, nil); err != nil {
					t.Errorf("ping: %v", err)
				}
				//lint:ignore SA1019 the 2025-era logging feature (deprecated from 2026-07-28 on) is what this test checks
				if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
					t.Fatalf("logging/setLevel: %v", err)
				}
			}
			res, err := cs.CallTool(ctx, params)
			if err != nil || !res.IsError {
				t.Fatalf("failing call = %v, %v", res, err)
			}
			edgetest.WaitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(logs) > 0 }, "a log message about the failed call")
			mu.Lock()
			if data, _ := json.Marshal(logs[0].Data); logs[0].Level != "warning" || !strings.Contains(string(data), "not_found") {
				t.Errorf("log message = %+v %s", logs[0], data)
			}
			mu.Unlock()
		})
	}
}

func TestProgressReachesTheClientOnEveryEra(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.MCP.ProgressInterval = 40 * time.Millisecond })
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			var mu sync.Mutex
			var got []float64
			cs := f.Connect(t, v, "", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				got = append(got, r.Params.Progress)
				mu.Unlock()
			}})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_wait", Arguments: map[string]any{"millis": 300}, Meta: mcp.Meta{"progressToken": "p1"}})
			if err != nil || res.IsError {
				t.Fatalf("testing_wait = %v, %v", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) < 2 || !slices.IsSorted(got) {
				t.Errorf("progress = %v, want at least a start and a heartbeat, increasing", got)
			}
		})
	}
}

func TestEveryDomainCodeIsReachable(t *testing.T) {
	t.Parallel()
	// The call timeout only has to end the deadline case's wait; every
	// other case must answer well within it, however loaded the machine.
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.CallTimeout = 3 * time.Second })
	cs := f.Connect(t, "", "", nil)
	cases := []struct {
		name, tool string
		args       map[string]any
		code       string
		errorType  string
	}{
		{"not found", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_NOT_FOUND"}, "not_found", "NotFoundError"},
		{"conflict", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_CONFLICT"}, "conflict", "ConflictError"},
		{"service rate limit", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_RATE_LIMITED"}, "rate_limited", "RateLimitError"},
		{"service permission", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_PERMISSION_DENIED"}, "permission_denied", "PermissionDeniedError"},
		{"service identity", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_UNAUTHENTICATED"}, "unauthenticated", "UnauthenticatedError"},
		{"unimplemented", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_UNIMPLEMENTED"}, "not_supported", "NotSupportedError"},
		{"capability gap", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_CAPABILITY_GAP"}, "capability_gap", "CapabilityGapError"},
		{"unavailable", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_UNAVAILABLE"}, "unavailable", "UnavailableError"},
		{"internal", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_INTERNAL_SECRET"}, "internal", "InternalError"},
		{"service panic", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_PANIC"}, "internal", "InternalError"},
		{"service invalid argument", "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_INVALID_ARGUMENT"}, "invalid_argument", "ArgumentValidationError"},
		{"edge validation", "testing_echo", map[string]any{"message": ""}, "invalid_argument", "ArgumentValidationError"},
		{"deadline", "testing_wait", map[string]any{"millis": 60000}, "deadline_exceeded", "DeadlineExceededError"},
		{"guardrail", "testing_purge", map[string]any{"agent_id": "a1"}, "guardrail_violated", "GuardrailViolationError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, env := edgetest.CallEnv(t, cs, c.tool, c.args)
			if !res.IsError || env.Status != "error" || env.DomainCode != c.code || env.ErrorType != c.errorType || env.Tool != c.tool || env.Message == "" {
				t.Errorf("envelope = %+v, want %s / %s", env, c.code, c.errorType)
			}
		})
	}
	_, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_CAPABILITY_GAP"})
	if env.Gap != "testing.echo_channel" || !strings.Contains(env.Message, "testing.echo_channel") {
		t.Errorf("capability_gap envelope = %+v, want it to name the gap", env)
	}

	// The codes that need another edge configuration.
	readOnly := edgetest.NewFixture(t, func(c *edge.Config) { c.ReadOnly = true })
	if _, env := edgetest.CallEnv(t, readOnly.Connect(t, "", "", nil), "testing_write", map[string]any{"note": "n"}); env.DomainCode != "read_only" || env.ErrorType != "ReadOnlyError" {
		t.Errorf("read-only edge: %+v, want read_only", env)
	}
	limited := edgetest.NewFixture(t, func(c *edge.Config) { c.RateLimit = edge.RateLimit{PerSecond: 0.001, Burst: 1} })
	lcs := limited.Connect(t, "", "", nil)
	edgetest.CallEnv(t, lcs, "testing_echo", map[string]any{"message": "first"})
	if _, env := edgetest.CallEnv(t, lcs, "testing_echo", map[string]any{"message": "second"}); env.DomainCode != "rate_limited" || env.RetryAfterSeconds < 1 {
		t.Errorf("edge rate limit: %+v, want rate_limited with retry_after_seconds", env)
	}
	unconfigured := edgetest.NewFixture(t, func(c *edge.Config) { c.Services = nil })
	if _, env := edgetest.CallEnv(t, unconfigured.Connect(t, "", "", nil), "testing_echo", map[string]any{"message": "x"}); env.DomainCode != "not_supported" {
		t.Errorf("tool without a backend: %+v, want not_supported", env)
	}
}

func TestGapAndNotSupportedEmitOneEventEach(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	cs := f.Connect(t, "", "", nil)
	edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_CAPABILITY_GAP"})
	edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_UNIMPLEMENTED"})
	edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "x"})
	gaps, unsupported := f.Logs.Events("mcp.capability_gap"), f.Logs.Events("mcp.not_supported")
	if len(gaps) != 1 || gaps[0]["gap"] != "testing.echo_channel" || gaps[0]["tool"] != "testing_echo" {
		t.Errorf("mcp.capability_gap events = %v, want one naming the gap", gaps)
	}
	if len(unsupported) != 1 || unsupported[0]["tool"] != "testing_echo" {
		t.Errorf("mcp.not_supported events = %v, want one", unsupported)
	}
}

func TestListToolsPageWithOffsetAndLimit(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	cs := f.Connect(t, "", "", nil)
	_, env := edgetest.CallEnv(t, cs, "testing_list_items", map[string]any{})
	if env.Status != "ok" || env.Pagination == nil || env.Pagination.Limit != 50 || env.Pagination.Offset != 0 ||
		env.Pagination.Total != testingsvc.ItemCount || env.Pagination.NextOffset == nil || *env.Pagination.NextOffset != 50 {
		t.Fatalf("default page = %+v %+v, want offset 0, limit 50, next_offset 50", env, env.Pagination)
	}
	_, env = edgetest.CallEnv(t, cs, "testing_list_items", map[string]any{"offset": 100, "limit": 100})
	if env.Pagination == nil || env.Pagination.NextOffset != nil || !strings.Contains(string(env.Data), "item-119") {
		t.Errorf("last page = %+v, want no next_offset", env.Pagination)
	}
	for name, args := range map[string]map[string]any{
		"boolean limit":   {"limit": true},
		"boolean offset":  {"offset": false},
		"negative limit":  {"limit": -1},
		"negative offset": {"offset": -5},
		"limit too large": {"limit": 101},
		"string limit":    {"limit": "ten"},
		"fractional":      {"limit": 2.5},
	} {
		t.Run(name, func(t *testing.T) {
			if _, env := edgetest.CallEnv(t, cs, "testing_list_items", args); env.DomainCode != "invalid_argument" || len(env.Violations) == 0 {
				t.Errorf("envelope = %+v, want invalid_argument with a violation", env)
			}
		})
	}
	if n := f.Backend.Calls("ListItems"); n != 2 {
		t.Errorf("backend saw %d list calls, want 2 (rejected ones never reach it)", n)
	}
}

func TestAdminGuardrails(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	cs := f.Connect(t, "", "", nil)
	cases := []struct {
		name      string
		args      map[string]any
		violation string
	}{
		{"nothing", map[string]any{"agent_id": "a1"}, "missing_confirm"},
		{"confirm 1", map[string]any{"agent_id": "a1", "confirm": 1, "reason": "cleanup"}, "missing_confirm"},
		{"confirm string true", map[string]any{"agent_id": "a1", "confirm": "true", "reason": "cleanup"}, "missing_confirm"},
		{"confirm yes", map[string]any{"agent_id": "a1", "confirm": "yes", "reason": "cleanup"}, "missing_confirm"},
		{"confirm false", map[string]any{"agent_id": "a1", "confirm": false, "reason": "cleanup"}, "missing_confirm"},
		{"confirm object", map[string]any{"agent_id": "a1", "confirm": map[string]any{}, "reason": "cleanup"}, "missing_confirm"},
		{"no reason", map[string]any{"agent_id": "a1", "confirm": true}, "missing_reason"},
		{"blank reason", map[string]any{"agent_id": "a1", "confirm": true, "reason": " \t\n"}, "missing_reason"},
		{"reason not a string", map[string]any{"agent_id": "a1", "confirm": true, "reason": 42}, "missing_reason"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, env := edgetest.CallEnv(t, cs, "testing_purge", c.args)
			if env.DomainCode != "guardrail_violated" || env.Violation != c.violation {
				t.Errorf("envelope = %+v, want guardrail_violated / %s", env, c.violation)
			}
		})
	}
	if n := f.Backend.Calls("Purge"); n != 0 {
		t.Fatalf("refused admin calls reached the service %d times", n)
	}
	refusals := f.Logs.Events("mcp.guardrail")
	if len(refusals) != len(cases) {
		t.Fatalf("%d mcp.guardrail events for %d refused calls, want one each: %v", len(refusals), len(cases), refusals)
	}
	for i, ev := range refusals {
		if ev["tool"] != "testing_purge" || ev["violation"] != cases[i].violation || ev["subject"] != identity.DevSubject {
			t.Errorf("mcp.guardrail event %d = %v, want tool testing_purge, violation %s, the caller's subject", i, ev, cases[i].violation)
		}
	}
	if ev := f.Logs.Events("mcp.admin_op.executed"); len(ev) != 0 {
		t.Fatalf("refused admin calls emitted %d mcp.admin_op.executed events", len(ev))
	}

	res, env := edgetest.CallEnv(t, cs, "testing_purge", map[string]any{"agent_id": "a1", "confirm": true, "reason": "cleanup after the test"})
	if res.IsError {
		t.Fatalf("confirmed admin call = %+v", env)
	}
	if n := len(f.Logs.Events("mcp.guardrail")); n != len(cases) {
		t.Errorf("a confirmed admin call logged a guardrail event (%d events)", n)
	}
	ev := f.Logs.Events("mcp.admin_op.executed")
	if len(ev) != 1 || ev[0]["tool"] != "testing_purge" || ev[0]["reason"] != "cleanup after the test" || ev[0]["subject"] != identity.DevSubject {
		t.Errorf("mcp.admin_op.executed events = %v, want exactly one for the call", ev)
	}
	// An admin call that fails at the service is not an executed admin op.
	edgetest.CallEnv(t, cs, "testing_grant", map[string]any{"agent_id": "a1", "amount": "0", "confirm": true, "reason": "bonus"})
	if ev := f.Logs.Events("mcp.admin_op.executed"); len(ev) != 1 {
		t.Errorf("mcp.admin_op.executed events = %d after a failed admin call, want still 1", len(ev))
	}
}

func TestAdminInputsAppearInSchemasAndReachMessageFields(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	cs := f.Connect(t, "", "", nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		_ = json.Unmarshal(raw, &s)
		admin := tool.Name == "testing_purge" || tool.Name == "testing_grant"
		_, hasConfirm := s.Properties["confirm"]
		if admin != (hasConfirm && slices.Contains(s.Required, "confirm") && slices.Contains(s.Required, "reason")) {
			t.Errorf("%s: confirm/reason in schema = %v, want %v", tool.Name, hasConfirm, admin)
		}
		if admin != (tool.Annotations.DestructiveHint != nil && *tool.Annotations.DestructiveHint) {
			t.Errorf("%s: destructiveHint = %v", tool.Name, tool.Annotations.DestructiveHint)
		}
		read := tool.Name == "testing_echo" || tool.Name == "testing_list_items" || tool.Name == "testing_peek" || tool.Name == "testing_wait" || tool.Name == "testing_remind_preview"
		if tool.Annotations.ReadOnlyHint != read {
			t.Errorf("%s: readOnlyHint = %v, want %v", tool.Name, tool.Annotations.ReadOnlyHint, read)
		}
	}
	// testing_grant has its own reason field: the admin reason fills it.
	_, env := edgetest.CallEnv(t, cs, "testing_grant", map[string]any{"agent_id": "a1", "amount": "5", "confirm": true, "reason": "welcome bonus"})
	if env.Status != "ok" || !strings.Contains(string(env.Data), `"balance":"5"`) {
		t.Errorf("testing_grant = %+v", env)
	}
}

func TestReadOnlyModeRefusesWritesWithoutCallingTheService(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.ReadOnly = true })
	cs := f.Connect(t, "", "", nil)
	_, env := edgetest.CallEnv(t, cs, "testing_write", map[string]any{"note": "n"})
	if env.DomainCode != "read_only" || env.Message != "Cannot write a note in read-only mode." {
		t.Errorf("WRITE tool: %+v", env)
	}
	_, env = edgetest.CallEnv(t, cs, "testing_purge", map[string]any{"agent_id": "a1", "confirm": true, "reason": "r"})
	if env.DomainCode != "read_only" || env.Message != "Cannot purge notes in read-only mode." {
		t.Errorf("ADMIN tool: %+v", env)
	}
	if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "still here"}); env.Status != "ok" {
		t.Errorf("READ tool in read-only mode: %+v, want ok", env)
	}
	if f.Backend.Calls("Write")+f.Backend.Calls("Purge") != 0 {
		t.Error("read-only mode called the service for a write")
	}
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if noted := strings.HasPrefix(tool.Description, "Unavailable: this edge runs in read-only mode."); noted == tool.Annotations.ReadOnlyHint {
			t.Errorf("%s: read-only note = %v, readOnlyHint = %v", tool.Name, noted, tool.Annotations.ReadOnlyHint)
		}
	}
}

func TestDuplicateToolNamesStopTheEdge(t *testing.T) {
	t.Parallel()
	dup := testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("DuplicateService")
	_, err := edge.New(edge.Config{
		Contracts: []protoreflect.ServiceDescriptor{edgetest.TestingService(), dup},
		Mesh:      servertest.MeshSigner(),
	}, logging.Discard())
	if err == nil || !strings.Contains(err.Error(), "toolmesh.testing.v1.TestingService.Echo") || !strings.Contains(err.Error(), "toolmesh.testing.v1.DuplicateService.Repeat") {
		t.Fatalf("edge.New with a duplicate tool name = %v, want an error naming both RPCs", err)
	}
}

func TestIdempotencyKeyFromMeta(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	cs := f.Connect(t, "", "", nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "x"},
		Meta: mcp.Meta{edge.MetaIdempotencyKey: "retry-7"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), `"idempotency_key":"mcp-client-retry-7"`) {
		t.Errorf("result = %s, want the client's key at the service", raw)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "x"},
		Meta: mcp.Meta{edge.MetaIdempotencyKey: "bad key with spaces"}})
	if err != nil || !res.IsError {
		t.Errorf("bad idempotency key = %v, %v, want an invalid_argument envelope", res, err)
	}
}

func TestAClientThatGivesUpCancelsTheServiceCall(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.CallTimeout = 30 * time.Second })
	for i, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			cs := f.Connect(t, v, "", nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "testing_wait", Arguments: map[string]any{"millis": 20000}})
				done <- err
			}()
			edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait") == i+1 }, "the wait to reach the service")
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the cancelled call returned a result")
			}
			edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait.cancelled") == i+1 }, "the service call to be cancelled")
		})
	}
}

func TestSessionStreamAndDelete(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	resp, body := edgetest.Post(t, f.URL, http.Header{}, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize = %d %s", resp.StatusCode, body)
	}
	h := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-06-18"}}
	edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	get := func() *http.Response {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
		req.Header = h.Clone()
		req.Header.Set("Accept", "text/event-stream")
		res, err := edgetest.TestClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	stream := get()
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET stream = %d %s", stream.StatusCode, stream.Header.Get("Content-Type"))
	}
	stream.Body.Close()

	if status := edgetest.Delete(t, f.URL, h); status != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", status)
	}
	if after := get(); after.StatusCode != http.StatusNotFound {
		t.Errorf("GET after DELETE = %d, want 404 (the session is gone)", after.StatusCode)
	}
}
