package toolcatalog

import (
	"fmt"
	"regexp"
	"slices"
	"text/template"

	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Question is a form the user fills in when the tool is called, for request
// fields the call left out (the tool option's questions, checked against the
// request).
type Question struct {
	// Name names the question within its tool.
	Name string
	// Fields are the request fields it asks for.
	Fields []string
	// Message is the question's text, a Go text/template over the call's
	// arguments by name; Text is its source.
	Message *template.Template
	Text    string
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
		for _, f := range o.GetFields() {
			fd := t.Method.Input().Fields().ByName(protoreflect.Name(f))
			switch {
			case fd == nil:
				return fail("%q is not a field of %s", f, t.Method.Input().FullName())
			case !elicitableField(fd):
				return fail("%q is not a flat value a form can ask for (a string, number, boolean, enum, timestamp or duration)", f)
			case slices.Contains(t.Elicitable, f):
				return fail("%q is elicitable: it is asked with the call's other missing input", f)
			case seen[f] != "":
				return fail("%q is asked by question %q too", f, seen[f])
			}
			seen[f] = o.GetName()
		}
		if o.GetMessage() == "" {
			return fail("it has no message")
		}
		msg, err := template.New(o.GetName()).Option("missingkey=zero").Parse(o.GetMessage())
		if err != nil {
			return fail("message: %v", err)
		}
		t.Questions = append(t.Questions, &Question{Name: o.GetName(), Fields: o.GetFields(), Message: msg, Text: o.GetMessage()})
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
