package toolcatalog

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// OnBehalfOf is the READ tool that reads the items a tool call can be made
// on behalf of (the tool option's on_behalf_of, checked against the
// contract): a message an agent received, whose depth the call then runs
// at.
type OnBehalfOf struct {
	// Tool reads an item, taking its id in IDField.
	Tool    *Tool
	Noun    string
	IDField string
	// IDExample is an id, for the error refusing a malformed one.
	IDExample string
	// Item is the response field holding the item; Recipient and Depth
	// are the item's fields naming the agent it was for and its depth.
	Item, Recipient, Depth protoreflect.FieldDescriptor
}

// OnBehalfOf returns the tool that reads what calls can be made on behalf
// of; nil when the registry has none.
func (r *Registry) OnBehalfOf() *OnBehalfOf { return r.onBehalfOf }

// bindOnBehalfOf checks t's on_behalf_of option and makes it the
// registry's.
func (r *Registry) bindOnBehalfOf(t *Tool, opt *toolv1.OnBehalfOf) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tool %q: on_behalf_of: %s", t.Name, fmt.Sprintf(format, args...))
	}
	if r.onBehalfOf != nil {
		return fail("%q reads the items calls are made on behalf of already; one tool may", r.onBehalfOf.Tool.Name)
	}
	if t.Kind != toolv1.Kind_KIND_READ || opt.GetNoun() == "" || opt.GetIdExample() == "" {
		return fail("needs a READ tool, a noun and an id example")
	}
	b := &OnBehalfOf{Tool: t, Noun: opt.GetNoun(), IDField: opt.GetIdField(), IDExample: opt.GetIdExample()}
	if fd := t.Method.Input().Fields().ByName(protoreflect.Name(b.IDField)); fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return fail("id_field %q is not a string field of %s", b.IDField, t.Method.Input().FullName())
	}
	out := t.Method.Output()
	if b.Item = out.Fields().ByName(protoreflect.Name(opt.GetItemField())); b.Item == nil || b.Item.Message() == nil || b.Item.IsList() || b.Item.IsMap() {
		return fail("item_field %q is not a message field of %s", opt.GetItemField(), out.FullName())
	}
	item := b.Item.Message()
	if b.Recipient = item.Fields().ByName(protoreflect.Name(opt.GetRecipientField())); b.Recipient == nil || b.Recipient.Kind() != protoreflect.StringKind || b.Recipient.IsList() {
		return fail("recipient_field %q is not a string field of %s", opt.GetRecipientField(), item.FullName())
	}
	if b.Depth = item.Fields().ByName(protoreflect.Name(opt.GetDepthField())); b.Depth == nil || b.Depth.Kind() != protoreflect.Int32Kind || b.Depth.IsList() {
		return fail("depth_field %q is not an int32 field of %s", opt.GetDepthField(), item.FullName())
	}
	r.onBehalfOf = b
	return nil
}
