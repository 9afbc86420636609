package toolcatalog_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

var (
	testingService = testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")
	duplicate      = testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("DuplicateService")
	kindsService   = testingv1.File_toolmesh_testing_v1_kinds_proto.Services().ByName("KindsService")
)

func docs(t *testing.T) toolcatalog.Docs {
	t.Helper()
	d, err := toolcatalog.LoadDocs(descriptorset.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func build(t *testing.T, services ...protoreflect.ServiceDescriptor) *toolcatalog.Registry {
	t.Helper()
	r, err := toolcatalog.Build(services, docs(t), toolcatalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestToolsFollowTheirOptions: each RPC with a tool option is one tool whose
// name, title, kind, flags, elicitable fields, preview and description come
// from the option and the RPC's comment, and whose procedure is the RPC's.
func TestToolsFollowTheirOptions(t *testing.T) {
	type tool struct {
		Title, Description, Procedure string
		Kind                          toolv1.Kind
		Privileged, LongRunning       bool
		Elicitable                    []string
		Preview, PageField            string
	}
	want := map[string]tool{
		"testing_echo": {Title: "Echo a message", Kind: toolv1.Kind_KIND_READ, Procedure: "/toolmesh.testing.v1.TestingService/Echo",
			// The comment's lines are joined into one paragraph.
			Description: "Echo a message back with the identity the call arrived with. When fail is set, fail in that way instead."},
		"testing_list_items": {Title: "List items", Kind: toolv1.Kind_KIND_READ, Procedure: "/toolmesh.testing.v1.TestingService/ListItems",
			Description: "List numbered items, paginated with offset and limit.", PageField: "page"},
		"testing_write": {Title: "Write a note", Kind: toolv1.Kind_KIND_WRITE, Procedure: "/toolmesh.testing.v1.TestingService/Write",
			Description: "Record a note for the calling agent."},
		"testing_purge": {Title: "Purge notes", Kind: toolv1.Kind_KIND_ADMIN, Procedure: "/toolmesh.testing.v1.TestingService/Purge",
			Description: "Remove every note of an agent.", Elicitable: []string{"agent_id"}},
		"testing_grant": {Title: "Grant credits", Kind: toolv1.Kind_KIND_ADMIN, Procedure: "/toolmesh.testing.v1.TestingService/Grant",
			Description: "Grant credits to an agent.", Privileged: true},
		"testing_peek": {Title: "Peek at configuration", Kind: toolv1.Kind_KIND_READ, Procedure: "/toolmesh.testing.v1.TestingService/Peek",
			Description: "Read the secret configuration.", Privileged: true},
		"testing_remind": {Title: "Plan a reminder", Kind: toolv1.Kind_KIND_WRITE, Procedure: "/toolmesh.testing.v1.TestingService/Remind",
			Description: "Plan a recurring reminder for the calling agent.", Elicitable: []string{"every", "channel", "timezone"},
			Preview: "testing_remind_preview"},
		"testing_remind_preview": {Title: "Preview a reminder", Kind: toolv1.Kind_KIND_READ, Procedure: "/toolmesh.testing.v1.TestingService/PreviewRemind",
			Description: "Show the next three times a reminder repeating this often would fire."},
		"testing_link": {Title: "Link an account", Kind: toolv1.Kind_KIND_WRITE, Procedure: "/toolmesh.testing.v1.TestingService/Link",
			Description: "Link the calling agent's account: refused with a VisitRequired detail (toolmesh.tool.v1.VisitRequired) until the test marks the agent's visit done, then counted once per idempotency key."},
		"testing_wait": {Title: "Wait", Kind: toolv1.Kind_KIND_READ, Procedure: "/toolmesh.testing.v1.TestingService/Wait",
			Description: "Wait before answering.", LongRunning: true},
		"testing_summarize": {Title: "Summarize a topic", Kind: toolv1.Kind_KIND_WRITE, Procedure: "/toolmesh.testing.v1.TestingService/Summarize",
			Description: "Summarize a topic for the calling agent: the client's model writes the summary, and the client's roots say where the agent works."},
		"testing_take": {Title: "Take every kind", Kind: toolv1.Kind_KIND_WRITE, Procedure: "/toolmesh.testing.v1.KindsService/Take",
			// Blank comment lines keep paragraphs apart.
			Description: "Take one value of every kind.\n\nA second paragraph, to show that paragraphs stay apart.", LongRunning: true},
	}
	r := build(t, testingService, kindsService)
	got := map[string]tool{}
	var names []string
	for _, tl := range r.Tools() {
		names = append(names, tl.Name)
		g := tool{Title: tl.Title, Description: tl.Description, Procedure: tl.Procedure, Kind: tl.Kind,
			Privileged: tl.Privileged, LongRunning: tl.LongRunning, Elicitable: tl.Elicitable, Preview: tl.Preview}
		if tl.PageField != nil {
			g.PageField = string(tl.PageField.Name())
		}
		got[tl.Name] = g
		if l, ok := r.Lookup(tl.Name); !ok || l != tl {
			t.Errorf("Lookup(%q) = %v, %v; want the listed tool", tl.Name, l, ok)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if !slices.IsSorted(names) {
		t.Errorf("tools are not sorted by name: %v", names)
	}
	if _, ok := r.Lookup("testing_repeat"); ok {
		t.Error("Lookup found a tool that is not in the registry")
	}
}

// TestListToolsDefaultTheirPage: a list tool's input schema says the page a
// call gets when it names none.
func TestListToolsDefaultTheirPage(t *testing.T) {
	tl, _ := build(t, testingService).Lookup("testing_list_items")
	props := inputProperties(t, tl)
	if props["offset"]["default"] != float64(0) || props["limit"]["default"] != float64(50) {
		t.Errorf("offset %v, limit %v; want defaults 0 and 50", props["offset"], props["limit"])
	}
}

// TestExtraInputAddsProperties: Options.ExtraInput adds properties (and
// required names, once) to the tools it chooses, and to no other.
func TestExtraInputAddsProperties(t *testing.T) {
	r, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{testingService}, docs(t), toolcatalog.Options{
		ExtraInput: func(tl *toolcatalog.Tool) (toolschema.Schema, []string) {
			if tl.Kind != toolv1.Kind_KIND_ADMIN {
				return nil, nil
			}
			return toolschema.Schema{"confirm": toolschema.Schema{"type": "boolean"}}, []string{"confirm", "agent_id"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	purge, _ := r.Lookup("testing_purge")
	var s struct{ Required []string }
	if err := json.Unmarshal(purge.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if _, ok := inputProperties(t, purge)["confirm"]; !ok || !slices.Equal(s.Required, []string{"agent_id", "confirm"}) {
		t.Errorf("testing_purge input schema %s, want confirm added and required once beside agent_id", purge.InputSchema)
	}
	echo, _ := r.Lookup("testing_echo")
	if _, ok := inputProperties(t, echo)["confirm"]; ok {
		t.Errorf("testing_echo (READ) got the extra input: %s", echo.InputSchema)
	}
}

func inputProperties(t *testing.T, tl *toolcatalog.Tool) map[string]map[string]any {
	t.Helper()
	var s struct{ Properties map[string]map[string]any }
	if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	return s.Properties
}

// TestDuplicateToolNamesAreRefused: two RPCs under one tool name stop the
// build, naming both.
func TestDuplicateToolNamesAreRefused(t *testing.T) {
	_, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{testingService, duplicate}, docs(t), toolcatalog.Options{})
	if err == nil {
		t.Fatal("Build with a duplicate tool name succeeded")
	}
	for _, want := range []string{`"testing_echo"`, "toolmesh.testing.v1.TestingService.Echo", "toolmesh.testing.v1.DuplicateService.Repeat"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// rpc is one method of a service made up for a test: its request and
// response are messages of toolmesh.testing.v1 or of the made-up file.
type rpc struct {
	name, in, out string
	tool          *toolv1.Tool
	streaming     bool
}

// madeUp are the messages of the made-up file: Every, whose one field has a
// name RemindRequest also has, with another type, and Unbounded, whose
// offset and limit have no rules.
var madeUp = []*descriptorpb.DescriptorProto{
	{Name: proto.String("Every"), Field: []*descriptorpb.FieldDescriptorProto{int32Field("every", 1)}},
	{Name: proto.String("Unbounded"), Field: []*descriptorpb.FieldDescriptorProto{int32Field("offset", 1), int32Field("limit", 2)}},
}

func int32Field(name string, number int32) *descriptorpb.FieldDescriptorProto {
	return &descriptorpb.FieldDescriptorProto{
		Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(number),
		Type: descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
	}
}

// service makes up a service toolcatalog.test.Fake with rpcs, and the docs
// that describe each RPC (an RPC whose tool option has the title
// "undocumented" gets none).
func service(t *testing.T, rpcs ...rpc) (protoreflect.ServiceDescriptor, toolcatalog.Docs) {
	t.Helper()
	sd := &descriptorpb.ServiceDescriptorProto{Name: proto.String("Fake")}
	d := docs(t)
	d["toolcatalog.test.Fake"] = "Fake tools."
	for _, m := range rpcs {
		opts := &descriptorpb.MethodOptions{}
		proto.SetExtension(opts, toolv1.E_Tool, m.tool)
		sd.Method = append(sd.Method, &descriptorpb.MethodDescriptorProto{
			Name: proto.String(m.name), InputType: proto.String(m.in), OutputType: proto.String(m.out),
			Options: opts, ServerStreaming: proto.Bool(m.streaming),
		})
		if m.tool.GetTitle() != "undocumented" {
			d["toolcatalog.test.Fake."+protoreflect.FullName(m.name)] = "Does " + m.name + "."
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:        proto.String("toolcatalog_test/fake.proto"),
		Package:     proto.String("toolcatalog.test"),
		Syntax:      proto.String("proto3"),
		Dependency:  []string{"toolmesh/testing/v1/testing.proto", "toolmesh/testing/v1/kinds.proto", "toolmesh/testing/v1/jobs.proto", "toolmesh/tool/v1/tool.proto"},
		MessageType: madeUp,
		Service:     []*descriptorpb.ServiceDescriptorProto{sd},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0), d
}

// TestBadToolOptionsAreRefused: a tool option the edge cannot serve stops
// the build with an error that says what to fix.
func TestBadToolOptionsAreRefused(t *testing.T) {
	const (
		echoIn, echoOut = ".toolmesh.testing.v1.EchoRequest", ".toolmesh.testing.v1.EchoResponse"
		listIn          = ".toolmesh.testing.v1.ListItemsRequest"
		listOut         = ".toolmesh.testing.v1.ListItemsResponse"
		remindIn        = ".toolmesh.testing.v1.RemindRequest"
		takeIn          = ".toolmesh.testing.v1.TakeRequest"
	)
	read := func(name string) *toolv1.Tool {
		return &toolv1.Tool{Name: name, Title: "A tool", Kind: toolv1.Kind_KIND_READ}
	}
	withPreview := func(preview string) *toolv1.Tool {
		return &toolv1.Tool{Name: "fake_plan", Title: "Plan", Kind: toolv1.Kind_KIND_WRITE, Preview: preview}
	}
	asking := func(qs ...*toolv1.Question) *toolv1.Tool {
		return &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_WRITE, Questions: qs}
	}
	achieving := func(as ...*toolv1.Accomplishment) *toolv1.Tool {
		return &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_WRITE, Accomplishments: as}
	}
	cases := []struct {
		name string
		rpcs []rpc
		want string
	}{
		{"no kind", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_get", Title: "Get"}}},
			`tool "fake_get" on toolcatalog.test.Fake.Get has no kind`},
		{"no title", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_get", Kind: toolv1.Kind_KIND_READ}}},
			`tool "fake_get" on toolcatalog.test.Fake.Get has no title`},
		{"no comment", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_get", Title: "undocumented", Kind: toolv1.Kind_KIND_READ}}},
			`tool "fake_get": toolcatalog.test.Fake.Get has no leading comment to describe it`},
		{"name with a double underscore", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("fake__get")}},
			`tool name "fake__get" on toolcatalog.test.Fake.Get must be lower snake case (by convention <domain>_<verb>)`},
		{"name starting with a digit", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("9fake_get")}}, `tool name "9fake_get"`},
		{"name without a domain", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("_get")}}, `tool name "_get"`},
		{"name in capitals", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("Fake_Get")}}, `tool name "Fake_Get"`},
		{"name with a dash", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("fake-get_x")}}, `tool name "fake-get_x"`},
		{"content field missing", []rpc{{name: "Get", in: echoIn, out: echoOut,
			tool: &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_READ, ContentField: "blocks"}}},
			`tool "fake_get": content_field "blocks" is not a repeated toolmesh.tool.v1.Content field of toolmesh.testing.v1.EchoResponse`},
		{"content field of another type", []rpc{{name: "List", in: listIn, out: listOut,
			tool: &toolv1.Tool{Name: "fake_list", Title: "List", Kind: toolv1.Kind_KIND_READ, ContentField: "items"}}},
			`tool "fake_list": content_field "items" is not a repeated toolmesh.tool.v1.Content field`},
		{"streaming without events", []rpc{{name: "Get", in: echoIn, out: echoOut, tool: read("fake_get"), streaming: true}},
			`tool "fake_get": toolcatalog.test.Fake.Get streams its response, which has no toolmesh.tool.v1.CallEvent field for its events`},
		{"elicitable field missing", []rpc{{name: "Get", in: echoIn, out: echoOut,
			tool: &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_READ, Elicitable: []string{"nope"}}}},
			`tool "fake_get": elicitable field "nope" is not a field of toolmesh.testing.v1.EchoRequest`},
		{"elicitable list", []rpc{{name: "Get", in: takeIn, out: echoOut,
			tool: &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_READ, Elicitable: []string{"tags"}}}},
			`tool "fake_get": elicitable field "tags" is not a flat value a form can ask for`},
		{"elicitable message", []rpc{{name: "Get", in: takeIn, out: echoOut,
			tool: &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_READ, Elicitable: []string{"inner"}}}},
			`elicitable field "inner" is not a flat value`},
		{"preview missing", []rpc{{name: "Plan", in: remindIn, out: echoOut, tool: withPreview("fake_preview")}},
			`tool "fake_plan": preview tool "fake_preview" is not a tool of the same registry`},
		{"preview not READ", []rpc{
			{name: "Plan", in: remindIn, out: echoOut, tool: withPreview("fake_preview")},
			{name: "Preview", in: remindIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_preview", Title: "Preview", Kind: toolv1.Kind_KIND_WRITE}},
		}, `tool "fake_plan": preview tool "fake_preview" must be a READ tool`},
		{"preview needs what the tool lacks", []rpc{
			{name: "Plan", in: remindIn, out: echoOut, tool: withPreview("fake_preview")},
			{name: "Preview", in: echoIn, out: echoOut, tool: read("fake_preview")},
		}, `tool "fake_plan": preview tool "fake_preview" requires message, which toolmesh.testing.v1.RemindRequest does not have`},
		{"preview takes a field otherwise", []rpc{
			{name: "Plan", in: remindIn, out: echoOut, tool: withPreview("fake_preview")},
			{name: "Preview", in: ".toolcatalog.test.Every", out: echoOut, tool: read("fake_preview")},
		}, `tool "fake_plan": preview tool "fake_preview" takes every, which toolmesh.testing.v1.RemindRequest does not take alike`},
		{"question field missing", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "check", Fields: []string{"nope"}, Message: "Sure?"})}},
			`tool "fake_get": question "check": "nope" is not a field of toolmesh.testing.v1.TakeRequest`},
		{"question field a list", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "check", Fields: []string{"tags"}, Message: "Sure?"})}},
			`question "check": "tags" is not a flat value a form can ask for`},
		{"sampling question of two fields", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "model", Kind: toolv1.QuestionKind_QUESTION_KIND_SAMPLING, Fields: []string{"plain", "bounded"}, Message: "Write?"})}},
			`question "model": a QUESTION_KIND_SAMPLING question asks for exactly one field`},
		{"sampling question of a number", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "model", Kind: toolv1.QuestionKind_QUESTION_KIND_SAMPLING, Fields: []string{"shade"}, Message: "Write?"})}},
			`question "model": "shade" is not a string or repeated string field, which a QUESTION_KIND_SAMPLING answer fills`},
		{"sampling question asking too much", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "model", Kind: toolv1.QuestionKind_QUESTION_KIND_SAMPLING, Fields: []string{"plain"}, Message: "Write?", MaxTokens: 5000})}},
			`question "model": max_tokens is for SAMPLING questions, 1 to 4096`},
		{"roots question with max_tokens", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "roots", Kind: toolv1.QuestionKind_QUESTION_KIND_ROOTS, Fields: []string{"tags"}, Message: "Roots?", MaxTokens: 10})}},
			`question "roots": max_tokens is for SAMPLING questions`},
		{"question field elicitable", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: func() *toolv1.Tool {
			t := asking(&toolv1.Question{Name: "check", Fields: []string{"name"}, Message: "Sure?"})
			t.Elicitable = []string{"name"}
			return t
		}()}}, `question "check": "name" is elicitable`},
		{"question field asked twice", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(
			&toolv1.Question{Name: "first", Fields: []string{"name"}, Message: "Name?"},
			&toolv1.Question{Name: "second", Fields: []string{"shade", "name"}, Message: "Shade?"})}},
			`question "second": "name" is asked by question "first" too`},
		{"question named twice", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(
			&toolv1.Question{Name: "first", Fields: []string{"name"}, Message: "Name?"},
			&toolv1.Question{Name: "first", Fields: []string{"shade"}, Message: "Shade?"})}},
			`question "first": asked twice`},
		{"question badly named", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "Check", Fields: []string{"name"}, Message: "Sure?"})}},
			`question "Check": the name is not a lower-case word`},
		{"question without fields", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "check", Message: "Sure?"})}},
			`question "check": asks for no field`},
		{"question without message", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "check", Fields: []string{"name"}})}},
			`question "check": it has no message`},
		{"question with a broken message", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: asking(&toolv1.Question{Name: "check", Fields: []string{"name"}, Message: "Take {{.name"})}},
			`question "check": message: template`},
		{"accomplishment badly named", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: achieving(&toolv1.Accomplishment{Name: "Done", Field: "plain"})}},
			`accomplishment name "Done" is not lower snake case`},
		{"accomplishment of no field", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: achieving(&toolv1.Accomplishment{Name: "done", Field: "nothing"})}},
			`accomplishment "done": "nothing" is not a single field of toolmesh.testing.v1.TakeRequest`},
		{"accomplishment of a list", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: achieving(&toolv1.Accomplishment{Name: "done", Field: "tags"})}},
			`accomplishment "done": "tags" is not a single field`},
		{"accomplishment of an unknown value", []rpc{{name: "Get", in: takeIn, out: echoOut, tool: achieving(&toolv1.Accomplishment{Name: "done", Field: "shade", Value: "SHADE_PINK"})}},
			`accomplishment "done": "SHADE_PINK" is not a value of toolmesh.testing.v1.Shade`},
		{"list without offset", []rpc{{name: "List", in: echoIn, out: listOut, tool: read("fake_list")}},
			`list tool "fake_list" (toolcatalog.test.Fake.List): a list request needs an int32 offset field`},
		{"list with unbounded paging", []rpc{{name: "List", in: ".toolcatalog.test.Unbounded", out: listOut, tool: read("fake_list")}},
			`list tool "fake_list" (toolcatalog.test.Fake.List): offset needs the rule gte: 0 (negatives are rejected)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sd, d := service(t, c.rpcs...)
			_, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{sd}, d, toolcatalog.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// The same made-up service with good options builds: the refusals
	// above come from the option each case breaks.
	sd, d := service(t,
		rpc{name: "Plan", in: remindIn, out: echoOut, tool: withPreview("fake_preview")},
		rpc{name: "Preview", in: ".toolmesh.testing.v1.PreviewRemindRequest", out: echoOut, tool: read("fake_preview")},
		rpc{name: "List", in: listIn, out: listOut, tool: read("fake_list")},
		rpc{name: "Get", in: takeIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_get", Title: "Get", Kind: toolv1.Kind_KIND_READ, Elicitable: []string{"name", "shade", "at", "wait"}}},
		rpc{name: "Take", in: takeIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_take", Title: "Take", Kind: toolv1.Kind_KIND_WRITE,
			Elicitable: []string{"shade"}, TaskSupport: toolv1.TaskSupport_TASK_SUPPORT_REQUIRED, Questions: []*toolv1.Question{
				{Name: "which", Fields: []string{"name", "at"}, Message: "Which {{.shade}} one, and when?"},
				{Name: "wait", Fields: []string{"wait"}, Message: "How long may it wait?"},
			}}},
	)
	r, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{sd}, d, toolcatalog.Options{})
	if err != nil {
		t.Fatalf("Build of the good service: %v", err)
	}
	take, _ := r.Lookup("fake_take")
	var qs []string
	for _, q := range take.Questions {
		var b strings.Builder
		if err := q.Message.Execute(&b, map[string]any{"shade": "red"}); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q.Name+" "+strings.Join(q.Fields, ",")+": "+b.String())
	}
	if want := []string{"which name,at: Which red one, and when?", "wait wait: How long may it wait?"}; !cmp.Equal(qs, want) {
		t.Errorf("questions of fake_take = %q, want %q", qs, want)
	}
	if take.TaskSupport != toolv1.TaskSupport_TASK_SUPPORT_REQUIRED {
		t.Errorf("fake_take's task support = %v, want REQUIRED", take.TaskSupport)
	}
}

// TestTaskSupportDefaultsToTheTaskBlock: a tool that starts work a task
// follows supports tasks unless it says otherwise; any other tool does not.
func TestTaskSupportDefaultsToTheTaskBlock(t *testing.T) {
	jobs := testingv1.File_toolmesh_testing_v1_jobs_proto.Services().ByName("TestingJobsService")
	r := build(t, testingService, jobs)
	for name, want := range map[string]toolv1.TaskSupport{
		"testing_start_job": toolv1.TaskSupport_TASK_SUPPORT_OPTIONAL,
		"testing_get_job":   toolv1.TaskSupport_TASK_SUPPORT_UNSPECIFIED,
		"testing_echo":      toolv1.TaskSupport_TASK_SUPPORT_UNSPECIFIED,
	} {
		tool, ok := r.Lookup(name)
		if !ok || tool.TaskSupport != want {
			t.Errorf("%s: task support %v, want %v", name, tool.TaskSupport, want)
		}
	}
}

// TestLoadDocsReadsEveryDescriptorsComment: services, RPCs, messages,
// fields and enum values are described by their leading comments.
func TestLoadDocsReadsEveryDescriptorsComment(t *testing.T) {
	d := docs(t)
	for name, want := range map[protoreflect.FullName]string{
		"toolmesh.testing.v1.KindsService":        "KindsService takes every kind of field, so that the tool built from it covers them all.",
		"toolmesh.testing.v1.TakeRequest.plain":   "A string without rules.",
		"toolmesh.testing.v1.Inner":               "Inner is a nested message with rules of its own.",
		"toolmesh.testing.v1.SHADE_LIGHT":         "As light as it gets.",
		"toolmesh.testing.v1.TakeResponse":        "",
		"toolmesh.testing.v1.TakeRequest.exact":   "",
		"toolmesh.testing.v1.Shade":               "Shade is an enum with a zero value that requests never need.",
		"toolmesh.testing.v1.TakeRequest.bounded": "A string of 2 to 10 characters.",
	} {
		if got := d.Lookup(name); got != want {
			t.Errorf("Lookup(%s) = %q, want %q", name, got, want)
		}
	}
}

// A question for a field of a oneof is not asked when the call names
// another of its fields: projects_create asks for the client's roots as
// path, a field of its message oneof with git_url.
func TestQuestionsOfAOneofKnowItsOtherFields(t *testing.T) {
	r := build(t, projectsv1.File_toolmesh_projects_v1_projects_proto.Services().ByName("ProjectsService"))
	create, ok := r.Lookup("projects_create")
	if !ok || len(create.Questions) != 1 {
		t.Fatalf("projects_create = %v, want one question", create)
	}
	if q := create.Questions[0]; q.Kind != toolv1.QuestionKind_QUESTION_KIND_ROOTS || !cmp.Equal(q.Fields, []string{"path"}) || !cmp.Equal(q.Instead, []string{"git_url"}) {
		t.Errorf("question = %s %v %v instead of %v, want roots for path, git_url instead", q.Name, q.Kind, q.Fields, q.Instead)
	}
}
