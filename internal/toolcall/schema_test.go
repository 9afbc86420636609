package toolcall_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
)

// The error schema is repeated in every tool's output schema, so it says
// only what tells a failure apart: status "error" with an error_type and a
// domain_code. Every envelope the edge sends validates; a success, or an
// error without its codes, does not.
func TestEveryErrorEnvelopeValidates(t *testing.T) {
	raw, err := json.Marshal(toolcall.ErrorSchema())
	if err != nil {
		t.Fatal(err)
	}
	rs := schematest.Compile(t, raw)
	codes := toolcall.Codes()
	if len(codes) < 14 {
		t.Fatalf("domain codes = %v", codes)
	}
	var envs []*toolcall.Envelope
	for _, code := range codes {
		envs = append(envs, toolcall.Fail("tasks_get", code, "it failed"))
	}
	full := toolcall.Invalid("tasks_get", []boundary.Violation{{Field: "task_id", Rule: "string.pattern", Message: "bad"}, {Rule: "arguments.object", Message: "not an object"}})
	full.Violation, full.Gap, full.RetryAfterSeconds = "missing_reason", "tasks.colour", 3
	log := slog.New(slog.DiscardHandler)
	envs = append(envs, full,
		toolcall.FromError(context.Background(), log, "tasks_get", connect.NewError(connect.CodeUnavailable, errors.New("dial tcp: refused"))),
		toolcall.FromError(context.Background(), log, "tasks_get", context.DeadlineExceeded),
		toolcall.FromError(context.Background(), log, "tasks_get", connect.NewError(connect.CodeInternal, errors.New("disk on fire"))),
		toolcall.Internal("tasks_get", "err_01jd8x"),
		toolcall.Fail("", toolcall.CodeInternal, ""))
	for _, env := range envs {
		b, _ := json.Marshal(env)
		if err := schematest.Check(rs, b); err != nil {
			t.Errorf("%s does not validate: %v", b, err)
		}
	}
	for _, bad := range []string{
		`{"status":"ok","data":{}}`,
		`{"status":"error","message":"x"}`,
		`{"status":"error","domain_code":"internal"}`,
		`{"error_type":"InternalError","domain_code":"internal"}`,
	} {
		if err := schematest.Check(rs, []byte(bad)); err == nil {
			t.Errorf("%s validates, want a schema error", bad)
		}
	}
}
