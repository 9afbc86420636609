package boundary_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
)

func TestDecodeJSONRejectsOnceAtItsBoundary(t *testing.T) {
	v, err := boundary.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		payload string
		field   string
	}{
		"valid":         {`{"message":"hi"}`, ""},
		"rule broken":   {`{"message":""}`, "message"},
		"unknown field": {`{"message":"hi","token":"sk-live0123456789abcdefghijkl"}`, "token"},
		"secret value":  {`{"message":"hi","fail":"sk-live0123456789abcdefghijkl"}`, "fail"},
		"not JSON":      {`{"message":`, ""},
		"wrong type":    {`{"message":42}`, "message"},
		"unknown enum":  {`{"message":"hi","fail":"FAILURE_BOGUS"}`, "fail"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			log := logging.New(&buf, logging.ParseLevel("debug"))
			vs := v.DecodeJSON(context.Background(), log, boundary.Webhook, "the payload", []byte(c.payload), &testingv1.EchoRequest{})
			events := strings.Count(buf.String(), "boundary.validation_failed")
			if name == "valid" {
				if vs != nil || events != 0 {
					t.Fatalf("valid payload: violations %v, %d events", vs, events)
				}
				return
			}
			if len(vs) == 0 || events != 1 {
				t.Fatalf("violations %v, %d boundary events; want a rejection logged exactly once", vs, events)
			}
			var ev map[string]any
			if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &ev); err != nil {
				t.Fatal(err)
			}
			if ev["boundary"] != "webhook.payload" || ev["error_count"] != float64(len(vs)) || ev["truncated"] != false {
				t.Errorf("event = %v", ev)
			}
			if c.field != "" && vs[0].Field != c.field {
				t.Errorf("violation field = %q, want %q", vs[0].Field, c.field)
			}
			if strings.Contains(buf.String(), "sk-live0123456789abcdefghijkl") {
				t.Error("a secret-shaped payload value reached the log")
			}
		})
	}
}

func TestRejectionNamesAtMostFiveFields(t *testing.T) {
	var buf bytes.Buffer
	var vs []boundary.Violation
	for _, f := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		vs = append(vs, boundary.Violation{Field: f, Rule: "r", Message: "bad " + f})
	}
	boundary.LogRejection(context.Background(), logging.New(&buf, logging.ParseLevel("debug")), boundary.MCPTool, vs)
	var ev struct {
		Fields     []string `json:"fields"`
		ErrorCount int      `json:"error_count"`
		Truncated  bool     `json:"truncated"`
	}
	if err := json.Unmarshal(buf.Bytes(), &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Fields) != 5 || ev.ErrorCount != 7 || !ev.Truncated {
		t.Errorf("event = %+v, want 5 fields, 7 errors, truncated", ev)
	}
}

// TestLocateJSONFaultUnderAnyMapKey: a map value's fault is named under its
// key whatever characters the key holds.
func TestLocateJSONFaultUnderAnyMapKey(t *testing.T) {
	md := (&testingv1.TakeRequest{}).ProtoReflect().Descriptor()
	v, ok := boundary.LocateJSONFault(md, []byte(`{"scores":{"a\u0001b":"high"}}`), "this tool")
	want := boundary.Violation{Field: `scores["a\x01b"]`, Rule: "type", Message: `must be an integer (from -2147483648 to 2147483647), got "high"`}
	if !ok || v != want {
		t.Errorf("LocateJSONFault = %+v, %v; want %+v", v, ok, want)
	}
}
