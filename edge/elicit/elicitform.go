package elicit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Forms for elicitation. MCP form elicitation accepts a flat object of
// primitive properties only: strings (with minLength, maxLength and the
// formats email, uri, date and date-time), numbers and integers (with
// minimum and maximum), booleans, single choices (untitled: enum; titled:
// oneOf of const and title, or the legacy enumNames) and multi-select
// lists of choices (an array whose items are an enum, or anyOf of const and
// title), each with an optional proposed value (default). A field's form
// property is derived from its input schema property, which carries the
// field's protovalidate rules, keeping what a form can say, and from its
// toolmesh.tool.v1.field option (default, titles); the rest (a pattern, an
// exclusive bound a form cannot express) is still enforced when the call's
// arguments are validated.

// formFormat reports whether a form may carry the string format f.
func formFormat(f string) bool {
	switch f {
	case "email", "uri", "date", "date-time":
		return true
	}
	return false
}

// fieldsForm is the form asking for every elicitable field of t (the
// workflow asks only for those still missing). It is nil when t has none.
func fieldsForm(t *toolcatalog.Tool) (*structpb.Struct, error) {
	if len(t.Elicitable) == 0 {
		return nil, nil
	}
	var in struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if err := json.Unmarshal(t.InputSchema, &in); err != nil {
		return nil, fmt.Errorf("tool %s: read input schema: %w", t.Name, err)
	}
	props := map[string]any{}
	var required []any
	for _, name := range t.Elicitable {
		fd := t.Method.Input().Fields().ByName(protoreflect.Name(name))
		var err error
		if props[name], err = formProperty(name, fd, in.Properties[name]); err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		for _, r := range in.Required {
			if r == name {
				required = append(required, name)
			}
		}
	}
	form := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		form["required"] = required
	}
	return structpb.NewStruct(form)
}

// questionForms are t's questions (toolmesh.tool.v1.Question) as the
// workflow asks them: each a form requiring every field it asks for.
func questionForms(t *toolcatalog.Tool) ([]*callsv1.StepQuestion, error) {
	if len(t.Questions) == 0 {
		return nil, nil
	}
	var in struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(t.InputSchema, &in); err != nil {
		return nil, fmt.Errorf("tool %s: read input schema: %w", t.Name, err)
	}
	var out []*callsv1.StepQuestion
	for _, q := range t.Questions {
		kind := inputKind(q.Kind)
		props := map[string]any{}
		var required []any
		for _, name := range q.Fields {
			fd := t.Method.Input().Fields().ByName(protoreflect.Name(name))
			if kind == callsv1.InputKind_INPUT_KIND_FORM {
				var err error
				if props[name], err = formProperty(name, fd, in.Properties[name]); err != nil {
					return nil, fmt.Errorf("tool %s: question %s: %w", t.Name, q.Name, err)
				}
			} else {
				// A model's or the client's answer fills the field as the
				// input schema states it, rules and all: the boundary the
				// answer passes before it is used.
				props[name] = in.Properties[name]
			}
			required = append(required, name)
		}
		form, err := structpb.NewStruct(map[string]any{"type": "object", "properties": props, "required": required})
		if err != nil {
			return nil, fmt.Errorf("tool %s: question %s: %w", t.Name, q.Name, err)
		}
		out = append(out, &callsv1.StepQuestion{Name: q.Name, Fields: q.Fields, RequestedSchema: form, Message: q.Text,
			Kind: kind, MaxTokens: int32(q.MaxTokens), SystemPrompt: q.SystemPrompt, Fallback: q.Fallback, Key: q.Key})
	}
	return out, nil
}

// inputKind is the calls contract's kind of a question of kind k.
func inputKind(k toolv1.QuestionKind) callsv1.InputKind {
	switch k {
	case toolv1.QuestionKind_QUESTION_KIND_SAMPLING:
		return callsv1.InputKind_INPUT_KIND_SAMPLING
	case toolv1.QuestionKind_QUESTION_KIND_ROOTS:
		return callsv1.InputKind_INPUT_KIND_ROOTS
	}
	return callsv1.InputKind_INPUT_KIND_FORM
}

// portKind is the door's kind of a question of kind k.
func portKind(k callsv1.InputKind) port.QuestionKind {
	switch k {
	case callsv1.InputKind_INPUT_KIND_URL:
		return port.QuestionURL
	case callsv1.InputKind_INPUT_KIND_SAMPLING:
		return port.QuestionSampling
	case callsv1.InputKind_INPUT_KIND_ROOTS:
		return port.QuestionRoots
	}
	return port.QuestionForm
}

