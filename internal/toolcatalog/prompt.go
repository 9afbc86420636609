package toolcatalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Prompt is a prompt that reads the mesh through the READ tool carrying it
// (the tool option's prompts, checked against the contracts): the items it
// lists, the resource it reads, or the content blocks it answers.
type Prompt struct {
	*toolv1.Prompt
	// Tool carries the prompt: the list tool whose items it embeds, or the
	// READ tool whose one resource it embeds.
	Tool *Tool
	// ListArguments are the arguments every list call gets.
	ListArguments map[string]any
	// Text and Description render the instructions and the result's
	// description from PromptData.
	Text, Description *template.Template
	// Completions are the READ tools served as the resource templates its
	// arguments complete from, by argument.
	Completions map[string]*PromptCompletion
}

// PromptCompletion completes an argument from a resource template's items.
type PromptCompletion struct {
	// Resource names the template by its READ tool; it may be a tool of
	// another service, and the prompt is served only where it is.
	Resource string
	// ListArguments are the arguments its list tool gets; OwnerField, when
	// set, is set to whether the caller is the owner.
	ListArguments map[string]any
	OwnerField    string
}

// PromptData is what a prompt's templates read.
type PromptData struct {
	// Args are the arguments given, by name, trimmed; an argument with
	// choices holds its choice.
	Args map[string]string
	// Each are the choices the list was read for.
	Each []string
	// Count is how many resources are attached; More reports that there
	// were more; Limit is the most attached per list call.
	Count int
	More  bool
	Limit int
}

// PromptFuncs are the functions a prompt's templates may call.
var PromptFuncs = template.FuncMap{
	"join": strings.Join,
	// count says how many things there are: "1 open task", "2 open tasks".
	"count": func(n int, thing string) string {
		if n == 1 {
			return "1 " + thing
		}
		return fmt.Sprintf("%d %ss", n, thing)
	},
}

