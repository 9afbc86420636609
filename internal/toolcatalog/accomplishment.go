package toolcatalog

import (
	"encoding/json"
	"fmt"
	"regexp"

	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Accomplishment is what a successful call of a tool achieved when one
// field of its request has a value (the tool option's accomplishments),
// e.g. "task_completed" when tasks_update_status sets status to
// TASK_STATUS_COMPLETED.
type Accomplishment struct {
	// Name is recorded with the call's outcome.
	Name string
	// Field is the request's top-level string or enum field.
	Field protoreflect.FieldDescriptor
	// Value is the string or the enum value's name the field must have;
	// empty for any non-empty string.
	Value string
}

// accomplishmentName is the form of an accomplishment's name (the outcome
// log's pattern).
var accomplishmentName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// bindAccomplishments reads t's accomplishments option.
func bindAccomplishments(t *Tool, opts []*toolv1.Accomplishment) error {
	for _, o := range opts {
		if !accomplishmentName.MatchString(o.GetName()) {
			return fmt.Errorf("tool %q: accomplishment name %q is not lower snake case (at most 64 characters)", t.Name, o.GetName())
		}
		fd := t.Method.Input().Fields().ByName(protoreflect.Name(o.GetField()))
		if fd == nil || fd.IsList() || fd.IsMap() {
			return fmt.Errorf("tool %q: accomplishment %q: %q is not a single field of %s", t.Name, o.GetName(), o.GetField(), t.Method.Input().FullName())
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
		case protoreflect.EnumKind:
			if fd.Enum().Values().ByName(protoreflect.Name(o.GetValue())) == nil {
				return fmt.Errorf("tool %q: accomplishment %q: %q is not a value of %s", t.Name, o.GetName(), o.GetValue(), fd.Enum().FullName())
			}
		default:
			return fmt.Errorf("tool %q: accomplishment %q: field %q is neither a string nor an enum", t.Name, o.GetName(), o.GetField())
		}
		t.Accomplishments = append(t.Accomplishments, Accomplishment{Name: o.GetName(), Field: fd, Value: o.GetValue()})
	}
	return nil
}

// Accomplished names the first of t's accomplishments that the arguments
// of a successful call hold, or "" for none. The arguments are the call's
// JSON object as the client sent it: an enum field may name its value or
// give its number, as the request's JSON mapping allows.
func (t *Tool) Accomplished(arguments json.RawMessage) string {
	if len(t.Accomplishments) == 0 || len(arguments) == 0 {
		return ""
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(arguments, &args) != nil {
		return ""
	}
	for _, a := range t.Accomplishments {
		raw, ok := args[a.Field.JSONName()]
		if !ok {
			raw, ok = args[string(a.Field.Name())]
		}
		if ok && a.holds(raw) {
			return a.Name
		}
	}
	return ""
}

func (a Accomplishment) holds(raw json.RawMessage) bool {
	var s string
	if a.Field.Kind() == protoreflect.EnumKind {
		var n int32
		if json.Unmarshal(raw, &n) == nil {
			v := a.Field.Enum().Values().ByNumber(protoreflect.EnumNumber(n))
			return v != nil && string(v.Name()) == a.Value
		}
		return json.Unmarshal(raw, &s) == nil && s == a.Value
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	if a.Value == "" {
		return s != ""
	}
	return s == a.Value
}
