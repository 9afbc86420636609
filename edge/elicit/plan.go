package elicit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// oneofRule is the id of the violation of a protovalidate message oneof
// none of whose fields is given.
const oneofRule = "message.oneof"

// plan is what a call lacks that its client can be asked for, as the
// workflow's steps; nil when it lacks nothing the client can be asked (the
// call then goes on as usual, taking the fallbacks notes names). Fields are
// asked for when the arguments break their rules only for want of
// elicitable fields (a required one absent, or a message rule such as "give
// exactly one of cron or interval_seconds" while some are absent); an
// optional elicitable field that is merely absent asks nothing. Arguments
// with other faults are refused at once, with every violation named, rather
// than asked about.
//
// Each question is asked only of a client that declared it can answer it.
// One it cannot answer follows the rule of docs/errors.md ("What a client
// lacks"): a form is left to the arguments; a sampling or roots question
// with a fallback is skipped, and the result says so; one without refuses
// the call (a capability_gap naming the client's capability, which the door
// answers as -32021 at 2026-07-28).
func (x *Elicitor) plan(ctx context.Context, c *call, args map[string]json.RawMessage) ([]*callsv1.Step, []string, *toolcall.Envelope) {
	t, b := c.t, c.b
	form := c.el.CanAsk
	admin := t.Kind == toolv1.Kind_KIND_ADMIN
	adminMissing := form && admin && len(toolcall.MissingAdmin(args)) > 0
	isAbsent := func(f string) bool {
		v, ok := args[f]
		return !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
	var absent, unanswered, asked, notes []string
	oneofAsked := false // a question asks for a field of a oneof none of whose fields is given
	if form {
		for _, f := range t.Elicitable {
			if isAbsent(f) {
				absent = append(absent, f)
			}
		}
	}
	for _, q := range t.Questions {
		missing := slices.ContainsFunc(q.Fields, isAbsent)
		chosen := slices.ContainsFunc(q.Instead, func(f string) bool { return !isAbsent(f) })
		if !missing || chosen {
			// Given, or a field of its oneof given instead.
			continue
		}
		kind := portKind(inputKind(q.Kind))
		switch {
		case c.el.Offers(kind):
			asked = append(asked, q.Name)
			for _, f := range q.Fields {
				if isAbsent(f) {
					unanswered = append(unanswered, f)
				}
			}
			oneofAsked = oneofAsked || len(q.Instead) > 0
		case kind == port.QuestionForm:
			// Left to the arguments, as without questions.
		case q.Fallback != "":
			notes = append(notes, fmt.Sprintf("The client offers no %s, so %s.", capability(kind), q.Fallback))
		default:
			return nil, nil, toolcall.ClientGap(t.Name, capability(kind))
		}
	}
	if len(absent) == 0 && !adminMissing && len(unanswered) == 0 {
		return nil, notes, nil
	}
	partial := args
	if admin {
		raw, _, err := toolcall.StripAdmin(args, b.Input())
		if err != nil {
			return nil, nil, toolcall.Unexpected(ctx, x.log, t.Name, err)
		}
		partial = nil
		_ = json.Unmarshal(raw, &partial)
	}
	raw, err := json.Marshal(partial)
	if err != nil {
		return nil, nil, toolcall.Unexpected(ctx, x.log, t.Name, fmt.Errorf("re-encode arguments: %w", err))
	}
	vs := b.Violations(raw)
	askFields, other := false, false
	for _, v := range vs {
		top := toolcall.TopField(v.Field)
		switch {
		case len(absent) > 0 && (top == "" || slices.Contains(absent, top)):
			askFields = true
		case slices.Contains(unanswered, top), top == "" && v.Rule == oneofRule && oneofAsked:
			// A question asks for it (or for the oneof's choice).
		default:
			other = true
		}
	}
	if !askFields && !adminMissing && len(unanswered) == 0 {
		return nil, notes, nil
	}
	if other {
		boundary.LogRejection(ctx, x.log, boundary.MCPTool, vs)
		return nil, nil, toolcall.Invalid(t.Name, vs)
	}
	forms := x.forms[t.Name]
	var steps []*callsv1.Step
	if askFields {
		steps = append(steps, &callsv1.Step{Kind: callsv1.StepKind_STEP_KIND_FIELDS, Fields: t.Elicitable, RequestedSchema: forms.fields})
		if t.Preview != "" {
			steps = append(steps, &callsv1.Step{Kind: callsv1.StepKind_STEP_KIND_PREVIEW, PreviewTool: t.Preview})
		}
	}
	var questions []*callsv1.StepQuestion
	for _, q := range forms.questions {
		if slices.Contains(asked, q.GetName()) {
			questions = append(questions, q)
		}
	}
	if len(questions) > 0 {
		steps = append(steps, &callsv1.Step{Kind: callsv1.StepKind_STEP_KIND_QUESTIONS, Questions: questions})
	}
	if admin && form {
		steps = append(steps, &callsv1.Step{Kind: callsv1.StepKind_STEP_KIND_ADMIN, Fields: []string{toolcall.AdminConfirm, toolcall.AdminReason}, RequestedSchema: forms.admin})
	}
	return steps, notes, nil
}
