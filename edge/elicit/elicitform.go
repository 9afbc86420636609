package elicit

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Forms for elicitation. MCP form elicitation accepts a flat object of
// primitive properties only: strings (with minLength, maxLength and the
// formats email, uri, date and date-time), numbers and integers (with
// minimum and maximum), booleans, and enums as titled choices (oneOf of
// const and title). A field's form property is derived from its input
// schema property, which carries the field's protovalidate rules, keeping
// what a form can say; the rest (a pattern, an exclusive bound a form cannot
// express) is still enforced when the call's arguments are validated.

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
		props[name] = formProperty(name, fd, in.Properties[name])
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
				props[name] = formProperty(name, fd, in.Properties[name])
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

// formProperty is the form property asking for field name.
func formProperty(name string, fd protoreflect.FieldDescriptor, prop map[string]any) map[string]any {
	out := map[string]any{"title": humanize(name)}
	if d, ok := prop["description"].(string); ok && d != "" {
		out["description"] = d
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
		if fd != nil && fd.Kind() == protoreflect.EnumKind {
			if names, ok := prop["enum"].([]any); ok {
				out["oneOf"] = titledChoices(fd.Enum(), names)
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
		if in, ok := prop["enum"].([]any); ok && len(in) > 0 {
			out["enum"] = in
		}
	}
	return out
}

// titledChoices are an enum's allowed names as form choices, titled by
// the name without the enum's common prefix ("CHANNEL_LOG" → "Log").
func titledChoices(ed protoreflect.EnumDescriptor, names []any) []any {
	prefix := enumPrefix(ed)
	out := make([]any, 0, len(names))
	for _, n := range names {
		s, _ := n.(string)
		out = append(out, map[string]any{"const": s, "title": humanize(strings.TrimPrefix(s, prefix))})
	}
	return out
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
