// Package toolcatalog builds the edge's tool surface from compiled protobuf
// descriptors: every RPC that carries a toolmesh.tool.v1.tool option becomes
// one tool, with its description from the RPC comment and its schemas from
// the request and response messages. The registry is built once at start and
// never changes afterwards.
package toolcatalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// pageMessage is the message a list response carries in its `page` field.
const pageMessage protoreflect.FullName = "toolmesh.page.v1.Page"

// contentMessage is the message of a tool's content blocks, eventMessage
// that of the events a streaming tool reports.
const (
	contentMessage protoreflect.FullName = "toolmesh.tool.v1.Content"
	eventMessage   protoreflect.FullName = "toolmesh.tool.v1.CallEvent"
)

// waitField names the request field of a long_running tool that waits for
// its outcome (Tool.Wait).
const waitField = "wait_seconds"

// Tool is one MCP tool and the RPC behind it.
type Tool struct {
	Name        string
	Title       string
	Description string
	Kind        toolv1.Kind
	Privileged  bool
	LongRunning bool
	// Elicitable lists request fields that may be asked from the user.
	Elicitable []string
	// Preview names the READ tool whose result the user confirms when a call
	// was completed by elicitation ("" for none).
	Preview string

	// Toolset is the name of the toolset the tool belongs to (see Toolset).
	Toolset string
	// Service is the fully-qualified service name.
	Service string
	// Method is the RPC.
	Method protoreflect.MethodDescriptor
	// Procedure is the Connect/gRPC path, "/pkg.Service/Method".
	Procedure string
	// PageField is the response's page field when the tool is a list tool.
	PageField protoreflect.FieldDescriptor
	// Resource is set when the tool is also served as an MCP resource.
	Resource *Resource
	// Task is set when the work the tool starts is an MCP task.
	Task *Task
	// TaskSupport says whether a call may or must become an MCP task (an
	// unspecified option is OPTIONAL for a tool with a Task, and means no
	// for any other).
	TaskSupport toolv1.TaskSupport
	// Questions are asked of the user when a call lacks their fields.
	Questions []*Question
	// Prompts are the prompts that read through the tool.
	Prompts []*Prompt
	// View is the MCP Apps view that shows the tool's result; nil for none.
	View *View

	// ContentField is the response's repeated toolmesh.tool.v1.Content
	// field holding the blocks the result shows besides its data (the tool
	// option's content_field); nil for none.
	ContentField protoreflect.FieldDescriptor
	// EventField is the response's toolmesh.tool.v1.CallEvent field of a
	// tool whose RPC streams: the messages that set it are events, the one
	// that does not is the result. Nil for a unary tool.
	EventField protoreflect.FieldDescriptor

	// Wait is the request's wait_seconds field of a long_running tool that
	// waits for its outcome (an optional int32): the service waits that
	// many seconds at most, then answers with a handle to poll. Nil for
	// other tools.
	Wait protoreflect.FieldDescriptor

	// Accomplishments are what a successful call achieves when its request
	// says so (see Accomplished); nil for most tools.
	Accomplishments []Accomplishment

	// Untrusted lead to the response's string values written outside the
	// mesh (the untrusted field option): screened and marked in every
	// result (internal/toolcall). Nil for most tools.
	Untrusted []UntrustedPath

	// InputSchema and OutputSchema are the marshalled JSON schemas.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
}

// Registry is the immutable set of tools, sorted by name.
type Registry struct {
	tools      []*Tool
	byName     map[string]*Tool
	resources  []*Tool
	onBehalfOf *OnBehalfOf
	toolsets   []*Toolset
	// cardExtensions are sorted by tool name, as tools are.
	cardExtensions []*CardExtension
	// events are the event types, sorted by name.
	events       []*EventType
	eventsByName map[string]*EventType
}

