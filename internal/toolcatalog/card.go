package toolcatalog

import (
	"fmt"
	"net/url"

	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// CardExtension is a READ tool whose answer for an agent is an extension of
// the agent's A2A card (the tool option's card_extension, checked against
// the contract).
type CardExtension struct {
	// Tool is called with the agent's id in AgentField.
	Tool        *Tool
	URI         string
	Description string
	AgentField  string
}

// CardExtensions returns the tools whose answers extend agents' cards,
// sorted by tool name.
func (r *Registry) CardExtensions() []*CardExtension { return r.cardExtensions }

// bindCardExtension checks t's card_extension option and adds it to the
// registry's.
func (r *Registry) bindCardExtension(t *Tool, opt *toolv1.CardExtension) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tool %q: card_extension: %s", t.Name, fmt.Sprintf(format, args...))
	}
	if t.Kind != toolv1.Kind_KIND_READ || t.Privileged {
		return fail("needs a READ tool that is not privileged: every card is public")
	}
	if u, err := url.Parse(opt.GetUri()); err != nil || !u.IsAbs() {
		return fail("uri %q is not an absolute URI", opt.GetUri())
	}
	if fd := t.Method.Input().Fields().ByName(protoreflect.Name(opt.GetAgentField())); fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return fail("agent_field %q is not a string field of %s", opt.GetAgentField(), t.Method.Input().FullName())
	}
	for _, c := range r.cardExtensions {
		if c.URI == opt.GetUri() {
			return fail("%q publishes extension %s already", c.Tool.Name, c.URI)
		}
	}
	r.cardExtensions = append(r.cardExtensions, &CardExtension{Tool: t, URI: opt.GetUri(), Description: opt.GetDescription(), AgentField: opt.GetAgentField()})
	return nil
}
