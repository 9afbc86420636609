package toolschema

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Forms. An elicitation question asks for some of a tool's inputs with a
// form: an object schema holding those properties of the tool's input
// schema. Forms travel in protobuf messages, so they are structpb.Structs.
// None of the functions below changes the schema it is given, and none
// returns a schema that shares anything with it.

// Subset is the form of the properties of schema named in fields, with
// those of them that schema requires as its required list. Names that
// schema lacks are left out.
func Subset(schema *structpb.Struct, fields []string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}}
	have := schema.GetFields()["properties"].GetStructValue().GetFields()
	props := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, f := range fields {
		if p, ok := have[f]; ok {
			props.Fields[f] = proto.Clone(p).(*structpb.Value)
		}
	}
	out.Fields["properties"] = structpb.NewStructValue(props)
	var req []*structpb.Value
	for _, r := range schema.GetFields()["required"].GetListValue().GetValues() {
		if slices.Contains(fields, r.GetStringValue()) {
			req = append(req, structpb.NewStringValue(r.GetStringValue()))
		}
	}
	if len(req) > 0 {
		out.Fields["required"] = structpb.NewListValue(&structpb.ListValue{Values: req})
	}
	return out
}

// WithoutRequired is a copy of schema without its required list: what an
// answer holds is checked apart from what it lacks (Missing).
func WithoutRequired(schema *structpb.Struct) *structpb.Struct {
	out := proto.Clone(schema).(*structpb.Struct)
	if out == nil || out.Fields == nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	delete(out.Fields, "required")
	return out
}

// Titles are the titles of the properties named in fields, or their names
// when they have none, in the order of fields.
func Titles(schema *structpb.Struct, fields []string) []string {
	props := schema.GetFields()["properties"].GetStructValue().GetFields()
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f
		if t := props[f].GetStructValue().GetFields()["title"].GetStringValue(); t != "" {
			out[i] = t
		}
	}
	return out
}

// Missing lists the properties schema requires that content lacks, has as
// null or has as a blank string, in the order of schema's required list.
func Missing(schema *structpb.Struct, content map[string]any) []string {
	var missing []string
	for _, r := range schema.GetFields()["required"].GetListValue().GetValues() {
		name := r.GetStringValue()
		v, ok := content[name]
		if s, isString := v.(string); !ok || v == nil || (isString && strings.TrimSpace(s) == "") {
			missing = append(missing, name)
		}
	}
	return missing
}

// ValidateAnswer checks content, a user's answer to a form, against the
// form's schema: a client may send anything. The error says what does not
// fit, in words a user can act on. The form's fields are checked one at a
// time, in the order of their names, then the form as a whole: an answer
// with several faults is told the same one every time (workflows check
// answers, and must decide alike when they replay).
func ValidateAnswer(schema *structpb.Struct, content map[string]any) error {
	props := schema.GetFields()["properties"].GetStructValue().GetFields()
	for _, name := range slices.Sorted(maps.Keys(props)) {
		one := WithoutRequired(schema)
		one.Fields["properties"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{name: props[name]}})
		answer := map[string]any{}
		if v, ok := content[name]; ok {
			answer[name] = v
		}
		if err := checkAnswer(one, answer); err != nil {
			return err
		}
	}
	return checkAnswer(schema, content)
}

// checkAnswer checks content against schema.
func checkAnswer(schema *structpb.Struct, content map[string]any) error {
	raw, err := schema.MarshalJSON()
	if err != nil {
		return err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return err
	}
	if err := resolved.Validate(content); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "validating root: "))
	}
	return nil
}