// Options adjust the generated schemas.
type Options struct {
	// ExtraInput adds properties to the input schema of tools of a kind
	// (the edge adds confirm and reason to ADMIN tools).
	ExtraInput func(t *Tool) (props toolschema.Schema, required []string)
	// ErrorOutput is the schema of an error result. When set, a tool's
	// output schema is the union (oneOf) of its success result and this, so
	// that every result, success or error, validates against it.
	ErrorOutput toolschema.Schema
}

// Build makes the registry for services. Two RPCs that map to the same tool
// name are an error naming both.
func Build(services []protoreflect.ServiceDescriptor, docs Docs, opts Options) (*Registry, error) {
	r := &Registry{byName: map[string]*Tool{}}
	for _, sd := range services {
		methods := sd.Methods()
		for i := 0; i < methods.Len(); i++ {
			md := methods.Get(i)
			opt := toolOption(md)
			if opt == nil {
				continue
			}
			t, err := newTool(sd, md, opt, docs, opts)
			if err != nil {
				return nil, err
			}
			if prev, ok := r.byName[t.Name]; ok {
				return nil, fmt.Errorf("duplicate tool name %q: %s and %s both map to it",
					t.Name, prev.Method.FullName(), md.FullName())
			}
			r.byName[t.Name] = t
			r.tools = append(r.tools, t)
		}
	}
	sort.Slice(r.tools, func(i, j int) bool { return r.tools[i].Name < r.tools[j].Name })
	if err := r.bindToolsets(services, docs); err != nil {
		return nil, err
	}
	templates := map[string]string{}
	for _, t := range r.tools {
		if err := r.checkPreview(t); err != nil {
			return nil, err
		}
		if opt := toolOption(t.Method).GetResource(); opt != nil {
			if err := r.bindResource(t, opt); err != nil {
				return nil, err
			}
			tmpl := t.Resource.URITemplate()
			if prev, ok := templates[tmpl]; ok {
				return nil, fmt.Errorf("duplicate resource template %q: tools %q and %q both serve it", tmpl, prev, t.Name)
			}
			templates[tmpl] = t.Name
			r.resources = append(r.resources, t)
		}
	}
	// Blocks that name other tools, and resources: after every resource is
	// bound.
	prompts := map[string]string{}
	for _, t := range r.tools {
		opt := toolOption(t.Method)
		if task := opt.GetTask(); task != nil {
			if err := r.bindTask(t, task); err != nil {
				return nil, err
			}
		}
		t.TaskSupport = taskSupport(t, opt)
		if err := r.bindPrompts(t, opt.GetPrompts(), prompts); err != nil {
			return nil, err
		}
		if b := opt.GetOnBehalfOf(); b != nil {
			if err := r.bindOnBehalfOf(t, b); err != nil {
				return nil, err
			}
		}
		if c := opt.GetCardExtension(); c != nil {
			if err := r.bindCardExtension(t, c); err != nil {
				return nil, err
			}
		}
	}
	if err := r.bindEvents(services, docs); err != nil {
		return nil, err
	}
	return r, nil
}

// checkPreview checks that t's preview tool is a READ tool of the registry
// that can be called with t's arguments: each of its request fields that t
// also has is of the same type, and each one t lacks is optional (the
// preview uses its default).
func (r *Registry) checkPreview(t *Tool) error {
	if t.Preview == "" {
		return nil
	}
	p, ok := r.byName[t.Preview]
	if !ok {
		return fmt.Errorf("tool %q: preview tool %q is not a tool of the same registry", t.Name, t.Preview)
	}
	if p.Kind != toolv1.Kind_KIND_READ {
		return fmt.Errorf("tool %q: preview tool %q must be a READ tool", t.Name, t.Preview)
	}
	in, pin := t.Method.Input().Fields(), p.Method.Input().Fields()
	for i := 0; i < pin.Len(); i++ {
		pf := pin.Get(i)
		f := in.ByName(pf.Name())
		if f == nil {
			if required(pf) {
				return fmt.Errorf("tool %q: preview tool %q requires %s, which %s does not have", t.Name, t.Preview, pf.Name(), t.Method.Input().FullName())
			}
			continue
		}
		if f.Kind() != pf.Kind() || f.Cardinality() != pf.Cardinality() || f.IsMap() != pf.IsMap() ||
			(f.Message() != nil && f.Message().FullName() != pf.Message().FullName()) ||
			(f.Enum() != nil && f.Enum().FullName() != pf.Enum().FullName()) {
			return fmt.Errorf("tool %q: preview tool %q takes %s, which %s does not take alike", t.Name, t.Preview, pf.Name(), t.Method.Input().FullName())
		}
	}
	return nil
}