// capability is the MCP client capability a question of kind k needs
// (toolcall.ClientGap).
func capability(k port.QuestionKind) string {
	switch k {
	case port.QuestionURL:
		return "elicitation.url"
	case port.QuestionSampling:
		return "sampling"
	case port.QuestionRoots:
		return "roots"
	}
	return "elicitation"
}

// formProperty is the form property asking for field name: from its
// input schema property, and its toolmesh.tool.v1.field option (the
// proposed value, the titles of its choices).
func formProperty(name string, fd protoreflect.FieldDescriptor, prop map[string]any) (map[string]any, error) {
	out := map[string]any{"title": humanize(name)}
	if d, ok := prop["description"].(string); ok && d != "" {
		out["description"] = d
	}
	opt := fieldOption(fd)
	if fd != nil && fd.IsList() {
		// A multi-select: its items are the choices.
		items, _ := prop["items"].(map[string]any)
		out["type"] = "array"
		for _, k := range []string{"minItems", "maxItems"} {
			if v, ok := prop[k]; ok {
				out[k] = v
			}
		}
		choices, err := choicesOf(fd, items, opt)
		if err != nil {
			return nil, err
		}
		switch {
		case choices.titled != nil:
			out["items"] = map[string]any{"anyOf": choices.titled}
		default:
			out["items"] = map[string]any{"type": "string", "enum": choices.values}
		}
		if opt.GetDefault() != "" {
			return nil, fmt.Errorf("field %s: a list has no default", name)
		}
		return out, nil
	}
	switch prop["type"] {
	case "boolean":
		out["type"] = "boolean"
	case "integer", "number":
		out["type"] = prop["type"]
		if v, ok := prop["minimum"]; ok {
			out["minimum"] = v
		}
		if v, ok := prop["maximum"]; ok {
			out["maximum"] = v
		}
		if v, ok := prop["exclusiveMinimum"].(float64); ok && prop["type"] == "integer" {
			out["minimum"] = v + 1
		}
		if v, ok := prop["exclusiveMaximum"].(float64); ok && prop["type"] == "integer" {
			out["maximum"] = v - 1
		}
	default:
		out["type"] = "string"
		if _, ok := prop["enum"].([]any); ok {
			choices, err := choicesOf(fd, prop, opt)
			if err != nil {
				return nil, err
			}
			switch {
			case choices.titled != nil && opt.GetLegacyEnumNames():
				out["enum"], out["enumNames"] = choices.values, choices.titles
			case choices.titled != nil:
				out["oneOf"] = choices.titled
			default:
				out["enum"] = choices.values
			}
			break
		}
		for _, k := range []string{"minLength", "maxLength"} {
			if v, ok := prop[k]; ok {
				out[k] = v
			}
		}
		if f, ok := prop["format"].(string); ok && formFormat(f) {
			out["format"] = f
		}
	}
	if d := opt.GetDefault(); d != "" {
		v, err := defaultValue(out, d)
		if err != nil {
			return nil, fmt.Errorf("field %s: default %q: %w", name, d, err)
		}
		out["default"] = v
	}
	return out, nil
}

// fieldOption is fd's toolmesh.tool.v1.field option (nil: none).
func fieldOption(fd protoreflect.FieldDescriptor) *toolv1.Field {
	if fd == nil || fd.Options() == nil || !proto.HasExtension(fd.Options(), toolv1.E_Field) {
		return nil
	}
	f, _ := proto.GetExtension(fd.Options(), toolv1.E_Field).(*toolv1.Field)
	return f
}

// choices are the values a field may take in a form, and their titles
// (titled: oneOf/anyOf entries; nil when untitled).
type choices struct {
	values, titles []any
	titled         []any
}

// choicesOf are the choices of an enum field (titled by their value names
// without the enum's common prefix, or by the option's titles) or of a
// string field's `in` rule (titled only by the option's titles), from the
// schema prop (the field's, or its items').
func choicesOf(fd protoreflect.FieldDescriptor, prop map[string]any, opt *toolv1.Field) (choices, error) {
	values, _ := prop["enum"].([]any)
	if len(values) == 0 {
		return choices{}, errors.New("a list of choices needs an enum or an `in` rule on its items")
	}
	c := choices{values: values}
	titles := opt.GetTitles()
	switch {
	case len(titles) > 0:
		if len(titles) != len(values) {
			return choices{}, fmt.Errorf("%d titles for %d choices", len(titles), len(values))
		}
		for _, t := range titles {
			c.titles = append(c.titles, t)
		}
	case fd.Kind() == protoreflect.EnumKind:
		prefix := enumPrefix(fd.Enum())
		for _, v := range values {
			s, _ := v.(string)
			c.titles = append(c.titles, humanize(strings.TrimPrefix(s, prefix)))
		}
	default:
		return c, nil
	}
	for i, v := range values {
		c.titled = append(c.titled, map[string]any{"const": v, "title": c.titles[i]})
	}
	return c, nil
}

