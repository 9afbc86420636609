package calls

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// apply takes the answers to the questions out. It returns a result when
// an answer ends the call or a question must be asked again, nil when the
// call moves on.
func (c *call) apply(ctx workflow.Context, answers map[string]*callsv1.Answer) *callsv1.RoundResult {
	var notes []string
	again := false
	for _, q := range c.pending {
		res, note := c.applyOne(ctx, q, answers[q.key])
		if res != nil {
			return res
		}
		if note != "" {
			again = true
			if q.kind == callsv1.StepKind_STEP_KIND_QUESTIONS {
				c.notes[q.name] = note
			} else {
				notes = append(notes, note)
			}
		}
	}
	if again {
		return c.reask(ctx, strings.Join(notes, ""))
	}
	c.step++
	return nil
}

// applyOne takes the answer a to the question q: it returns a result when
// the answer ends the call, or why q must be asked again ("" when it is
// answered).
func (c *call) applyOne(ctx workflow.Context, q *pending, a *callsv1.Answer) (*callsv1.RoundResult, string) {
	if a == nil || a.GetAction() == callsv1.Action_ACTION_UNSPECIFIED {
		return nil, "No answer was given. "
	}
	switch a.GetAction() {
	case callsv1.Action_ACTION_DECLINE:
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user declined to %s; nothing was done.", c.what(q))), StatusDeclined), ""
	case callsv1.Action_ACTION_CANCEL:
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user cancelled instead of answering (%s); nothing was done.", c.what(q))), StatusDeclined), ""
	}
	if q.input == callsv1.InputKind_INPUT_KIND_URL {
		// The user went (or agreed to go): the call is made again.
		return nil, ""
	}
	content, err := q.contentOf(a)
	if err == nil && q.fromClient() {
		// A model's or the client's answer passes the field's rules in
		// full before it is used.
		if missing := toolschema.Missing(q.schema, content); len(missing) > 0 {
			err = fmt.Errorf("it gives no %s", strings.Join(toolschema.Titles(q.schema, missing), ", "))
		} else {
			err = toolschema.ValidateAnswer(q.schema, content)
		}
	}
	if err != nil {
		if q.fallback != "" {
			if c.skipped == nil {
				c.skipped = map[string]bool{}
			}
			c.skipped[q.name] = true
			c.notesOut = append(c.notesOut, fmt.Sprintf("The client's %s answer was refused (%v), so %s.", inputName(q.input), err, q.fallback))
			return nil, ""
		}
		return nil, fmt.Sprintf("That answer does not fit: %s. ", err)
	}
	if confirm, ok := content[toolcall.AdminConfirm]; ok && confirm == false && (q.kind == callsv1.StepKind_STEP_KIND_ADMIN || q.kind == callsv1.StepKind_STEP_KIND_PREVIEW) {
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
			fmt.Sprintf("The user did not confirm %s; nothing was done.", c.in.GetTool())), StatusDeclined), ""
	}
	// The answers given are checked against the form (required aside) and
	// kept; what is still missing is asked again, alone.
	missing := toolschema.Missing(q.schema, content)
	var given []string
	for _, f := range q.fields {
		if _, ok := content[f]; ok && !slices.Contains(missing, f) {
			given = append(given, f)
		}
	}
	if err := toolschema.ValidateAnswer(toolschema.WithoutRequired(toolschema.Subset(q.schema, given)), content); err != nil {
		return nil, fmt.Sprintf("That answer does not fit: %s. ", err)
	}
	switch q.kind {
	case callsv1.StepKind_STEP_KIND_FIELDS, callsv1.StepKind_STEP_KIND_QUESTIONS:
		for _, f := range given {
			b, err := json.Marshal(content[f])
			if err != nil {
				continue
			}
			c.args[f] = b
			if !slices.Contains(c.elicited, f) {
				c.elicited = append(c.elicited, f)
			}
		}
	case callsv1.StepKind_STEP_KIND_ADMIN:
		if slices.Contains(given, toolcall.AdminConfirm) {
			c.args[toolcall.AdminConfirm] = json.RawMessage("true") // false declined above
		}
		if slices.Contains(given, toolcall.AdminReason) {
			b, _ := json.Marshal(content[toolcall.AdminReason])
			c.args[toolcall.AdminReason] = b
		}
	case callsv1.StepKind_STEP_KIND_PREVIEW:
		if content[toolcall.AdminConfirm] != true {
			return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeDeclined,
				fmt.Sprintf("The user did not confirm %s; nothing was done.", c.in.GetTool())), StatusDeclined), ""
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("Still needed: %s. ", strings.Join(toolschema.Titles(q.schema, missing), ", "))
	}
	return nil, ""
}