// required reports whether fd carries the protovalidate rule required.
func required(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, validate.E_Field) {
		return false
	}
	r, _ := proto.GetExtension(opts, validate.E_Field).(*validate.FieldRules)
	return r.GetRequired()
}

// elicitableField reports whether fd can be asked in a form: form
// elicitation allows flat primitive values (strings, numbers, booleans,
// enums, and timestamps and durations written as strings) and multi-select
// lists of choices (a repeated enum, or a repeated string whose items have
// an `in` rule).
func elicitableField(fd protoreflect.FieldDescriptor) bool {
	if fd.IsMap() {
		return false
	}
	if fd.IsList() {
		switch fd.Kind() {
		case protoreflect.EnumKind:
			return true
		case protoreflect.StringKind:
			opts := fd.Options()
			if opts == nil || !proto.HasExtension(opts, validate.E_Field) {
				return false
			}
			r, _ := proto.GetExtension(opts, validate.E_Field).(*validate.FieldRules)
			return len(r.GetRepeated().GetItems().GetString().GetIn()) > 0
		}
		return false
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp", "google.protobuf.Duration":
			return true
		}
		return false
	}
	return true
}

func toolOption(md protoreflect.MethodDescriptor) *toolv1.Tool {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, toolv1.E_Tool) {
		return nil
	}
	t, _ := proto.GetExtension(opts, toolv1.E_Tool).(*toolv1.Tool)
	return t
}

