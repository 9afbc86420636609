package toolschema_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolschema"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
)

// take is the request with one field of every kind and rule.
var take = (&testingv1.TakeRequest{}).ProtoReflect().Descriptor()

// comments documents a few descriptors of take, as proto comments would.
func comments(name protoreflect.FullName) string {
	return map[protoreflect.FullName]string{
		"toolmesh.testing.v1.TakeRequest.plain": "A string without rules.",
		"toolmesh.testing.v1.TakeRequest.name":  "Required and at most 20 characters.",
		"toolmesh.testing.v1.TakeRequest.shade": "How dark.",
		"toolmesh.testing.v1.SHADE_LIGHT":       "As light as it gets.",
		"toolmesh.testing.v1.SHADE_MEDIUM":      "In between.",
		"toolmesh.testing.v1.SHADE_DARK":        "As dark as it gets.",
		"toolmesh.testing.v1.Inner.label":       "The inner name.",
	}[name]
}

// asJSON is s as a client reads it: marshalled and parsed again, so that
// Go's integer types and JSON's numbers compare alike.
func asJSON(t *testing.T, s any) any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func parse(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("want %s: %v", s, err)
	}
	return v
}

// TestInputSchemaOfEachFieldKind: the input schema of each field carries its
// kind's JSON shape and its protovalidate rules, so a model sees the
// contract before it calls.
func TestInputSchemaOfEachFieldKind(t *testing.T) {
	inner := `{"type":"object","additionalProperties":false,"required":["label"],
		"properties":{"label":{"type":"string","minLength":1,"maxLength":8,"description":"The inner name."}}}`
	cases := []struct{ field, want string }{
		// Strings: lengths, patterns, formats, fixed values.
		{"plain", `{"type":"string","description":"A string without rules."}`},
		{"bounded", `{"type":"string","minLength":2,"maxLength":10}`},
		{"exact", `{"type":"string","minLength":4,"maxLength":4}`},
		{"code", `{"type":"string","pattern":"^[A-Z]{3}$"}`},
		{"prefixed", `{"type":"string","pattern":"^tsk_"}`},
		{"email", `{"type":"string","format":"email"}`},
		{"uri", `{"type":"string","format":"uri"}`},
		{"uuid", `{"type":"string","format":"uuid"}`},
		{"host", `{"type":"string","format":"hostname"}`},
		{"choice", `{"type":"string","enum":["a","b"]}`},
		{"fixed", `{"type":"string","const":"x"}`},
		{"name", `{"type":"string","maxLength":20,"description":"Required and at most 20 characters."}`},
		// Booleans and bytes (base64, as protojson writes them).
		{"flag", `{"type":"boolean"}`},
		{"blob", `{"type":"string","contentEncoding":"base64"}`},
		// 32-bit integers are JSON integers with their bounds.
		{"count", `{"type":"integer","minimum":1,"maximum":10}`},
		{"positive", `{"type":"integer","exclusiveMinimum":0}`},
		{"unsigned", `{"type":"integer","minimum":0}`},
		{"pick", `{"type":"integer","enum":[1,2,3]}`},
		{"maybe", `{"type":"integer"}`},
		// 64-bit integers travel as decimal strings (protojson), so no
		// precision is lost; their bounds are said in words.
		{"amount", `{"type":"string","pattern":"^-?[0-9]+$","description":"A decimal integer as a string. Must be > 0 and <= 1000."}`},
		{"wide", `{"type":"string","pattern":"^-?[0-9]+$"}`},
		{"huge", `{"type":"string","pattern":"^[0-9]+$"}`},
		{"ratio", `{"type":"number","minimum":0,"exclusiveMaximum":1}`},
		// Enums by name, never the zero value; the field's comment wins over
		// the values' comments.
		{"shade", `{"type":"string","enum":["SHADE_LIGHT","SHADE_MEDIUM","SHADE_DARK"],"description":"How dark."}`},
		{"shade_not_dark", `{"type":"string","enum":["SHADE_LIGHT","SHADE_MEDIUM"],
			"description":"SHADE_LIGHT: As light as it gets.\nSHADE_MEDIUM: In between."}`},
		// Repeated fields and maps with their bounds and item rules.
		{"tags", `{"type":"array","items":{"type":"string","maxLength":5},"minItems":1,"maxItems":3,"uniqueItems":true}`},
		{"scores", `{"type":"object","additionalProperties":{"type":"integer","minimum":0},"maxProperties":2}`},
		// Nested messages carry their own rules, alone or repeated.
		{"inner", inner},
		{"inners", `{"type":"array","items":` + inner + `}`},
		// Well-known types in their protojson shapes.
		{"at", `{"type":"string","format":"date-time"}`},
		{"wait", `{"type":"string","pattern":"^-?[0-9]+(\\.[0-9]{1,9})?s$","description":"A duration in seconds with an s suffix, e.g. \"90s\" or \"1.5s\"."}`},
		// Non-blank text (toolmesh.rules.v1.non_blank): a character other
		// than whitespace somewhere; beside another pattern, both apply.
		{"text", `{"type":"string","pattern":"\\S"}`},
		{"words", `{"type":"array","items":{"type":"string","pattern":"^[^,]*$","allOf":[{"pattern":"\\S"}]}}`},
		// Each member of a oneof is a property of its own.
		{"agent_id", `{"type":"string"}`},
		{"group_id", `{"type":"string"}`},
	}
	s := asJSON(t, toolschema.Input(take, comments)).(map[string]any)
	props := s["properties"].(map[string]any)
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			if diff := cmp.Diff(parse(t, c.want), props[c.field]); diff != "" {
				t.Errorf("schema of %s (-want +got):\n%s", c.field, diff)
			}
		})
	}
	if got, want := len(props), take.Fields().Len(); got != want {
		t.Errorf("%d properties, want one per field (%d)", got, want)
	}
}