// what names what a question asked, for the declined envelope.
func (c *call) what(q *pending) string {
	if q.input == callsv1.InputKind_INPUT_KIND_URL {
		return "visit " + q.url + " for " + c.in.GetTool()
	}
	switch q.kind {
	case callsv1.StepKind_STEP_KIND_FIELDS:
		return "give " + strings.Join(q.fields, ", ") + " for " + c.in.GetTool()
	case callsv1.StepKind_STEP_KIND_QUESTIONS:
		return "answer " + q.name + " (" + strings.Join(q.fields, ", ") + ") for " + c.in.GetTool()
	}
	return "confirm " + c.in.GetTool()
}

// missingArgs are those of fields the call has no value for.
func (c *call) missingArgs(fields []string) []string {
	var missing []string
	for _, f := range fields {
		if v, ok := c.args[f]; !ok || string(v) == "null" {
			missing = append(missing, f)
		}
	}
	return missing
}

// next asks the first question of the plan whose input is still missing,
// or, when nothing is missing, runs the call.
func (c *call) next(ctx workflow.Context) *callsv1.RoundResult {
	steps := c.in.GetSteps()
	for c.step < len(steps) {
		st := steps[c.step]
		switch st.GetKind() {
		case callsv1.StepKind_STEP_KIND_FIELDS:
			if missing := c.missingArgs(st.GetFields()); len(missing) > 0 {
				return c.ask(ctx, st.GetKind(), missing, toolschema.Subset(st.GetRequestedSchema(), missing),
					fmt.Sprintf("%s needs more information: %s.", c.in.GetTitle(), strings.Join(toolschema.Titles(st.GetRequestedSchema(), missing), ", ")))
			}
		case callsv1.StepKind_STEP_KIND_QUESTIONS:
			var qs []*pending
			for _, sq := range st.GetQuestions() {
				if c.skipped[sq.GetName()] {
					continue
				}
				if missing := c.missingArgs(sq.GetFields()); len(missing) > 0 {
					qs = append(qs, &pending{name: sq.GetName(), kind: st.GetKind(), fields: missing,
						schema: toolschema.Subset(sq.GetRequestedSchema(), missing), message: c.notes[sq.GetName()] + c.render(sq.GetMessage()),
						input: inputOf(sq.GetKind()), maxTokens: sq.GetMaxTokens(), systemPrompt: sq.GetSystemPrompt(),
						fallback: sq.GetFallback(), literalKey: sq.GetKey()})
					delete(c.notes, sq.GetName())
				}
			}
			if len(qs) > 0 {
				return c.askAll(ctx, qs)
			}
		case callsv1.StepKind_STEP_KIND_ADMIN:
			if missing := toolcall.MissingAdmin(c.args); len(missing) > 0 {
				return c.ask(ctx, st.GetKind(), missing, toolschema.Subset(st.GetRequestedSchema(), missing),
					fmt.Sprintf("%s is an administrative action. Confirm it and give a reason; both are recorded in the audit trail.\nArguments: %s",
						c.in.GetTitle(), c.arguments(toolcall.AdminConfirm, toolcall.AdminReason)))
			}
		case callsv1.StepKind_STEP_KIND_PREVIEW:
			return c.preview(ctx, st)
		}
		c.step++
	}
	if v := c.in.GetVisit(); v != nil && !c.visitAsked {
		// The edge's call was refused pending this visit.
		c.visitAsked = true
		return c.askVisit(ctx, v)
	}
	if c.in.GetTask() {
		return c.readyToRun(ctx)
	}
	return c.run(ctx)
}

// render is a question's text for the arguments gathered so far; a text
// that does not render is shown as written.
func (c *call) render(text string) string {
	tmpl, err := template.New("question").Option("missingkey=zero").Parse(text)
	if err != nil {
		return text
	}
	args := map[string]any{}
	// A copy: its order does not matter.
	//workflowcheck:ignore
	for k, v := range c.args {
		var x any
		if json.Unmarshal(v, &x) == nil {
			args[k] = x
		}
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, args); err != nil {
		return text
	}
	return b.String()
}

