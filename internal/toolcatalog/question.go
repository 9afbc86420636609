package toolcatalog

import (
	"fmt"
	"regexp"
	"slices"
	"text/template"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Question is an input request a call makes of its client when the tool is
// called, for request fields the call left out: a form, a completion of the
// client's model or the client's roots (the tool option's questions,
// checked against the request).
type Question struct {
	// Name names the question within its tool.
	Name string
	// Kind is what it asks (FORM for the unspecified kind).
	Kind toolv1.QuestionKind
	// Fields are the request fields it asks for (one, for SAMPLING and
	// ROOTS).
	Fields []string
	// Message is the question's text, a Go text/template over the call's
	// arguments by name; Text is its source.
	Message *template.Template
	Text    string
	// MaxTokens and SystemPrompt bound a SAMPLING question's completion.
	MaxTokens    int
	SystemPrompt string
	// Fallback is what the tool does without the answer; "" when the call
	// needs it.
	Fallback string
	// Key is the literal key it is asked under; "" for the round-scoped one.
	Key string
	// Instead are the request fields that stand in for its fields: the
	// other fields of a oneof one of its fields is in (a proto oneof, or a
	// protovalidate message oneof). A call that gives any of them gives
	// its choice, and the question is not asked.
	Instead []string
}

// oneofPeers are the other fields of every oneof fd is in: its proto oneof
// (not a proto3 optional's) and the protovalidate message oneofs of md
// that name it.
func oneofPeers(md protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor) []string {
	var peers []string
	add := func(name string) {
		if name != string(fd.Name()) && !slices.Contains(peers, name) {
			peers = append(peers, name)
		}
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		for i := range od.Fields().Len() {
			add(string(od.Fields().Get(i).Name()))
		}
	}
	rules, _ := proto.GetExtension(md.Options(), validate.E_Message).(*validate.MessageRules)
	for _, o := range rules.GetOneof() {
		if slices.Contains(o.GetFields(), string(fd.Name())) {
			for _, f := range o.GetFields() {
				add(f)
			}
		}
	}
	return peers
}

// DefaultMaxTokens bounds a SAMPLING question's completion when its option
// does not.
const DefaultMaxTokens = 1000

// maxMaxTokens is the most tokens a SAMPLING question may ask for.
const maxMaxTokens = 4096

// clientField reports whether fd can take the answer of a SAMPLING or
// ROOTS question: a string, or a repeated string.
func clientField(fd protoreflect.FieldDescriptor) bool {
	return !fd.IsMap() && fd.Kind() == protoreflect.StringKind
}

var questionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// bindQuestions checks t's questions against its request and sets
// t.Questions.
func bindQuestions(t *Tool, opts []*toolv1.Question) error {
	seen := map[string]string{} // field → question
	for _, o := range opts {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("tool %q: question %q: %s", t.Name, o.GetName(), fmt.Sprintf(format, args...))
		}
		if !questionNameRE.MatchString(o.GetName()) {
			return fail("the name is not a lower-case word")
		}
		if slices.ContainsFunc(t.Questions, func(q *Question) bool { return q.Name == o.GetName() }) {
			return fail("asked twice")
		}
		if len(o.GetFields()) == 0 {
			return fail("asks for no field")
		}
		kind := o.GetKind()
		if kind == toolv1.QuestionKind_QUESTION_KIND_UNSPECIFIED {
			kind = toolv1.QuestionKind_QUESTION_KIND_FORM
		}
		form := kind == toolv1.QuestionKind_QUESTION_KIND_FORM
		if !form && len(o.GetFields()) != 1 {
			return fail("a %s question asks for exactly one field", kind)
		}
		if o.GetMaxTokens() < 0 || o.GetMaxTokens() > maxMaxTokens || (o.GetMaxTokens() != 0 && kind != toolv1.QuestionKind_QUESTION_KIND_SAMPLING) {
			return fail("max_tokens is for SAMPLING questions, 1 to %d", maxMaxTokens)
		}
		for _, f := range o.GetFields() {
			fd := t.Method.Input().Fields().ByName(protoreflect.Name(f))
			switch {
			case fd == nil:
				return fail("%q is not a field of %s", f, t.Method.Input().FullName())
			case !form && !clientField(fd):
				return fail("%q is not a string or repeated string field, which a %s answer fills", f, kind)
			case form && !elicitableField(fd):
				return fail("%q is not a flat value a form can ask for (a string, number, boolean, enum, timestamp or duration, or a list of choices)", f)
			case slices.Contains(t.Elicitable, f):
				return fail("%q is elicitable: it is asked with the call's other missing input", f)
			case seen[f] != "":
				return fail("%q is asked by question %q too", f, seen[f])
			}
			seen[f] = o.GetName()
		}
		var instead []string
		for _, f := range o.GetFields() {
			instead = append(instead, oneofPeers(t.Method.Input(), t.Method.Input().Fields().ByName(protoreflect.Name(f)))...)
		}
		if o.GetMessage() == "" {
			return fail("it has no message")
		}
		msg, err := template.New(o.GetName()).Option("missingkey=zero").Parse(o.GetMessage())
		if err != nil {
			return fail("message: %v", err)
		}
		maxTokens := int(o.GetMaxTokens())
		if kind == toolv1.QuestionKind_QUESTION_KIND_SAMPLING && maxTokens == 0 {
			maxTokens = DefaultMaxTokens
		}
		if k := o.GetKey(); k != "" && !questionNameRE.MatchString(k) {
			return fail("the key is not a lower-case word")
		}
		t.Questions = append(t.Questions, &Question{Name: o.GetName(), Kind: kind, Fields: o.GetFields(), Message: msg, Text: o.GetMessage(),
			MaxTokens: maxTokens, SystemPrompt: o.GetSystemPrompt(), Fallback: o.GetFallback(), Key: o.GetKey(), Instead: instead})
	}
	return nil
}

// taskSupport is t's task support: the option's, and OPTIONAL when it is
// unspecified for a tool that starts work a task follows.
func taskSupport(t *Tool, opt *toolv1.Tool) toolv1.TaskSupport {
	if s := opt.GetTaskSupport(); s != toolv1.TaskSupport_TASK_SUPPORT_UNSPECIFIED || t.Task == nil {
		return s
	}
	return toolv1.TaskSupport_TASK_SUPPORT_OPTIONAL
}
