package toolcatalog

import (
	"fmt"
	"net/url"

	"github.com/yosida95/uritemplate/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Resource is a READ tool served as an MCP resource (the tool option's
// resource): reading a matching URI calls the tool with the template's
// variable as its one argument.
type Resource struct {
	// Template is the RFC 6570 URI template.
	Template *uritemplate.Template
	// Title says what one resource is, for people ("Work task").
	Title string
	// Variable is the template's variable, a string field of the tool's
	// request; "" for a fixed resource.
	Variable string
	// List is the READ list tool whose items are the resources; nil for a
	// fixed resource.
	List *Tool
	// Items is the repeated message field of List's response holding them.
	Items protoreflect.FieldDescriptor
	// ItemID is the item's field holding the variable's value.
	ItemID protoreflect.FieldDescriptor
	// ItemTitle is the item's field naming it for people (nil: the id).
	ItemTitle protoreflect.FieldDescriptor
}

// URITemplate is the template as written.
func (r *Resource) URITemplate() string { return r.Template.Raw() }

// URI is the resource's URI for a value of the variable (the fixed URI when
// there is no variable).
func (r *Resource) URI(value string) string {
	if r.Variable == "" {
		return r.Template.Raw()
	}
	s, _ := r.Template.Expand(uritemplate.Values{r.Variable: uritemplate.String(value)})
	return s
}

// Match reports whether uri names a resource of this template and returns
// the variable's value.
func (r *Resource) Match(uri string) (string, bool) {
	if r.Variable == "" {
		return "", uri == r.Template.Raw()
	}
	m := r.Template.Match(uri)
	if m == nil {
		return "", false
	}
	v := m.Get(r.Variable)
	if !v.Valid() || v.String() == "" {
		return "", false
	}
	return v.String(), true
}

// bindResource checks t's resource option against the registry and sets
// t.Resource.
func (r *Registry) bindResource(t *Tool, opt *toolv1.Resource) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tool %q: resource: %s", t.Name, fmt.Sprintf(format, args...))
	}
	if t.Kind != toolv1.Kind_KIND_READ {
		return fail("only a READ tool can be a resource")
	}
	tmpl, err := uritemplate.New(opt.GetUriTemplate())
	if err != nil {
		return fail("uri_template %q: %v", opt.GetUriTemplate(), err)
	}
	if u, err := url.Parse(opt.GetUriTemplate()); err != nil || u.Scheme == "" {
		return fail("uri_template %q is not an absolute URI", opt.GetUriTemplate())
	}
	res := &Resource{Template: tmpl, Title: opt.GetTitle()}
	if res.Title == "" {
		res.Title = t.Title
	}
	in := t.Method.Input()
	switch names := tmpl.Varnames(); len(names) {
	case 0:
		if opt.GetListTool() != "" {
			return fail("a fixed resource (no variable in %q) has no list tool", opt.GetUriTemplate())
		}
	case 1:
		res.Variable = names[0]
		if fd := in.Fields().ByName(protoreflect.Name(res.Variable)); fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			return fail("variable {%s} is not a string field of %s", res.Variable, in.FullName())
		}
	default:
		return fail("uri_template %q has %d variables; at most one is supported", opt.GetUriTemplate(), len(names))
	}
	for i := 0; i < in.Fields().Len(); i++ {
		if fd := in.Fields().Get(i); string(fd.Name()) != res.Variable && required(fd) {
			return fail("%s requires %s, which the URI does not carry", in.FullName(), fd.Name())
		}
	}
	if res.Variable == "" {
		t.Resource = res
		return nil
	}
	list, ok := r.byName[opt.GetListTool()]
	if !ok || list.Kind != toolv1.Kind_KIND_READ || list.PageField == nil {
		return fail("list_tool %q is not a READ list tool of the same registry", opt.GetListTool())
	}
	res.List = list
	out := list.Method.Output()
	res.Items = out.Fields().ByName(protoreflect.Name(opt.GetListItems()))
	if res.Items == nil || !res.Items.IsList() || res.Items.Message() == nil {
		return fail("list_items %q is not a repeated message field of %s", opt.GetListItems(), out.FullName())
	}
	item := res.Items.Message()
	stringField := func(name string) protoreflect.FieldDescriptor {
		fd := item.Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			return nil
		}
		return fd
	}
	if res.ItemID = stringField(opt.GetItemId()); res.ItemID == nil {
		return fail("item_id %q is not a string field of %s", opt.GetItemId(), item.FullName())
	}
	if opt.GetItemTitle() != "" {
		if res.ItemTitle = stringField(opt.GetItemTitle()); res.ItemTitle == nil {
			return fail("item_title %q is not a string field of %s", opt.GetItemTitle(), item.FullName())
		}
	}
	t.Resource = res
	return nil
}