// preview calls the step's preview tool with the arguments gathered so far
// and asks the user to confirm what it shows. When the preview refuses the
// arguments, the fields the user gave are asked again, with the reason.
func (c *call) preview(ctx workflow.Context, st *callsv1.Step) *callsv1.RoundResult {
	env := c.activity(ctx, ActivityPreview, &callsv1.InvokeInput{
		Tool:      st.GetPreviewTool(),
		Arguments: c.arguments(),
		Caller:    c.in.GetCaller(),
		Timeout:   durationpb.New(callTimeout(c.in.GetCallTimeout())),
	})
	if env.IsError() {
		if env.DomainCode == toolcall.CodeInvalidArgument && len(c.elicited) > 0 {
			if back := c.fieldsStep(); back >= 0 {
				for _, f := range c.elicited {
					delete(c.args, f)
				}
				c.elicited = nil
				c.step = back
				c.note = env.Message + ". "
				return c.next(ctx)
			}
		}
		env.Tool = c.in.GetTool()
		return c.finish(ctx, env, StatusFailed)
	}
	schema := &structpb.Struct{Fields: map[string]*structpb.Value{
		"type": structpb.NewStringValue("object"),
		"properties": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			toolcall.AdminConfirm: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"type":        structpb.NewStringValue("boolean"),
				"title":       structpb.NewStringValue("Confirm"),
				"description": structpb.NewStringValue("Run " + c.in.GetTool() + " as shown."),
			}}),
		}}),
		"required": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(toolcall.AdminConfirm)}}),
	}}
	return c.ask(ctx, callsv1.StepKind_STEP_KIND_PREVIEW, []string{toolcall.AdminConfirm}, schema,
		fmt.Sprintf("%s: please confirm.\n%s\nArguments: %s", c.in.GetTitle(), describe(env.Data), c.arguments()))
}

// fieldsStep is the index of the last FIELDS step before the current one,
// or -1.
func (c *call) fieldsStep() int {
	for i := min(c.step, len(c.in.GetSteps())) - 1; i >= 0; i-- {
		if c.in.GetSteps()[i].GetKind() == callsv1.StepKind_STEP_KIND_FIELDS {
			return i
		}
	}
	return -1
}

// ask puts out a new round with one question.
func (c *call) ask(ctx workflow.Context, kind callsv1.StepKind, fields []string, schema *structpb.Struct, message string) *callsv1.RoundResult {
	return c.askAll(ctx, []*pending{{name: stepName(kind), kind: kind, fields: fields, schema: schema, message: c.note + message}})
}

// askAll puts out a new round with the questions qs (of one step), each
// under the key "r<round>.<name>". In a task (or once a task's FIELDS rounds
// are over) the questions are the task's.
func (c *call) askAll(ctx workflow.Context, qs []*pending) *callsv1.RoundResult {
	if qs[0].input != callsv1.InputKind_INPUT_KIND_URL && int(c.round)-c.visitRounds >= maxRounds(c.in) {
		return c.finish(ctx, toolcall.Fail(c.in.GetTool(), toolcall.CodeInvalidArgument,
			fmt.Sprintf("%s asked %d rounds of questions without getting complete answers; call it again with the missing arguments", c.in.GetTool(), c.round)), StatusFailed)
	}
	c.round++
	c.pending = qs
	c.note = ""
	res := &callsv1.RoundResult{Round: c.round}
	for _, q := range qs {
		q.key = fmt.Sprintf("r%d.%s", c.round, q.name)
		if q.literalKey != "" {
			q.key = q.literalKey
		}
		res.Questions = append(res.Questions, q.question())
	}
	deadline := workflow.Now(ctx).Add(c.timeout).UTC().Format(time.RFC3339)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Round %d** of `%s`: waiting until %s for %s.\n\n%s", c.round, c.in.GetTool(), deadline, strings.Join(pendingFields(qs), ", "), qs[0].message))
	c.deadline = workflow.Now(ctx).Add(c.timeout)
	if c.in.GetTask() && (qs[0].kind != callsv1.StepKind_STEP_KIND_FIELDS || c.task) {
		c.task = true
	}
	c.changed(ctx, fmt.Sprintf("Waiting until %s for the answers to %d question(s).", deadline, len(qs)))
	c.status(ctx, StatusWaiting)
	res.Task = c.task
	c.current = res
	return res
}

// pendingFields are the fields the questions qs ask for.
func pendingFields(qs []*pending) []string {
	var fields []string
	for _, q := range qs {
		fields = append(fields, q.fields...)
	}
	return fields
}

// reask asks the pending question again (for the fields still missing) as
// a new round, saying why.
func (c *call) reask(ctx workflow.Context, why string) *callsv1.RoundResult {
	c.note = why
	return c.next(ctx)
}

