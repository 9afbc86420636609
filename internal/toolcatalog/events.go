package toolcatalog

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/toolmesh/toolmesh/internal/toolschema"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// EventType is an MCP event type a contract declares: a message carrying
// the toolmesh.tool.v1.event option is its payload. Clients find it in
// events/list; the events service keeps its occurrences.
type EventType struct {
	Name        string
	Description string
	// Payload is the message each occurrence carries as its data.
	Payload protoreflect.MessageDescriptor
	// Arguments is the message of a subscription's arguments; each of its
	// fields narrows the occurrences to those whose payload field of the
	// same name (ArgumentFields) has the argument's value.
	Arguments protoreflect.MessageDescriptor
	// ArgumentFields maps each field of Arguments to the payload's field
	// of the same name.
	ArgumentFields map[protoreflect.FieldDescriptor]protoreflect.FieldDescriptor
	// Tool is the READ tool whose grants and toolset decide who sees the
	// events.
	Tool *Tool
	// AgentField is the payload's string field naming the agent the event
	// is about.
	AgentField protoreflect.FieldDescriptor
	// InputSchema is the JSON schema of the arguments (with their rules),
	// PayloadSchema that of the data.
	InputSchema   json.RawMessage
	PayloadSchema json.RawMessage
}

// eventName is the form of an event type's name.
var eventName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// EventTypes are the event types services declare, with their
// descriptions from the descriptor set compiled in (the events service's
// view; the edge reads them from its registry).
func EventTypes(services []protoreflect.ServiceDescriptor) ([]*EventType, error) {
	docs, err := LoadDocs(descriptorset.Bytes)
	if err != nil {
		return nil, err
	}
	reg, err := Build(services, docs, Options{})
	if err != nil {
		return nil, fmt.Errorf("build the contracts' catalog: %w", err)
	}
	return reg.Events(), nil
}

// Events are the event types the contracts declare, sorted by name.
func (r *Registry) Events() []*EventType { return r.events }

// Event finds an event type by name.
func (r *Registry) Event(name string) (*EventType, bool) {
	e, ok := r.eventsByName[name]
	return e, ok
}

// AgentOf is the agent the occurrence with payload m is about.
func (e *EventType) AgentOf(m protoreflect.Message) string { return m.Get(e.AgentField).String() }

// Matches reports whether the occurrence with payload m is one a
// subscription with arguments args sees: each argument given (not its zero
// value) equals the payload's field of the same name.
func (e *EventType) Matches(args, m protoreflect.Message) bool {
	for af, pf := range e.ArgumentFields {
		if !args.Has(af) {
			continue
		}
		if !args.Get(af).Equal(m.Get(pf)) {
			return false
		}
	}
	return true
}

// bindEvents finds the event types declared in the files of services and
// of the files they import from the same package.
func (r *Registry) bindEvents(services []protoreflect.ServiceDescriptor, docs Docs) error {
	r.eventsByName = map[string]*EventType{}
	seen := map[string]bool{}
	var walk func(md protoreflect.MessageDescriptor) error
	walk = func(md protoreflect.MessageDescriptor) error {
		if opt := eventOption(md); opt != nil {
			e, err := r.newEventType(md, opt, docs)
			if err != nil {
				return err
			}
			if prev, ok := r.eventsByName[e.Name]; ok {
				return fmt.Errorf("duplicate event name %q: %s and %s both declare it", e.Name, prev.Payload.FullName(), md.FullName())
			}
			r.eventsByName[e.Name] = e
			r.events = append(r.events, e)
		}
		for i := 0; i < md.Messages().Len(); i++ {
			if err := walk(md.Messages().Get(i)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, sd := range services {
		f := sd.ParentFile()
		if seen[f.Path()] {
			continue
		}
		seen[f.Path()] = true
		for i := 0; i < f.Messages().Len(); i++ {
			if err := walk(f.Messages().Get(i)); err != nil {
				return err
			}
		}
	}
	sort.Slice(r.events, func(i, j int) bool { return r.events[i].Name < r.events[j].Name })
	return nil
}

func eventOption(md protoreflect.MessageDescriptor) *toolv1.Event {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, toolv1.E_Event) {
		return nil
	}
	e, _ := proto.GetExtension(opts, toolv1.E_Event).(*toolv1.Event)
	return e
}

// newEventType checks the option opt of payload md and binds it.
func (r *Registry) newEventType(md protoreflect.MessageDescriptor, opt *toolv1.Event, docs Docs) (*EventType, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("event option of %s: %s", md.FullName(), fmt.Sprintf(format, args...))
	}
	if !eventName.MatchString(opt.GetName()) {
		return nil, fail("name %q must be lower case words joined by dots, e.g. \"ask.answered\"", opt.GetName())
	}
	if opt.GetDescription() == "" {
		return nil, fail("description is required")
	}
	t, ok := r.byName[opt.GetTool()]
	if !ok {
		return nil, fail("tool %q is not a tool of the same registry", opt.GetTool())
	}
	if t.Kind != toolv1.Kind_KIND_READ {
		return nil, fail("tool %q must be a READ tool", opt.GetTool())
	}
	agent := md.Fields().ByName(protoreflect.Name(opt.GetAgentField()))
	if agent == nil || agent.Kind() != protoreflect.StringKind || agent.Cardinality() == protoreflect.Repeated {
		return nil, fail("agent_field %q must name a string field of the payload", opt.GetAgentField())
	}
	desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(opt.GetArguments()))
	if err != nil {
		return nil, fail("arguments %q: %v", opt.GetArguments(), err)
	}
	args, ok := desc.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fail("arguments %q is not a message", opt.GetArguments())
	}
	e := &EventType{
		Name: opt.GetName(), Description: opt.GetDescription(), Payload: md, Arguments: args, Tool: t, AgentField: agent,
		ArgumentFields: map[protoreflect.FieldDescriptor]protoreflect.FieldDescriptor{},
	}
	for i := 0; i < args.Fields().Len(); i++ {
		af := args.Fields().Get(i)
		pf := md.Fields().ByName(af.Name())
		if af.Cardinality() == protoreflect.Repeated || af.Kind() == protoreflect.MessageKind || af.Kind() == protoreflect.GroupKind {
			return nil, fail("argument %s must be a scalar or an enum", af.Name())
		}
		if pf == nil || pf.Kind() != af.Kind() || pf.Cardinality() == protoreflect.Repeated ||
			(af.Enum() != nil && af.Enum().FullName() != pf.Enum().FullName()) {
			return nil, fail("argument %s has no payload field of the same name and type", af.Name())
		}
		e.ArgumentFields[af] = pf
	}
	if e.InputSchema, err = json.Marshal(toolschema.Input(args, docs.Lookup)); err != nil {
		return nil, fail("arguments schema: %v", err)
	}
	payload := toolschema.Output(md, docs.Lookup)
	payload["$schema"] = toolschema.Draft
	if e.PayloadSchema, err = json.Marshal(payload); err != nil {
		return nil, fail("payload schema: %v", err)
	}
	return e, nil
}
