package boundary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// LocateJSONFault names the fault strict protojson (unknown fields are an
// error) found in data, a JSON object of md, by its path in the fields'
// proto names ("action.tool", "steps[2].arguments", `scores["b"]`), with
// what the field takes. protojson's own error names only the innermost
// field, by its JSON name (projectId, not project_id), an unknown field
// without the message it is in, and a bad well-known value without its
// field.
//
// It walks data member by member and decodes each member on its own, so
// what counts as a fault is protojson's rule, not a copy of it. Call it
// only after a decode failed: ok is false when it finds nothing (keep
// protojson's message then). whole names the object for an unknown
// top-level field's message ("this tool": "this tool accepts: a, b").
func LocateJSONFault(md protoreflect.MessageDescriptor, data []byte, whole string) (v Violation, ok bool) {
	return faultInObject(md, data, "", whole)
}

// member is one name and value of a JSON object, in the order written.
type member struct {
	name  string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members; ok is false when
// raw is not an object.
func objectMembers(raw []byte) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		ms = append(ms, member{name, value})
	}
	return ms, true
}

// arrayItems splits a JSON array into its items; ok is false when raw is
// not an array.
func arrayItems(raw []byte) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, false
	}
	return items, true
}

// decodes reports whether protojson decodes {"name": value} into a
// message of md: the member on its own, with nothing else to blame.
func decodes(md protoreflect.MessageDescriptor, name string, value []byte) bool {
	doc, err := json.Marshal(map[string]json.RawMessage{name: value})
	if err != nil {
		return false
	}
	return protojson.UnmarshalOptions{AllowPartial: true}.Unmarshal(doc, dynamicpb.NewMessage(md)) == nil
}

// faultInObject finds the fault in raw, an object of md at path (whole
// names it when path is "").
func faultInObject(md protoreflect.MessageDescriptor, raw []byte, path, whole string) (Violation, bool) {
	members, ok := objectMembers(raw)
	if !ok {
		return Violation{}, false
	}
	given := map[protoreflect.FieldNumber]string{}
	oneofs := map[protoreflect.FullName]string{}
	for _, m := range members {
		fd := md.Fields().ByJSONName(m.name)
		if fd == nil {
			fd = md.Fields().ByTextName(m.name)
		}
		if fd == nil {
			where := path
			if where == "" {
				where = whole
			}
			return Violation{Field: join(path, m.name), Rule: "unknown_field",
				Message: fmt.Sprintf("unknown field %q; %s accepts: %s", m.name, where, FieldNames(md))}, true
		}
		fpath := join(path, string(fd.Name()))
		if earlier, twice := given[fd.Number()]; twice {
			return Violation{Field: fpath, Rule: "type",
				Message: fmt.Sprintf("given twice (as %q and %q)", earlier, m.name)}, true
		}
		given[fd.Number()] = m.name
		if !decodes(md, m.name, m.value) {
			return faultInValue(md, fd, m.name, m.value, fpath), true
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && !isNull(m.value) {
			if other, set := oneofs[od.FullName()]; set {
				return Violation{Field: fpath, Rule: "oneof",
					Message: fmt.Sprintf("give only one of %s: %s is given too", names(od.Fields()), other)}, true
			}
			oneofs[od.FullName()] = string(fd.Name())
		}
	}
	return Violation{}, false
}

// faultInValue names the fault in one member's value, which does not
// decode on its own: within it when it is a message, list or map of the
// right shape, else the value itself.
func faultInValue(md protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, name string, value []byte, path string) Violation {
	switch {
	case fd.IsList():
		items, ok := arrayItems(value)
		if !ok {
			return typeFault(path, "an array", value)
		}
		for i, item := range items {
			if decodes(md, name, append(append([]byte{'['}, item...), ']')) {
				continue
			}
			return faultInSingle(fd, item, fmt.Sprintf("%s[%d]", path, i))
		}
	case fd.IsMap():
		entries, ok := objectMembers(value)
		if !ok {
			return typeFault(path, "an object", value)
		}
		for _, e := range entries {
			one, err := json.Marshal(map[string]json.RawMessage{e.name: e.value})
			if err != nil || decodes(md, name, one) {
				continue
			}
			epath := fmt.Sprintf("%s[%s]", path, strconv.Quote(e.name))
			// The value under a key of the right kind decodes: the key is
			// the fault.
			valueOnly, err := json.Marshal(map[string]json.RawMessage{goodKey(fd.MapKey()): e.value})
			if err == nil && decodes(md, name, valueOnly) {
				key, _ := json.Marshal(e.name)
				return typeFault(epath, "a key that is "+Expectation(fd.MapKey()), key)
			}
			return faultInSingle(fd.MapValue(), e.value, epath)
		}
	default:
		return faultInSingle(fd, value, path)
	}
	return typeFault(path, Expectation(fd), value)
}

// faultInSingle names the fault in one value of fd (a list's item, a map's
// value): within it when it is an object of a message's fields.
func faultInSingle(fd protoreflect.FieldDescriptor, value []byte, path string) Violation {
	if md := fd.Message(); md != nil && !wellKnown(md) {
		if v, ok := faultInObject(md, value, path, ""); ok {
			return v
		}
	}
	return typeFault(path, Expectation(fd), value)
}

// goodKey is a map key of fd's kind (a map key is a string, a bool or an
// integer, written as a JSON string).
func goodKey(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "k"
	case protoreflect.BoolKind:
		return "true"
	default:
		return "1"
	}
}

