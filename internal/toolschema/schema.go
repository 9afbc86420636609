// Package toolschema turns protobuf request and response messages into JSON
// Schema (draft 2020-12) for MCP tools. Input schemas carry the message's
// protovalidate rules so that a model sees the contract before it calls:
// required fields, string lengths and patterns (non-blank text too: the
// non_blank rule of toolmesh.rules.v1), numeric ranges, formats, enum names
// (without the zero value), repeated bounds. Field names are the
// proto names (snake_case), the same names protojson accepts and emits.
package toolschema

import (
	"fmt"
	"math"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/rules/v1"
)

// Draft is the JSON Schema dialect of every generated schema.
const Draft = "https://json-schema.org/draft/2020-12/schema"

// Schema is a JSON Schema object. Keys are written in a stable order by
// encoding/json (map keys are sorted).
type Schema = map[string]any

// Comments looks up the documentation of a descriptor (by full name), or
// returns "" when there is none.
type Comments func(protoreflect.FullName) string

// maxDepth bounds nesting of message schemas (and breaks recursion).
const maxDepth = 8

// Input returns the schema of a request message, with its validation rules.
func Input(md protoreflect.MessageDescriptor, docs Comments) Schema {
	s := message(md, docs, 0, true)
	s["$schema"] = Draft
	return s
}

// Output returns the schema of a response message (no validation rules: it
// describes what the service sends).
func Output(md protoreflect.MessageDescriptor, docs Comments) Schema {
	return message(md, docs, 0, false)
}

// Message returns the schema of md without the $schema key, for embedding.
func Message(md protoreflect.MessageDescriptor, docs Comments, withRules bool) Schema {
	return message(md, docs, 0, withRules)
}

func message(md protoreflect.MessageDescriptor, docs Comments, depth int, withRules bool) Schema {
	if wk, ok := wellKnown(md); ok {
		return wk
	}
	s := Schema{"type": "object"}
	if depth >= maxDepth {
		return s
	}
	props := Schema{}
	var required []string
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var rules *validate.FieldRules
		if withRules {
			rules = fieldRules(fd)
		}
		fs := field(fd, rules, docs, depth, withRules)
		if d := docs(fd.FullName()); d != "" {
			fs["description"] = d
		}
		props[string(fd.Name())] = fs
		if rules.GetRequired() {
			required = append(required, string(fd.Name()))
		}
	}
	s["properties"] = props
	s["additionalProperties"] = false
	if len(required) > 0 {
		s["required"] = required
	}
	if withRules {
		if notes := messageRuleNotes(md); notes != "" {
			s["description"] = notes
		}
	}
	return s
}

func fieldRules(fd protoreflect.FieldDescriptor) *validate.FieldRules {
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, validate.E_Field) {
		return nil
	}
	r, _ := proto.GetExtension(opts, validate.E_Field).(*validate.FieldRules)
	return r
}