func newTool(sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor, opt *toolv1.Tool, docs Docs, opts Options) (*Tool, error) {
	if md.IsStreamingClient() {
		return nil, fmt.Errorf("tool %q: %s streams its request; a tool's request is one message", opt.GetName(), md.FullName())
	}
	if !validName(opt.GetName()) {
		return nil, fmt.Errorf("tool name %q on %s must be lower snake case (by convention <domain>_<verb>)", opt.GetName(), md.FullName())
	}
	if opt.GetKind() == toolv1.Kind_KIND_UNSPECIFIED {
		return nil, fmt.Errorf("tool %q on %s has no kind", opt.GetName(), md.FullName())
	}
	t := &Tool{
		Name:        opt.GetName(),
		Title:       opt.GetTitle(),
		Description: docs.Lookup(md.FullName()),
		Kind:        opt.GetKind(),
		Privileged:  opt.GetPrivileged(),
		LongRunning: opt.GetLongRunning(),
		Elicitable:  opt.GetElicitable(),
		Preview:     opt.GetPreview(),
		Service:     string(sd.FullName()),
		Method:      md,
		Procedure:   "/" + string(sd.FullName()) + "/" + string(md.Name()),
	}
	if t.Title == "" {
		return nil, fmt.Errorf("tool %q on %s has no title", t.Name, md.FullName())
	}
	if t.Description == "" {
		return nil, fmt.Errorf("tool %q: %s has no leading comment to describe it", t.Name, md.FullName())
	}
	if t.Untrusted = untrustedPaths(md.Output()); len(t.Untrusted) > 0 {
		t.Description += untrustedNote(t.Untrusted)
	}
	for _, f := range t.Elicitable {
		fd := md.Input().Fields().ByName(protoreflect.Name(f))
		if fd == nil {
			return nil, fmt.Errorf("tool %q: elicitable field %q is not a field of %s", t.Name, f, md.Input().FullName())
		}
		if !elicitableField(fd) {
			return nil, fmt.Errorf("tool %q: elicitable field %q is not a flat value a form can ask for (a string, number, boolean, enum, timestamp or duration, or a list of choices)", t.Name, f)
		}
	}
	if err := bindQuestions(t, opt.GetQuestions()); err != nil {
		return nil, err
	}
	if err := bindView(t, opt); err != nil {
		return nil, err
	}
	if err := bindAccomplishments(t, opt.GetAccomplishments()); err != nil {
		return nil, err
	}
	if pf := md.Output().Fields().ByName("page"); pf != nil && pf.Message() != nil && pf.Message().FullName() == pageMessage {
		t.PageField = pf
	}
	if name := opt.GetContentField(); name != "" {
		fd := md.Output().Fields().ByName(protoreflect.Name(name))
		if fd == nil || !fd.IsList() || fd.Message() == nil || fd.Message().FullName() != contentMessage {
			return nil, fmt.Errorf("tool %q: content_field %q is not a repeated %s field of %s", t.Name, name, contentMessage, md.Output().FullName())
		}
		t.ContentField = fd
	}
	if md.IsStreamingServer() {
		fields := md.Output().Fields()
		for i := 0; i < fields.Len(); i++ {
			if fd := fields.Get(i); fd.Message() != nil && !fd.IsList() && fd.Message().FullName() == eventMessage {
				t.EventField = fd
			}
		}
		if t.EventField == nil {
			return nil, fmt.Errorf("tool %q: %s streams its response, which has no %s field for its events", t.Name, md.FullName(), eventMessage)
		}
	}
	if fd := md.Input().Fields().ByName(waitField); t.LongRunning && fd != nil && fd.Kind() == protoreflect.Int32Kind && fd.HasPresence() && !fd.IsList() {
		t.Wait = fd
	}

	in := toolschema.Input(md.Input(), docs.Lookup)
	if t.PageField != nil {
		if err := checkPaging(md.Input()); err != nil {
			return nil, fmt.Errorf("list tool %q (%s): %w", t.Name, md.FullName(), err)
		}
		props := in["properties"].(toolschema.Schema)
		props["offset"].(toolschema.Schema)["default"] = 0
		props["limit"].(toolschema.Schema)["default"] = paging.DefaultLimit
	}
	if opts.ExtraInput != nil {
		props, required := opts.ExtraInput(t)
		p := in["properties"].(toolschema.Schema)
		for k, v := range props {
			p[k] = v
		}
		req, _ := in["required"].([]string)
		for _, r := range required {
			if !slices.Contains(req, r) {
				req = append(req, r)
			}
		}
		if len(req) > 0 {
			in["required"] = req
		}
	}
	var err error
	if t.InputSchema, err = json.Marshal(in); err != nil {
		return nil, fmt.Errorf("tool %q: marshal input schema: %w", t.Name, err)
	}
	if t.OutputSchema, err = json.Marshal(outputSchema(t, opts.ErrorOutput)); err != nil {
		return nil, fmt.Errorf("tool %q: marshal output schema: %w", t.Name, err)
	}
	return t, nil
}

// checkPaging enforces the one paging contract of list tools: int32 offset
// and limit arguments, neither negative, the limit bounded. (The default
// limit is applied by the service, see internal/paging.)
func checkPaging(in protoreflect.MessageDescriptor) error {
	for _, name := range []protoreflect.Name{"offset", "limit"} {
		fd := in.Fields().ByName(name)
		if fd == nil || fd.Kind() != protoreflect.Int32Kind || fd.IsList() {
			return fmt.Errorf("a list request needs an int32 %s field", name)
		}
		var rules *validate.Int32Rules
		if opts := fd.Options(); opts != nil && proto.HasExtension(opts, validate.E_Field) {
			fr, _ := proto.GetExtension(opts, validate.E_Field).(*validate.FieldRules)
			rules = fr.GetInt32()
		}
		if !rules.HasGte() || rules.GetGte() < 0 {
			return fmt.Errorf("%s needs the rule gte: 0 (negatives are rejected)", name)
		}
		if name == "limit" && !rules.HasLte() {
			return errors.New("limit needs an upper bound (lte)")
		}
	}
	return nil
}

