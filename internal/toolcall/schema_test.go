package toolcall_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
)

// Every field an envelope can carry is described by the schemas: the error
// schema, or (data, pagination, untrusted, notes) the success envelope's. Fields never sent
// (json "-") are the edge's own.
func TestErrorSchemaDescribesEveryEnvelopeField(t *testing.T) {
	props := toolcall.ErrorSchema()["properties"].(map[string]any)
	et := reflect.TypeFor[toolcall.Envelope]()
	for i := range et.NumField() {
		name, _, _ := strings.Cut(et.Field(i).Tag.Get("json"), ",")
		if name == "data" || name == "pagination" || name == "untrusted" || name == "notes" || name == "-" {
			continue
		}
		if _, ok := props[name]; !ok {
			t.Errorf("envelope field %q is missing from ErrorSchema", name)
		}
	}
}

func TestEveryErrorEnvelopeValidates(t *testing.T) {
	raw, err := json.Marshal(toolcall.ErrorSchema())
	if err != nil {
		t.Fatal(err)
	}
	rs := schematest.Compile(t, raw)
	codes := toolcall.ErrorSchema()["properties"].(map[string]any)["domain_code"].(map[string]any)["enum"].([]string)
	if len(codes) < 14 {
		t.Fatalf("domain codes in the schema = %v", codes)
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
		`{"status":"error","error_type":"InternalError","domain_code":"on_fire","message":"x"}`,
		`{"status":"error","message":"x"}`,
		`{"status":"error","error_type":"InternalError","domain_code":"internal","retry_after_seconds":"soon"}`,
	} {
		if err := schematest.Check(rs, []byte(bad)); err == nil {
			t.Errorf("%s validates, want a schema error", bad)
		}
	}
}
