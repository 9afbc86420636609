package toolcatalog

import (
	"slices"

	"github.com/toolmesh/toolmesh/internal/mesh"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The scopes that let a caller call tools: a tool kind's scope, or an
// explicit grant of one tool (ScopeToolPrefix + its name). A privileged
// tool needs the explicit grant. The edge reads them from callers' tokens
// and its grants file, and passes what a caller holds on in the mesh token
// (mesh.Caller.Grants).
const (
	// ScopeRead allows READ tools.
	ScopeRead = "toolmesh:read"
	// ScopeWrite allows READ and WRITE tools.
	ScopeWrite = "toolmesh:write"
	// ScopeAdmin allows ADMIN tools (still subject to the admin guardrails).
	ScopeAdmin = "toolmesh:admin"
	// ScopeToolPrefix + a tool name is an explicit grant for that tool.
	ScopeToolPrefix = "toolmesh:tool:"
)

// PermittedBy reports whether a caller holding grants (mesh.Caller.Grants)
// may call t, and if not, what it lacks. It is the rule the edge applies
// to its callers, for work done later on a caller's behalf: a workflow
// run's tool calls may call what the agent that started the run could
// call, never more.
func (t *Tool) PermittedBy(grants []string) (bool, string) {
	if slices.Contains(grants, mesh.GrantAll) || slices.Contains(grants, ScopeToolPrefix+t.Name) {
		return true, ""
	}
	if t.Privileged {
		return false, "it is privileged and needs an explicit grant (the grants file, or scope " + ScopeToolPrefix + t.Name + ")"
	}
	switch t.Kind {
	case toolv1.Kind_KIND_READ:
		if slices.Contains(grants, ScopeRead) || slices.Contains(grants, ScopeWrite) {
			return true, ""
		}
		return false, "it needs scope " + ScopeRead
	case toolv1.Kind_KIND_WRITE:
		if slices.Contains(grants, ScopeWrite) {
			return true, ""
		}
		return false, "it needs scope " + ScopeWrite
	case toolv1.Kind_KIND_ADMIN:
		if slices.Contains(grants, ScopeAdmin) {
			return true, ""
		}
		return false, "it needs scope " + ScopeAdmin
	}
	return false, "its kind is unknown"
}