// bindPrompts checks t's prompts against the registry and sets t.Prompts.
func (r *Registry) bindPrompts(t *Tool, opts []*toolv1.Prompt, names map[string]string) error {
	for _, opt := range opts {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("tool %q: prompt %q: %s", t.Name, opt.GetName(), fmt.Sprintf(format, args...))
		}
		if !validName(opt.GetName()) || opt.GetTitle() == "" || opt.GetDescription() == "" {
			return fail("needs a name (lower-case words joined by _), a title and a description")
		}
		if prev, ok := names[opt.GetName()]; ok {
			return fail("the name is also a prompt of %q", prev)
		}
		names[opt.GetName()] = t.Name
		if t.Kind != toolv1.Kind_KIND_READ {
			return fail("a prompt reads through a READ tool")
		}
		p := &Prompt{Prompt: opt, Tool: t, Completions: map[string]*PromptCompletion{}}
		var err error
		if p.ListArguments, err = jsonObject(opt.GetListArguments()); err != nil {
			return fail("list_arguments: %v", err)
		}
		in := t.Method.Input().Fields()
		args := map[string]*toolv1.PromptArgument{}
		each := ""
		for _, a := range opt.GetArguments() {
			if a.GetName() == "" || args[a.GetName()] != nil {
				return fail("an argument has no name, or a name another has")
			}
			args[a.GetName()] = a
			if f := a.GetListField(); f != "" {
				switch opt.GetEmbed() {
				case toolv1.PromptEmbed_PROMPT_EMBED_LIST, toolv1.PromptEmbed_PROMPT_EMBED_CONTENT:
				default:
					return fail("argument %q: list_field is for prompts that embed a list or content", a.GetName())
				}
				if fd := in.ByName(protoreflect.Name(f)); fd == nil || fd.IsList() || fd.IsMap() {
					return fail("argument %q: list_field %q is not a field of %s's request", a.GetName(), f, t.Name)
				}
				if len(a.GetChoices()) > 0 && opt.GetEmbed() == toolv1.PromptEmbed_PROMPT_EMBED_LIST {
					if each != "" {
						return fail("arguments %q and %q both stand for every choice when empty; one may", each, a.GetName())
					}
					each = a.GetName()
				}
			}
			if c := a.GetComplete(); c != nil {
				pc := &PromptCompletion{Resource: c.GetResourceTool(), OwnerField: c.GetOwnerField()}
				if pc.ListArguments, err = jsonObject(c.GetListArguments()); err != nil {
					return fail("argument %q: complete: list_arguments: %v", a.GetName(), err)
				}
				if rt, ok := r.byName[pc.Resource]; ok {
					if rt.Resource == nil || rt.Resource.List == nil {
						return fail("argument %q: complete: %q is not served as a resource template", a.GetName(), pc.Resource)
					}
					if f := pc.OwnerField; f != "" {
						if fd := rt.Resource.List.Method.Input().Fields().ByName(protoreflect.Name(f)); fd == nil || fd.Kind() != protoreflect.BoolKind {
							return fail("argument %q: complete: owner_field %q is not a boolean field of %s's request", a.GetName(), f, rt.Resource.List.Name)
						}
					}
				}
				p.Completions[a.GetName()] = pc
			}
		}
		switch opt.GetEmbed() {
		case toolv1.PromptEmbed_PROMPT_EMBED_LIST:
			if t.PageField == nil || r.listedBy(t) == nil {
				return fail("embeds a list, but %q lists no resource template's items", t.Name)
			}
		case toolv1.PromptEmbed_PROMPT_EMBED_ONE:
			if t.Resource == nil || t.Resource.Variable == "" {
				return fail("embeds one resource, but %q serves no resource template", t.Name)
			}
			if a := args[opt.GetIdArgument()]; a == nil || !a.GetRequired() {
				return fail("id_argument %q is not a required argument", opt.GetIdArgument())
			}
		case toolv1.PromptEmbed_PROMPT_EMBED_CONTENT:
			if t.ContentField == nil {
				return fail("embeds content, but %q answers no content blocks (content_field)", t.Name)
			}
		default:
			return fail("says nothing of what it embeds")
		}
		parse := func(name, text string) (*template.Template, error) {
			tmpl, err := template.New(name).Funcs(PromptFuncs).Parse(text)
			if err == nil {
				// Render it once, with no argument, so a template that
				// cannot run fails here rather than on a user's request.
				err = tmpl.Execute(&strings.Builder{}, PromptData{Args: map[string]string{}})
			}
			return tmpl, err
		}
		if p.Text, err = parse("text", opt.GetText()); err != nil {
			return fail("text: %v", err)
		}
		if p.Description, err = parse("result_description", opt.GetResultDescription()); err != nil {
			return fail("result_description: %v", err)
		}
		t.Prompts = append(t.Prompts, p)
	}
	return nil
}

// listedBy returns the READ tool whose resource template list lists.
func (r *Registry) listedBy(list *Tool) *Tool {
	for _, t := range r.resources {
		if t.Resource.List == list {
			return t
		}
	}
	return nil
}

// jsonObject parses s, a JSON object ("" is none).
func jsonObject(s string) (map[string]any, error) {
	out := map[string]any{}
	if s == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return out, nil
}

// ItemFields are the scalar fields of an item by name, as a task's status
// message reads them: strings as they are, enums by value name, Timestamps
// in RFC 3339 (UTC, whole seconds), numbers and booleans as Go prints them.
func ItemFields(m protoreflect.Message) map[string]string {
	fields := m.Descriptor().Fields()
	out := make(map[string]string, fields.Len())
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.Kind() == protoreflect.EnumKind:
			if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
				out[string(fd.Name())] = string(ev.Name())
			}
		case fd.Message() != nil:
			if fd.Message().FullName() == "google.protobuf.Timestamp" {
				out[string(fd.Name())] = Time(m, fd).UTC().Format(time.RFC3339)
			}
		default:
			out[string(fd.Name())] = fmt.Sprint(v.Interface())
		}
	}
	return out
}

// Time reads the Timestamp field fd of m (the Unix epoch when unset).
func Time(m protoreflect.Message, fd protoreflect.FieldDescriptor) time.Time {
	ts := &timestamppb.Timestamp{}
	if m.Has(fd) {
		tm := m.Get(fd).Message()
		f := tm.Descriptor().Fields()
		ts.Seconds, ts.Nanos = tm.Get(f.ByName("seconds")).Int(), int32(tm.Get(f.ByName("nanos")).Int())
	}
	return ts.AsTime()
}