// outputSchema describes the results of t: its success envelope, or, with
// an error schema, either that or an error envelope. It gives the shape of
// the data (types, enums, formats, required fields) and no prose: clients
// validate results against it, models read the input schema and the
// description, and the meaning of each result field is in the contract
// (docs/tools.md). Every tool's schema is sent on every tools/list, so each
// byte here is paid 90-odd times a session.
func outputSchema(t *Tool, errorOutput toolschema.Schema) toolschema.Schema {
	data := toolschema.Output(t.Method.Output(), noComments)
	props := toolschema.Schema{
		"status": toolschema.Schema{"const": "ok"},
		"data":   data,
	}
	for _, fd := range []protoreflect.FieldDescriptor{t.ContentField, t.EventField} {
		// The blocks are the result's content and the events are
		// notifications, not data.
		if fd != nil {
			delete(data["properties"].(toolschema.Schema), string(fd.Name()))
		}
	}
	if t.PageField != nil {
		delete(data["properties"].(toolschema.Schema), string(t.PageField.Name()))
		props["pagination"] = toolschema.Schema{
			"type": "object",
			"properties": toolschema.Schema{
				"offset":      toolschema.Schema{"type": "integer"},
				"limit":       toolschema.Schema{"type": "integer"},
				"total":       toolschema.Schema{"type": "integer"},
				"next_offset": toolschema.Schema{"type": "integer"},
			},
			"required": []string{"offset", "limit", "total"},
		}
	}
	if len(t.Untrusted) > 0 {
		props["untrusted"] = toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "string"}}
	}
	if slices.ContainsFunc(t.Questions, func(q *Question) bool { return q.Fallback != "" }) {
		props["notes"] = toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "string"}}
	}
	ok := toolschema.Schema{
		"type":       "object",
		"properties": props,
		"required":   []string{"status", "data"},
	}
	if errorOutput == nil {
		ok["$schema"] = toolschema.Draft
		return ok
	}
	ok["title"] = "Success"
	return toolschema.Schema{
		"$schema": toolschema.Draft,
		"type":    "object",
		"oneOf":   []any{ok, errorOutput},
	}
}

// noComments is the documentation of output schemas: none (see outputSchema).
func noComments(protoreflect.FullName) string { return "" }

// validName reports whether n is lower snake case: words of lower-case
// letters and digits joined by single underscores, starting with a letter,
// at most 64 bytes. The product's tools are named <domain>_<verb>
// (TestProductToolsAreNamedForTheirDomain); the conformance suite's fixtures
// bear the names it calls.
func validName(n string) bool {
	if n == "" || len(n) > 64 || n[0] < 'a' || n[0] > 'z' || n[len(n)-1] == '_' || strings.Contains(n, "__") {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Action is the tool's title for use mid-sentence: lowercased, unless it
// starts an acronym ("Create work task" → "create work task").
func (t *Tool) Action() string {
	s := t.Title
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	if next, _ := utf8.DecodeRuneInString(s[n:]); unicode.IsUpper(next) {
		return s
	}
	return string(unicode.ToLower(r)) + s[n:]
}

// Tools returns every tool, sorted by name. The slice must not be modified.
func (r *Registry) Tools() []*Tool { return r.tools }

// Resources returns the tools served as resources, sorted by tool name.
func (r *Registry) Resources() []*Tool { return r.resources }

// Lookup returns the tool with that name.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}