// TestInputSchemaOfTheMessage: the request as a whole is a closed object of
// the draft in use, lists its required fields, and says in words the rules
// that tie fields together.
func TestInputSchemaOfTheMessage(t *testing.T) {
	s := asJSON(t, toolschema.Input(take, comments)).(map[string]any)
	delete(s, "properties")
	want := parse(t, `{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"type": "object",
		"additionalProperties": false,
		"required": ["name"],
		"description": "Rules: low must not exceed high; set exactly one of: cron, interval_seconds."
	}`)
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("request schema (-want +got):\n%s", diff)
	}
}

// TestRecursiveMessagesStop: a message that contains itself is described
// to a fixed depth, then as an open object, so the schema stays finite.
func TestRecursiveMessagesStop(t *testing.T) {
	s := asJSON(t, toolschema.Input(take, comments)).(map[string]any)
	node := s["properties"].(map[string]any)["node"].(map[string]any)
	depth := 1
	for {
		props, ok := node["properties"].(map[string]any)
		if !ok {
			break
		}
		node = props["child"].(map[string]any)
		depth++
	}
	if depth != 8 || node["type"] != "object" || len(node) != 1 {
		t.Errorf("the recursion ends at depth %d in %v, want an open object at depth 8", depth, node)
	}
}

// TestSchemaWithoutRules: a message described without its rules keeps the
// shapes and loses the bounds and the required list.
func TestSchemaWithoutRules(t *testing.T) {
	s := asJSON(t, toolschema.Message(take, comments, false)).(map[string]any)
	props := s["properties"].(map[string]any)
	for field, want := range map[string]string{
		"bounded": `{"type":"string"}`,
		"count":   `{"type":"integer"}`,
		"name":    `{"type":"string","description":"Required and at most 20 characters."}`,
		"tags":    `{"type":"array","items":{"type":"string"}}`,
		"inner":   `{"type":"object","additionalProperties":false,"properties":{"label":{"type":"string","description":"The inner name."}}}`,
	} {
		if diff := cmp.Diff(parse(t, want), props[field]); diff != "" {
			t.Errorf("schema of %s without rules (-want +got):\n%s", field, diff)
		}
	}
	for _, key := range []string{"required", "description", "$schema"} {
		if v, ok := s[key]; ok {
			t.Errorf("schema without rules has %s = %v", key, v)
		}
	}
}