// defaultValue is d, a field's proposed value as written in its option, as
// a value of the form property p; it must be one p allows.
func defaultValue(p map[string]any, d string) (any, error) {
	var v any
	switch p["type"] {
	case "boolean":
		b, err := strconv.ParseBool(d)
		if err != nil {
			return nil, err
		}
		v = b
	case "integer":
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return nil, err
		}
		v = n
	case "number":
		n, err := strconv.ParseFloat(d, 64)
		if err != nil {
			return nil, err
		}
		v = n
	default:
		v = d
	}
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"v": p}})
	if err != nil {
		return nil, err
	}
	if err := toolschema.ValidateAnswer(schema, map[string]any{"v": v}); err != nil {
		return nil, err
	}
	return v, nil
}

// enumPrefix is the prefix every value name of ed shares, up to an
// underscore ("CHANNEL_"), or "".
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	values := ed.Values()
	if values.Len() == 0 {
		return ""
	}
	prefix := string(values.Get(0).Name())
	for i := 1; i < values.Len(); i++ {
		name := string(values.Get(i).Name())
		for !strings.HasPrefix(name, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	if i := strings.LastIndexByte(prefix, '_'); i >= 0 {
		return prefix[:i+1]
	}
	return ""
}

// humanize turns "agent_id" or "WEBHOOK" into "Agent id" / "Webhook".
func humanize(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, "_", " "))
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}

// adminForm asks for the admin inputs of t: a confirmation and a reason.
func adminForm(t *toolcatalog.Tool) (*structpb.Struct, error) {
	if t.Kind != toolv1.Kind_KIND_ADMIN {
		return nil, nil
	}
	return structpb.NewStruct(map[string]any{
		"type": "object",
		"properties": map[string]any{
			toolcall.AdminConfirm: map[string]any{"type": "boolean", "title": "Confirm",
				"description": "Yes, " + t.Action() + " with the arguments shown."},
			toolcall.AdminReason: map[string]any{"type": "string", "title": "Reason", "minLength": 1, "maxLength": 500,
				"description": "Why this administrative action is taken (recorded in the audit trail)."},
		},
		"required": []any{toolcall.AdminConfirm, toolcall.AdminReason},
	})
}

// question is a question of the workflow as the door asks it.
func question(q *callsv1.Question) port.Question {
	out := port.Question{Key: q.GetKey(), Kind: portKind(q.GetKind()), Message: q.GetMessage()}
	switch out.Kind {
	case port.QuestionForm:
		schema, err := protojson.Marshal(q.GetRequestedSchema())
		if err != nil {
			schema = []byte(`{"type":"object"}`)
		}
		out.Schema = json.RawMessage(schema)
	case port.QuestionURL:
		out.URL, out.ElicitationID = q.GetUrl(), q.GetElicitationId()
	case port.QuestionSampling:
		out.SystemPrompt, out.MaxTokens = q.GetSystemPrompt(), int(q.GetMaxTokens())
	}
	return out
}

// answersOf converts a client's answers, by question key.
func answersOf(answers map[string]port.Answer) map[string]*callsv1.Answer {
	out := make(map[string]*callsv1.Answer, len(answers))
	for k, r := range answers {
		out[k] = answerOf(r)
	}
	return out
}

func answerOf(r port.Answer) *callsv1.Answer {
	a := &callsv1.Answer{}
	switch r.Action {
	case port.AnswerAccept:
		a.Action = callsv1.Action_ACTION_ACCEPT
		if c, err := structpb.NewStruct(r.Content); err == nil {
			a.Content = c
		} else {
			a.Content = &structpb.Struct{}
		}
		if s := r.Sampled; s != nil {
			a.Sampled = &callsv1.Sampled{Text: s.Text, Model: s.Model, StopReason: s.StopReason}
		}
		for _, root := range r.Roots {
			a.Roots = append(a.Roots, &callsv1.Root{Uri: root.URI, Name: root.Name})
		}
	case port.AnswerDecline:
		a.Action = callsv1.Action_ACTION_DECLINE
	case port.AnswerCancel:
		a.Action = callsv1.Action_ACTION_CANCEL
	}
	return a
}
