package mcpdoor

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// Completion suggests values for prompt arguments and resource template
// variables: a prompt argument's fixed values, or the ids of the resources
// the caller may see, listed live through the list tool as the caller
// (task ids, agent ids, memory keys, ask ids, schedule ids). Values start
// with what the user typed, ignoring case.

// Completion bounds: at most maxCompletions values (MCP's limit), from at
// most completionPages pages of a list tool.
const (
	maxCompletions  = 100
	completionPages = 4
)

// completer serves completion/complete: the values of a resource
// template's variable and of a prompt's argument.
type completer struct {
	resources []*resourceKind
	prompts   []*prompt
	res       *resourceFeature
	resolve   *resolver
}

func (cf *completer) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	rq, err := cf.resolve.of(ctx, req)
	if err != nil {
		return nil, err
	}
	p, r := rq.caller, rq.reach
	ref, arg := req.Params.Ref, req.Params.Argument
	var c completion
	switch ref.Type {
	case "ref/resource":
		var k *resourceKind
		for _, rk := range cf.resources {
			if rk.template != nil && rk.URITemplate() == ref.URI {
				k = rk
			}
		}
		if k == nil {
			return nil, invalidArgument("no resource template %q", ref.URI)
		}
		if !k.reached(r) {
			return nil, k.refuse(r, ref.URI)
		}
		if arg.Name != k.Variable {
			return nil, invalidArgument("resource template %s has no variable %q", ref.URI, arg.Name)
		}
		c = completion{kind: k}
	case "ref/prompt":
		var pr *prompt
		for _, x := range cf.prompts {
			if x.prompt.Name == ref.Name {
				pr = x
			}
		}
		if pr == nil {
			return nil, invalidArgument("no prompt %q", ref.Name)
		}
		if !pr.reached(r) {
			return nil, pr.refuse(r)
		}
		c = pr.complete[arg.Name] // none: nothing to suggest
	default:
		return nil, invalidArgument("unknown reference type %q", ref.Type)
	}
	values, more, err := cf.completeValues(ctx, p, r, req.Extra, c, arg.Value)
	if err != nil {
		return nil, err
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, HasMore: more}}, nil
}

// completeValues are c's values that start with prefix, and whether there
// may be more than those returned; a kind r does not reach has none.
func (cf *completer) completeValues(ctx context.Context, p *identity.Principal, r *reach, extra *mcp.RequestExtra, c completion, prefix string) ([]string, bool, error) {
	values := []string{} // never null on the wire
	matches := func(v string) bool { return strings.HasPrefix(strings.ToLower(v), strings.ToLower(prefix)) }
	for _, v := range c.values {
		if matches(v) {
			values = append(values, v)
		}
	}
	k := c.kind
	if k == nil {
		return values, false, nil
	}
	if !k.visible(p) || !k.reached(r) {
		// Nothing the caller may see, or its selection reaches.
		return values, false, nil
	}
	var args map[string]any
	if c.listArgs != nil {
		args = c.listArgs(p)
	}
	offset := int32(0)
	for range completionPages {
		items, next, env := cf.res.listItems(ctx, k, p, extra, args, offset, resourcesPageSize)
		if env != nil {
			switch env.DomainCode {
			case toolcall.CodePermissionDenied, toolcall.CodeUnauthenticated, toolcall.CodeNotSupported:
				// Nothing the caller may see.
				return values, false, nil
			}
			return nil, false, envelopeError(env)
		}
		for _, it := range items {
			if matches(it.id) {
				if len(values) == maxCompletions {
					return values, true, nil
				}
				values = append(values, it.id)
			}
		}
		if next < 0 {
			return values, false, nil
		}
		offset = next
	}
	return values, true, nil
}