// messageRuleNotes renders message-level CEL rules as prose, so the model
// learns rules that tie fields together.
func messageRuleNotes(md protoreflect.MessageDescriptor) string {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, validate.E_Message) {
		return ""
	}
	mr, _ := proto.GetExtension(opts, validate.E_Message).(*validate.MessageRules)
	var notes []string
	for _, r := range mr.GetCel() {
		if m := r.GetMessage(); m != "" {
			notes = append(notes, m)
		}
	}
	for _, o := range mr.GetOneof() {
		if len(o.GetFields()) > 0 {
			n := "set at most one of: " + strings.Join(o.GetFields(), ", ")
			if o.GetRequired() {
				n = "set exactly one of: " + strings.Join(o.GetFields(), ", ")
			}
			notes = append(notes, n)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return "Rules: " + strings.Join(notes, "; ") + "."
}

func field(fd protoreflect.FieldDescriptor, rules *validate.FieldRules, docs Comments, depth int, withRules bool) Schema {
	switch {
	case fd.IsMap():
		s := Schema{"type": "object", "additionalProperties": singular(fd.MapValue(), rules.GetMap().GetValues(), docs, depth, withRules)}
		if mr := rules.GetMap(); mr != nil {
			if mr.HasMinPairs() {
				s["minProperties"] = mr.GetMinPairs()
			}
			if mr.HasMaxPairs() {
				s["maxProperties"] = mr.GetMaxPairs()
			}
		}
		return s
	case fd.IsList():
		rr := rules.GetRepeated()
		s := Schema{"type": "array", "items": singular(fd, rr.GetItems(), docs, depth, withRules)}
		if rr != nil {
			if rr.HasMinItems() {
				s["minItems"] = rr.GetMinItems()
			}
			if rr.HasMaxItems() {
				s["maxItems"] = rr.GetMaxItems()
			}
			if rr.GetUnique() {
				s["uniqueItems"] = true
			}
		}
		return s
	}
	return singular(fd, rules, docs, depth, withRules)
}

// singular is the schema of one value of fd's type.
func singular(fd protoreflect.FieldDescriptor, rules *validate.FieldRules, docs Comments, depth int, withRules bool) Schema {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return Schema{"type": "boolean"}
	case protoreflect.StringKind:
		return stringSchema(rules.GetString())
	case protoreflect.BytesKind:
		return Schema{"type": "string", "contentEncoding": "base64"}
	case protoreflect.EnumKind:
		return enumSchema(fd.Enum(), rules.GetEnum(), docs, withRules)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		s := Schema{"type": "integer"}
		numericBounds(s, numericRules(rules))
		if fd.Kind() == protoreflect.Uint32Kind || fd.Kind() == protoreflect.Fixed32Kind {
			if _, ok := s["minimum"]; !ok {
				s["minimum"] = 0
			}
		}
		return s
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		// protojson writes 64-bit integers as strings, so JSON numbers never
		// lose precision; bounds go into the description.
		s := Schema{"type": "string", "pattern": `^-?[0-9]+$`}
		if fd.Kind() == protoreflect.Uint64Kind || fd.Kind() == protoreflect.Fixed64Kind {
			s["pattern"] = `^[0-9]+$`
		}
		b := Schema{}
		numericBounds(b, numericRules(rules))
		if len(b) > 0 {
			s["description"] = "A decimal integer as a string. " + describeBounds(b)
		}
		return s
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		s := Schema{"type": "number"}
		numericBounds(s, numericRules(rules))
		return s
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return message(fd.Message(), docs, depth+1, withRules)
	}
	return Schema{}
}

func stringSchema(r *validate.StringRules) Schema {
	s := Schema{"type": "string"}
	if r == nil {
		return s
	}
	if r.HasLen() {
		s["minLength"], s["maxLength"] = r.GetLen(), r.GetLen()
	}
	if r.HasMinLen() {
		s["minLength"] = r.GetMinLen()
	}
	if r.HasMaxLen() {
		s["maxLength"] = r.GetMaxLen()
	}
	if r.HasPattern() {
		s["pattern"] = r.GetPattern()
	}
	if r.HasConst() {
		s["const"] = r.GetConst()
	}
	if in := r.GetIn(); len(in) > 0 {
		s["enum"] = in
	}
	if r.HasPrefix() && !r.HasPattern() {
		s["pattern"] = "^" + regexpQuote(r.GetPrefix())
	}
	if nonBlank(r) {
		// "\S" is what non_blank checks: a character other than whitespace
		// somewhere. A schema holds one pattern, so beside another it is
		// a second schema the value must match as well.
		if _, ok := s["pattern"]; ok {
			s["allOf"] = []Schema{{"pattern": nonBlankPattern}}
		} else {
			s["pattern"] = nonBlankPattern
		}
	}
	switch {
	case r.GetEmail():
		s["format"] = "email"
	case r.GetHostname():
		s["format"] = "hostname"
	case r.GetIpv4():
		s["format"] = "ipv4"
	case r.GetIpv6():
		s["format"] = "ipv6"
	case r.GetUri():
		s["format"] = "uri"
	case r.GetUriRef():
		s["format"] = "uri-reference"
	case r.GetUuid():
		s["format"] = "uuid"
	}
	return s
}

// nonBlankPattern is the JSON Schema (ECMA-262) form of the non_blank rule
// (toolmesh.rules.v1): the value holds a character other than whitespace.
const nonBlankPattern = `\S`