func typeFault(path, want string, got []byte) Violation {
	return Violation{Field: path, Rule: "type", Message: fmt.Sprintf("must be %s, got %s", want, excerpt(got))}
}

// Expectation says what a value of fd takes, as the input schema shows it
// ("a string", "one of A, B"): for an error message.
func Expectation(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "an integer (from -2147483648 to 2147483647)"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "an integer (from 0 to 4294967295)"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return "an integer (64-bit: a number or a string of digits)"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "an integer (unsigned 64-bit: a number or a string of digits)"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.BytesKind:
		return "base64-encoded bytes"
	case protoreflect.EnumKind:
		return "one of " + enumNames(fd.Enum())
	}
	switch md := fd.Message(); md.FullName() {
	case "google.protobuf.Timestamp":
		return `a time in RFC 3339, e.g. "2030-01-02T15:04:05Z"`
	case "google.protobuf.Duration":
		return `a duration in seconds, e.g. "90s" or "1.5s"`
	case "google.protobuf.FieldMask":
		return `a comma-separated list of field names, e.g. "title,status"`
	case "google.protobuf.ListValue":
		return "an array"
	case "google.protobuf.Value":
		return "a JSON value"
	default:
		if wellKnown(md) && md.Fields().Len() == 1 && md.Fields().Get(0).Name() == "value" {
			return Expectation(md.Fields().Get(0)) // a wrapper: its value
		}
		return "an object"
	}
}

// wellKnown reports whether md is one of protobuf's well-known types, whose
// JSON form is not an object of its fields.
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// enumNames lists the names an argument of ed takes: every value but the
// zero one, which means "not set" (the input schema leaves it out too).
func enumNames(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := 0; i < ed.Values().Len(); i++ {
		if v := ed.Values().Get(i); v.Number() != 0 {
			names = append(names, string(v.Name()))
		}
	}
	return strings.Join(names, ", ")
}

// FieldNames lists md's fields by their proto names, in declaration order
// ("a, b, c"): what a message accepts, for an error message.
func FieldNames(md protoreflect.MessageDescriptor) string { return names(md.Fields()) }

func names(fs protoreflect.FieldDescriptors) string {
	out := make([]string, 0, fs.Len())
	for i := 0; i < fs.Len(); i++ {
		out = append(out, string(fs.Get(i).Name()))
	}
	return strings.Join(out, ", ")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isNull(raw []byte) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// excerpt is raw as a message quotes it: compact, and cut at 60 bytes.
func excerpt(raw []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(raw))
	}
	s := buf.String()
	if len(s) <= 60 {
		return s
	}
	s = s[:57]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
