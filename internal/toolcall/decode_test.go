package toolcall_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
)

// bindContracts are the test contracts: TestingService and KindsService.
func bindContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService"),
		testingv1.File_toolmesh_testing_v1_kinds_proto.Services().ByName("KindsService"),
	}
}

// bind binds every tool of the test contracts, without backends, logging
// to logs.
func bind(t *testing.T, logs *logtest.Buffer) map[string]*toolcall.Binding {
	t.Helper()
	b, err := toolcall.BindAll(toolcall.BindConfig{Contracts: bindContracts(), Log: logging.New(logs, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validTake is a testing_take call that keeps every rule of TakeRequest;
// each case changes one thing.
var validTake = map[string]any{
	"name": "n", "bounded": "ab", "exact": "abcd", "code": "ABC", "prefixed": "tsk_1",
	"email": "a@example.com", "uri": "https://example.com/x", "uuid": "123e4567-e89b-12d3-a456-426614174000",
	"host": "example.com", "choice": "a", "fixed": "x", "count": 1, "positive": 1, "pick": 2,
	"amount": "5", "tags": []string{"a"}, "cron": "0 9 * * *",
}

// takeWith is validTake with changes; a nil value removes the argument.
func takeWith(t *testing.T, changes map[string]any) json.RawMessage {
	t.Helper()
	args := maps.Clone(validTake)
	for k, v := range changes {
		if v == nil {
			delete(args, k)
			continue
		}
		args[k] = v
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeAcceptsWhatTheSchemaDescribes: arguments that keep the rules
// decode into the request, 64-bit integers as strings or numbers.
func TestDecodeAcceptsWhatTheSchemaDescribes(t *testing.T) {
	b := bind(t, &logtest.Buffer{})["testing_take"]
	for name, args := range map[string]json.RawMessage{
		"int64 as a string": takeWith(t, nil),
		"int64 as a number": takeWith(t, map[string]any{"amount": 7}),
		"enum by name":      takeWith(t, map[string]any{"shade": "SHADE_DARK"}),
		"nested and maps":   takeWith(t, map[string]any{"inner": map[string]any{"label": "l"}, "scores": map[string]int{"a": 1}}),
		"one of a oneof":    takeWith(t, map[string]any{"agent_id": "agent-1"}),
		"well-known types":  takeWith(t, map[string]any{"at": "2030-01-01T09:00:00Z", "wait": "1.5s"}),
	} {
		msg, vs := b.Decode(context.Background(), args)
		if vs != nil || msg == nil {
			t.Errorf("%s: Decode(%s) = %v, want the request", name, args, vs)
		}
	}
	msg, _ := b.Decode(context.Background(), takeWith(t, map[string]any{"amount": 7}))
	if got := msg.(*testingv1.TakeRequest).GetAmount(); got != 7 {
		t.Errorf("amount = %d, want 7", got)
	}
}

// TestDecodeRefusesBadArguments: every fault is named — the field, the
// broken rule and what is wrong — and each refusal is logged once at the
// mcp.tool boundary.
func TestDecodeRefusesBadArguments(t *testing.T) {
	notObject := []boundary.Violation{{Rule: "arguments.object", Message: "arguments must be a JSON object"}}
	cases := []struct {
		name string
		args json.RawMessage
		want []boundary.Violation // Message "" matches any message
	}{
		// Not an object.
		{"an array", json.RawMessage(`["n"]`), notObject},
		{"a string", json.RawMessage(`"name=n"`), notObject},
		{"a number", json.RawMessage(` 42`), notObject},
		{"a boolean", json.RawMessage(`true`), notObject},
		// Absent and null arguments are the empty object, which lacks what
		// the tool requires.
		{"null", json.RawMessage(`null`), nil},
		{"absent", nil, nil},
		// Decoding: unknown fields, wrong types, broken JSON.
		{"unknown field", takeWith(t, map[string]any{"nmae": "n"}), []boundary.Violation{{Field: "nmae", Rule: "unknown_field"}}},
		{"string for an int32", takeWith(t, map[string]any{"count": "many"}), []boundary.Violation{{Field: "count", Rule: "type"}}},
		{"string for a boolean", takeWith(t, map[string]any{"flag": "yes"}), []boundary.Violation{{Field: "flag", Rule: "type"}}},
		{"not a decimal int64", takeWith(t, map[string]any{"amount": "5x"}), []boundary.Violation{{Field: "amount", Rule: "type"}}},
		{"unknown enum name", takeWith(t, map[string]any{"shade": "SHADE_PURPLE"}), []boundary.Violation{{Field: "shade", Rule: "type"}}},
		{"object for a string", takeWith(t, map[string]any{"name": map[string]any{}}), []boundary.Violation{{Field: "name", Rule: "type"}}},
		{"broken JSON", json.RawMessage(`{"name":`), []boundary.Violation{{Rule: "json.syntax"}}},
		{"both members of a oneof", takeWith(t, map[string]any{"agent_id": "a", "group_id": "g"}), []boundary.Violation{{Field: "group_id", Rule: "oneof"}}},
		// A decode fault is named by its path, in the input schema's names.
		{"type of a two-word field", takeWith(t, map[string]any{"interval_seconds": "often"}), []boundary.Violation{{Field: "interval_seconds", Rule: "type"}}},
		{"two-word field by its JSON name", takeWith(t, map[string]any{"cron": nil, "intervalSeconds": "often"}), []boundary.Violation{{Field: "interval_seconds", Rule: "type"}}},
		{"unknown field in a nested message", takeWith(t, map[string]any{"inner": map[string]any{"lable": "l"}}), []boundary.Violation{{Field: "inner.lable", Rule: "unknown_field"}}},
		{"type in a nested message", takeWith(t, map[string]any{"inner": map[string]any{"label": 7}}), []boundary.Violation{{Field: "inner.label", Rule: "type"}}},
		{"string for a message", takeWith(t, map[string]any{"inner": "l"}), []boundary.Violation{{Field: "inner", Rule: "type"}}},
		{"fault in a list item", takeWith(t, map[string]any{"inners": []any{map[string]any{"label": "a"}, map[string]any{"label": true}}}), []boundary.Violation{{Field: "inners[1].label", Rule: "type"}}},
		{"scalar list item", takeWith(t, map[string]any{"tags": []any{"a", 2}}), []boundary.Violation{{Field: "tags[1]", Rule: "type"}}},
		{"object for a list", takeWith(t, map[string]any{"tags": map[string]any{}}), []boundary.Violation{{Field: "tags", Rule: "type"}}},
		{"map value", takeWith(t, map[string]any{"scores": map[string]any{"a": 1, "b": "high"}}), []boundary.Violation{{Field: `scores["b"]`, Rule: "type"}}},
		{"deep in a recursive message", takeWith(t, map[string]any{"node": map[string]any{"child": map[string]any{"child": map[string]any{"kid": nil}}}}), []boundary.Violation{{Field: "node.child.child.kid", Rule: "unknown_field"}}},
		{"not a time", takeWith(t, map[string]any{"at": "tomorrow"}), []boundary.Violation{{Field: "at", Rule: "type"}}},
		{"field given twice", json.RawMessage(`{"name":"n","interval_seconds":1,"intervalSeconds":2}`), []boundary.Violation{{Field: "interval_seconds", Rule: "type"}}},
		// Validation: the protovalidate rules, with the field's path.
		{"too short", takeWith(t, map[string]any{"bounded": "a"}), []boundary.Violation{{Field: "bounded", Rule: "string.min_len"}}},
		{"pattern", takeWith(t, map[string]any{"code": "abc"}), []boundary.Violation{{Field: "code", Rule: "string.pattern"}}},
		{"format", takeWith(t, map[string]any{"email": "not an address"}), []boundary.Violation{{Field: "email", Rule: "string.email"}}},
		{"required", takeWith(t, map[string]any{"name": nil}), []boundary.Violation{{Field: "name", Rule: "required"}}},
		{"blank text", takeWith(t, map[string]any{"text": " \t\n"}), []boundary.Violation{{Field: "text", Rule: "string.non_blank", Message: "must not be empty or only whitespace"}}},
		{"blank repeated item", takeWith(t, map[string]any{"words": []string{"a", "  "}}), []boundary.Violation{{Field: "words[1]", Rule: "string.non_blank"}}},
		{"int64 bound", takeWith(t, map[string]any{"amount": "1001"}), []boundary.Violation{{Field: "amount", Rule: "int64.gt_lte"}}},
		{"excluded enum value", takeWith(t, map[string]any{"shade_not_dark": "SHADE_DARK"}), []boundary.Violation{{Field: "shade_not_dark", Rule: "enum.not_in"}}},
		{"repeated bound", takeWith(t, map[string]any{"tags": []string{}}), []boundary.Violation{{Field: "tags", Rule: "repeated.min_items"}}},
		{"repeated items unique", takeWith(t, map[string]any{"tags": []string{"a", "a"}}), []boundary.Violation{{Field: "tags", Rule: "repeated.unique"}}},
		{"repeated item rule", takeWith(t, map[string]any{"tags": []string{"toolong"}}), []boundary.Violation{{Field: "tags[0]", Rule: "string.max_len"}}},
		{"map value rule", takeWith(t, map[string]any{"scores": map[string]int{"k": -1}}), []boundary.Violation{{Field: `scores["k"]`, Rule: "int32.gte"}}},
		{"nested rule", takeWith(t, map[string]any{"inner": map[string]any{}}), []boundary.Violation{{Field: "inner.label", Rule: "required"}}},
		{"message rule", takeWith(t, map[string]any{"low": 2, "high": 1}), []boundary.Violation{{Rule: "take.window", Message: "low must not exceed high"}}},
		{"message oneof rule", takeWith(t, map[string]any{"cron": nil}), []boundary.Violation{{Rule: "message.oneof"}}},
		{"two faults at once", takeWith(t, map[string]any{"bounded": "a", "count": 11}),
			[]boundary.Violation{{Field: "bounded", Rule: "string.min_len"}, {Field: "count", Rule: "int32.gte_lte"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &logtest.Buffer{}
			b := bind(t, logs)["testing_take"]
			msg, vs := b.Decode(context.Background(), c.args)
			if msg != nil || len(vs) == 0 {
				t.Fatalf("Decode(%s) = %v, %v; want a refusal", c.args, msg, vs)
			}
			for _, v := range vs {
				if v.Message == "" || v.Rule == "" {
					t.Errorf("violation %+v does not say what is wrong", v)
				}
			}
			if c.want != nil {
				got := make([]boundary.Violation, len(vs))
				for i, v := range vs {
					got[i] = boundary.Violation{Field: v.Field, Rule: v.Rule}
					if i < len(c.want) && c.want[i].Message != "" {
						got[i].Message = v.Message
					}
				}
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Errorf("violations of %s (-want +got):\n%s", c.args, diff)
				}
			}
			if events := logs.Events("boundary.validation_failed"); len(events) != 1 || events[0]["boundary"] != boundary.MCPTool {
				t.Errorf("logged %v, want one boundary.validation_failed event at %s", events, boundary.MCPTool)
			}
		})
	}
}

// TestDecodeOfEmptyArgumentsNamesWhatIsRequired: a call with no arguments
// learns every field it must give.
func TestDecodeOfEmptyArgumentsNamesWhatIsRequired(t *testing.T) {
	b := bind(t, &logtest.Buffer{})["testing_take"]
	_, vs := b.Decode(context.Background(), nil)
	got := map[string]string{}
	for _, v := range vs {
		got[v.Field] = v.Rule
	}
	for field, rule := range map[string]string{"name": "required", "bounded": "string.min_len", "tags": "repeated.min_items", "": "message.oneof"} {
		if got[field] != rule {
			t.Errorf("violation of %q = %q, want %q (all: %v)", field, got[field], rule, vs)
		}
	}
}

// TestUnknownFieldNamesTheAcceptedOnes: a misspelt argument's refusal lists
// what the tool takes, so a model can correct itself.
func TestUnknownFieldNamesTheAcceptedOnes(t *testing.T) {
	b := bind(t, &logtest.Buffer{})["testing_echo"]
	_, vs := b.Decode(context.Background(), json.RawMessage(`{"mesage":"hi"}`))
	want := []boundary.Violation{{Field: "mesage", Rule: "unknown_field", Message: `unknown field "mesage"; this tool accepts: message, fail`}}
	if diff := cmp.Diff(want, vs); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// TestDecodeFaultsSayWhatTheFieldTakes: a decode fault says what the field
// takes and what it was given, in the names the input schema shows; a
// misspelt field within a nested message lists that message's fields.
func TestDecodeFaultsSayWhatTheFieldTakes(t *testing.T) {
	b := bind(t, &logtest.Buffer{})["testing_take"]
	for _, c := range []struct {
		name string
		args json.RawMessage
		want boundary.Violation
	}{
		{"an enum", takeWith(t, map[string]any{"shade": "PURPLE"}),
			boundary.Violation{Field: "shade", Rule: "type", Message: `must be one of SHADE_LIGHT, SHADE_MEDIUM, SHADE_DARK, got "PURPLE"`}},
		{"a 32-bit integer", takeWith(t, map[string]any{"interval_seconds": 1e12}),
			boundary.Violation{Field: "interval_seconds", Rule: "type", Message: "must be an integer (from -2147483648 to 2147483647), got 1000000000000"}},
		{"a duration", takeWith(t, map[string]any{"wait": 90}),
			boundary.Violation{Field: "wait", Rule: "type", Message: `must be a duration in seconds, e.g. "90s" or "1.5s", got 90`}},
		{"a nested unknown field", takeWith(t, map[string]any{"inners": []any{map[string]any{"name": "x"}}}),
			boundary.Violation{Field: "inners[0].name", Rule: "unknown_field", Message: `unknown field "name"; inners[0] accepts: label`}},
		{"a map's value", takeWith(t, map[string]any{"scores": map[string]any{"a": 1, "b": "high"}}),
			boundary.Violation{Field: `scores["b"]`, Rule: "type", Message: `must be an integer (from -2147483648 to 2147483647), got "high"`}},
		{"a oneof", takeWith(t, map[string]any{"agent_id": "a", "group_id": "g"}),
			boundary.Violation{Field: "group_id", Rule: "oneof", Message: "give only one of agent_id, group_id: agent_id is given too"}},
		{"a long value", takeWith(t, map[string]any{"flag": strings.Repeat("é", 40)}),
			boundary.Violation{Field: "flag", Rule: "type", Message: `must be true or false, got "` + strings.Repeat("é", 28) + "…"}},
	} {
		_, vs := b.Decode(context.Background(), c.args)
		if diff := cmp.Diff([]boundary.Violation{c.want}, vs); diff != "" {
			t.Errorf("%s: violations (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestViolationsDoNotLog: Violations reports what is wrong without counting
// it as a rejection (the edge asks the user for elicitable fields).
func TestViolationsDoNotLog(t *testing.T) {
	logs := &logtest.Buffer{}
	b := bind(t, logs)["testing_take"]
	vs := b.Violations(takeWith(t, map[string]any{"name": nil}))
	if len(vs) != 1 || vs[0].Field != "name" {
		t.Errorf("Violations = %v, want name required", vs)
	}
	if vs := b.Violations(takeWith(t, nil)); vs != nil {
		t.Errorf("Violations of valid arguments = %v", vs)
	}
	if strings.Contains(logs.String(), "boundary.validation_failed") {
		t.Errorf("Violations logged a rejection: %s", logs)
	}
}