// nonBlank reports whether r carries the non_blank rule.
func nonBlank(r *validate.StringRules) bool {
	on, _ := proto.GetExtension(r, rulesv1.E_NonBlank).(bool)
	return on
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// enumSchema lists the enum's names. A request never needs the zero value
// (it means "not set"), so input schemas leave it out; a response may carry
// it, so output schemas list every name.
func enumSchema(ed protoreflect.EnumDescriptor, r *validate.EnumRules, docs Comments, input bool) Schema {
	excluded := map[int32]bool{0: input}
	for _, n := range r.GetNotIn() {
		excluded[n] = true
	}
	var allowed map[int32]bool
	if in := r.GetIn(); len(in) > 0 {
		allowed = map[int32]bool{}
		for _, n := range in {
			allowed[n] = true
		}
	}
	var names []string
	var lines []string
	values := ed.Values()
	for i := 0; i < values.Len(); i++ {
		v := values.Get(i)
		if excluded[int32(v.Number())] || (allowed != nil && !allowed[int32(v.Number())]) {
			continue
		}
		names = append(names, string(v.Name()))
		if d := docs(v.FullName()); d != "" {
			lines = append(lines, string(v.Name())+": "+d)
		}
	}
	s := Schema{"type": "string", "enum": names}
	if len(lines) > 0 {
		s["description"] = strings.Join(lines, "\n")
	}
	return s
}

// numericRules returns the typed numeric rules message of r, if any.
func numericRules(r *validate.FieldRules) protoreflect.Message {
	if r == nil {
		return nil
	}
	for _, m := range []proto.Message{r.GetInt32(), r.GetInt64(), r.GetUint32(), r.GetUint64(),
		r.GetSint32(), r.GetSint64(), r.GetFixed32(), r.GetFixed64(), r.GetSfixed32(), r.GetSfixed64(),
		r.GetFloat(), r.GetDouble()} {
		if m != nil && m.ProtoReflect().IsValid() {
			return m.ProtoReflect()
		}
	}
	return nil
}

// numericBounds copies gt/gte/lt/lte/const/in of a numeric rules message
// (they are named alike in every numeric type) into s.
func numericBounds(s Schema, m protoreflect.Message) {
	if m == nil {
		return
	}
	get := func(name string) (any, bool) {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || !m.Has(fd) {
			return nil, false
		}
		return jsonNumber(m.Get(fd)), true
	}
	if v, ok := get("gte"); ok {
		s["minimum"] = v
	}
	if v, ok := get("gt"); ok {
		s["exclusiveMinimum"] = v
	}
	if v, ok := get("lte"); ok {
		s["maximum"] = v
	}
	if v, ok := get("lt"); ok {
		s["exclusiveMaximum"] = v
	}
	if v, ok := get("const"); ok {
		s["const"] = v
	}
	if fd := m.Descriptor().Fields().ByName("in"); fd != nil && m.Has(fd) {
		l := m.Get(fd).List()
		vals := make([]any, l.Len())
		for i := range vals {
			vals[i] = jsonNumber(l.Get(i))
		}
		s["enum"] = vals
	}
}

func jsonNumber(v protoreflect.Value) any {
	switch x := v.Interface().(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case float32:
		return float64(x)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil
		}
		return x
	}
	return v.Interface()
}

func describeBounds(b Schema) string {
	var parts []string
	for _, k := range []struct{ key, op string }{{"minimum", ">="}, {"exclusiveMinimum", ">"}, {"maximum", "<="}, {"exclusiveMaximum", "<"}} {
		if v, ok := b[k.key]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", k.op, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Must be " + strings.Join(parts, " and ") + "."
}

// wellKnown maps Google's well-known types to their protojson shapes.
func wellKnown(md protoreflect.MessageDescriptor) (Schema, bool) {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return Schema{"type": "string", "format": "date-time"}, true
	case "google.protobuf.Duration":
		return Schema{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]{1,9})?s$`, "description": "A duration in seconds with an s suffix, e.g. \"90s\" or \"1.5s\"."}, true
	case "google.protobuf.Struct":
		return Schema{"type": "object"}, true
	case "google.protobuf.Value":
		return Schema{}, true
	case "google.protobuf.ListValue":
		return Schema{"type": "array"}, true
	case "google.protobuf.FieldMask":
		return Schema{"type": "string"}, true
	case "google.protobuf.Empty":
		return Schema{"type": "object", "additionalProperties": false}, true
	case "google.protobuf.BoolValue":
		return Schema{"type": "boolean"}, true
	case "google.protobuf.StringValue":
		return Schema{"type": "string"}, true
	case "google.protobuf.BytesValue":
		return Schema{"type": "string", "contentEncoding": "base64"}, true
	case "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
		return Schema{"type": "integer"}, true
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return Schema{"type": "string", "pattern": `^-?[0-9]+$`}, true
	case "google.protobuf.FloatValue", "google.protobuf.DoubleValue":
		return Schema{"type": "number"}, true
	case "google.protobuf.Any":
		return Schema{"type": "object", "properties": Schema{"@type": Schema{"type": "string"}}, "required": []string{"@type"}}, true
	}
	return nil, false
}