// arguments is the JSON object of the arguments gathered so far, without
// the names left out (keys sorted: encoding/json sorts map keys).
func (c *call) arguments(leaveOut ...string) string {
	args := c.args
	if len(leaveOut) > 0 {
		args = make(map[string]json.RawMessage, len(c.args))
		// A copy: the order it is made in does not matter, and the JSON
		// is written with sorted keys.
		//workflowcheck:ignore
		for k, v := range c.args {
			if !slices.Contains(leaveOut, k) {
				args[k] = v
			}
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func stepName(k callsv1.StepKind) string {
	switch k {
	case callsv1.StepKind_STEP_KIND_FIELDS:
		return "fields"
	case callsv1.StepKind_STEP_KIND_ADMIN:
		return "admin"
	case callsv1.StepKind_STEP_KIND_PREVIEW:
		return "confirm"
	}
	return "input"
}

// describe renders a preview's data for a person: one line per top-level
// field, lists cut to their first three items.
func describe(data json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(data, &m) != nil || len(m) == 0 {
		return string(data)
	}
	keys := make([]string, 0, len(m))
	// Sorted below.
	//workflowcheck:ignore
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.ReplaceAll(k, "_", " "))
		b.WriteString(": ")
		switch v := m[k].(type) {
		case []any:
			parts := make([]string, 0, 3)
			for _, item := range v[:min(3, len(v))] {
				parts = append(parts, scalar(item))
			}
			b.WriteString(strings.Join(parts, ", "))
		default:
			b.WriteString(scalar(v))
		}
	}
	return b.String()
}

func scalar(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// inputOf is the kind of a step question: FORM when unspecified.
func inputOf(k callsv1.InputKind) callsv1.InputKind {
	if k == callsv1.InputKind_INPUT_KIND_UNSPECIFIED {
		return callsv1.InputKind_INPUT_KIND_FORM
	}
	return k
}

// inputName names an input kind for people.
func inputName(k callsv1.InputKind) string {
	switch k {
	case callsv1.InputKind_INPUT_KIND_SAMPLING:
		return "model's"
	case callsv1.InputKind_INPUT_KIND_ROOTS:
		return "roots"
	case callsv1.InputKind_INPUT_KIND_URL:
		return "URL"
	}
	return "form"
}

// contentOf is the answer a to q as the values of q's fields: the form as
// submitted; a completion's text as the one field's value (a string, or a
// list of strings: a JSON array, else one item per non-empty line, list
// markers dropped); the client's roots' URIs (a list, or the first).
func (q *pending) contentOf(a *callsv1.Answer) (map[string]any, error) {
	switch q.input {
	case callsv1.InputKind_INPUT_KIND_SAMPLING:
		text := strings.TrimSpace(a.GetSampled().GetText())
		if text == "" {
			return nil, errors.New("the model answered with no text")
		}
		if !q.isList() {
			return map[string]any{q.fields[0]: text}, nil
		}
		return map[string]any{q.fields[0]: listOf(text)}, nil
	case callsv1.InputKind_INPUT_KIND_ROOTS:
		uris := make([]any, 0, len(a.GetRoots()))
		for _, r := range a.GetRoots() {
			uris = append(uris, r.GetUri())
		}
		if q.isList() {
			return map[string]any{q.fields[0]: uris}, nil
		}
		if len(uris) == 0 {
			return nil, errors.New("the client has no roots")
		}
		return map[string]any{q.fields[0]: uris[0]}, nil
	}
	return a.GetContent().AsMap(), nil
}

// fromClient reports whether q asks the client rather than the user: a
// completion of its model, or its roots.
func (q *pending) fromClient() bool {
	return q.input == callsv1.InputKind_INPUT_KIND_SAMPLING || q.input == callsv1.InputKind_INPUT_KIND_ROOTS
}

// isList reports whether q's one field is a list.
func (q *pending) isList() bool {
	if len(q.fields) != 1 {
		return false
	}
	prop := q.schema.GetFields()["properties"].GetStructValue().GetFields()[q.fields[0]]
	return prop.GetStructValue().GetFields()["type"].GetStringValue() == "array"
}

// listOf reads a model's text as a list of strings: a JSON array of
// strings (in a code fence or not), else its non-empty lines without list
// markers ("- ", "* ", "1. ", "2) ").
func listOf(text string) []any {
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(text, "```json"), "```"), "```"))
	var items []string
	if json.Unmarshal([]byte(body), &items) == nil {
		out := make([]any, 0, len(items))
		for _, it := range items {
			out = append(out, it)
		}
		return out
	}
	var out []any
	for line := range strings.Lines(text) {
		l := strings.TrimSpace(line)
		l = strings.TrimLeft(l, "-*•")
		if i := strings.IndexAny(l, ".)"); i > 0 && i <= 3 && strings.Trim(l[:i], "0123456789") == "" {
			l = l[i+1:]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
