package identity

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Token scopes the edge understands. A caller may call a tool when its
// scopes cover the tool's kind, or when it holds an explicit grant for that
// tool; a privileged tool needs the explicit grant.
const (
	// ScopeRead allows READ tools.
	ScopeRead = toolcatalog.ScopeRead
	// ScopeWrite allows READ and WRITE tools.
	ScopeWrite = toolcatalog.ScopeWrite
	// ScopeAdmin allows ADMIN tools (still subject to the admin guardrails).
	ScopeAdmin = toolcatalog.ScopeAdmin
	// ScopeToolPrefix + a tool name is an explicit grant for that tool.
	ScopeToolPrefix = toolcatalog.ScopeToolPrefix
)

// DevSubject is the subject of the development principal.
const DevSubject = "local"

// Principal is an authenticated caller of the edge.
type Principal struct {
	// Subject identifies the caller (the token's sub; DevSubject in
	// development mode). Empty when the token names only an agent.
	Subject string
	// Agent is the agent the caller acts as; services key data by it.
	Agent string
	// Roles are carried to services in the mesh token (mesh.RoleOwner, ...).
	Roles []string
	// Scopes are the caller's token scopes plus those its grants add.
	Scopes []string

	// tokenScopes are the toolmesh scopes the caller's token itself
	// carries (not those its grants add), sorted: what a step-up challenge
	// asks the authorization server to keep.
	tokenScopes []string
	// grants are tools the caller holds an explicit grant for.
	grants map[string]bool
	// all marks the development principal, which holds every grant.
	all bool
	// key names the principal's permissions, for caching its tool view.
	key string
	// meshGrants are the principal's permissions as its mesh tokens carry
	// them (mesh.Caller.Grants), built once.
	meshGrants []string
}

// Dev is the local caller of development mode and stdio: the owner acting
// as agent, holding every grant.
func Dev(agent string) *Principal {
	p := &Principal{Subject: DevSubject, Agent: agent, Roles: []string{mesh.RoleOwner}, Scopes: []string{ScopeRead, ScopeWrite, ScopeAdmin}, all: true}
	p.key = "*"
	p.meshGrants = []string{mesh.GrantAll}
	return p
}

// newPrincipal builds a principal from verified token claims and the
// caller's entry in the grants file (nil when none).
func newPrincipal(subject, agent string, scopes, roles []string, g *Grant) *Principal {
	p := &Principal{Subject: subject, Agent: agent, grants: map[string]bool{}}
	scopeSet := map[string]bool{}
	addScope := func(s string) {
		if s == "" || scopeSet[s] {
			return
		}
		scopeSet[s] = true
		if tool, ok := strings.CutPrefix(s, ScopeToolPrefix); ok {
			p.grants[tool] = true
		}
	}
	for _, s := range scopes {
		addScope(s)
		if strings.HasPrefix(s, "toolmesh:") && !slices.Contains(p.tokenScopes, s) {
			p.tokenScopes = append(p.tokenScopes, s)
		}
	}
	sort.Strings(p.tokenScopes)
	roleSet := map[string]bool{}
	for _, r := range roles {
		roleSet[r] = true
	}
	if g != nil {
		for _, s := range g.Scopes {
			addScope(s)
		}
		for _, r := range g.Roles {
			roleSet[r] = true
		}
		for _, t := range g.Tools {
			p.grants[t] = true
		}
	}
	for s := range scopeSet {
		p.Scopes = append(p.Scopes, s)
	}
	sort.Strings(p.Scopes)
	for r := range roleSet {
		p.Roles = append(p.Roles, r)
	}
	sort.Strings(p.Roles)
	p.key = p.permissionKey()
	p.meshGrants = p.grantList()
	return p
}

// grantList is what p may call as mesh.Caller.Grants says it: its kind
// scopes, then its explicit tool grants, sorted, as many as a mesh token
// carries (mesh.MaxGrants, mesh.MaxGrantLen): work done later on its
// behalf may call fewer tools than it may, never more.
func (p *Principal) grantList() []string {
	var out []string
	for _, s := range []string{ScopeRead, ScopeWrite, ScopeAdmin} {
		if p.HasScope(s) {
			out = append(out, s)
		}
	}
	tools := make([]string, 0, len(p.grants))
	for t := range p.grants {
		if g := ScopeToolPrefix + t; len(g) <= mesh.MaxGrantLen {
			tools = append(tools, g)
		}
	}
	sort.Strings(tools)
	return append(out, tools[:min(len(tools), mesh.MaxGrants-len(out))]...)
}

// FromTokenInfo is the principal a verified token's info carries (nil when
// it carries none).
func FromTokenInfo(info *auth.TokenInfo) *Principal {
	if info == nil {
		return nil
	}
	p, _ := info.Extra[principalKey].(*Principal)
	return p
}

// HasScope reports whether the caller holds scope s.
func (p *Principal) HasScope(s string) bool { return slices.Contains(p.Scopes, s) }

// PermissionKey names the principal's permissions: two principals with the
// same key may call the same tools, so they may share a view of them.
func (p *Principal) PermissionKey() string { return p.key }

// permissionKey is the same for two principals that may call the same tools.
func (p *Principal) permissionKey() string {
	var b strings.Builder
	for _, s := range []string{ScopeRead, ScopeWrite, ScopeAdmin} {
		if p.HasScope(s) {
			b.WriteString(s)
		}
		b.WriteByte('|')
	}
	tools := make([]string, 0, len(p.grants))
	for t := range p.grants {
		tools = append(tools, t)
	}
	sort.Strings(tools)
	b.WriteString(strings.Join(tools, ","))
	return b.String()
}

// HasAnyAccess reports whether the principal may call any tool at all.
func (p *Principal) HasAnyAccess() bool {
	return p.all || len(p.grants) > 0 || p.HasScope(ScopeRead) || p.HasScope(ScopeWrite) || p.HasScope(ScopeAdmin)
}

// MayCall reports whether p may call t, and if not, what it lacks.
func (p *Principal) MayCall(t *toolcatalog.Tool) (bool, string) {
	if p.all || p.grants[t.Name] {
		return true, ""
	}
	if t.Privileged {
		return false, "it is privileged and needs an explicit grant (the grants file, or scope " + ScopeToolPrefix + t.Name + ")"
	}
	switch t.Kind {
	case toolv1.Kind_KIND_READ:
		if p.HasScope(ScopeRead) || p.HasScope(ScopeWrite) {
			return true, ""
		}
		return false, "it needs scope " + ScopeRead
	case toolv1.Kind_KIND_WRITE:
		if p.HasScope(ScopeWrite) {
			return true, ""
		}
		return false, "it needs scope " + ScopeWrite
	case toolv1.Kind_KIND_ADMIN:
		if p.HasScope(ScopeAdmin) {
			return true, ""
		}
		return false, "it needs scope " + ScopeAdmin
	}
	return false, "its kind is unknown"
}

// Caller is the identity the principal's service calls carry, with what
// it may call (for work a service does later on its behalf).
func (p *Principal) Caller() mesh.Caller {
	return mesh.Caller{Subject: p.Subject, Agent: p.Agent, Roles: p.Roles, Grants: p.meshGrants}
}

// LimitKey is the key of the principal's rate limit.
func (p *Principal) LimitKey() string {
	if p.Subject != "" {
		return "s:" + p.Subject
	}
	return "a:" + p.Agent
}

// scopeFor is the scope that lets a caller call t, or "" when no scope
// does: a privileged tool needs an explicit grant.
func scopeFor(t *toolcatalog.Tool) string {
	if t.Privileged {
		return ""
	}
	switch t.Kind {
	case toolv1.Kind_KIND_READ:
		return ScopeRead
	case toolv1.Kind_KIND_WRITE:
		return ScopeWrite
	case toolv1.Kind_KIND_ADMIN:
		return ScopeAdmin
	}
	return ""
}

// InsufficientScope is the step-up challenge (MCP authorization, "Scope
// Challenge Handling") for a request whose token lacks the scope it needs:
// 403 insufficient_scope naming the scopes to obtain. A tools/call of t
// names what t needs (t is nil for other requests and unknown tools); any
// request from a token with no toolmesh scope at all names toolmesh:read.
// Nil when the request may go on: privileged tools without a grant, unknown
// tools, and non-READ tools of a read-only edge are answered by the call
// itself, since no scope would help.
func InsufficientScope(p *Principal, t *toolcatalog.Tool, readOnly bool) *Failure {
	if t != nil {
		if allowed, _ := p.MayCall(t); allowed {
			return nil
		}
		if scope := scopeFor(t); scope != "" && !(readOnly && t.Kind != toolv1.Kind_KIND_READ) {
			return &Failure{Status: http.StatusForbidden, Code: "insufficient_scope",
				Reason: fmt.Sprintf("%s needs scope %s", t.Name, scope), Scope: p.stepUpScopes(scope)}
		}
	}
	if !p.HasAnyAccess() {
		return &Failure{Status: http.StatusForbidden, Code: "insufficient_scope", Reason: "the token grants no toolmesh scope", Scope: ScopeRead}
	}
	return nil
}

// stepUpScopes is the scope list a step-up challenge for a call that needs
// scope names: that scope first, then the toolmesh scopes the caller's
// token already holds that it does not cover. A client that replaces its
// token with one for exactly these scopes, rather than adding to what it
// has, so keeps everything it could do.
func (p *Principal) stepUpScopes(scope string) string {
	out := []string{scope}
	for _, s := range p.tokenScopes {
		if s == scope || (scope == ScopeWrite && s == ScopeRead) {
			continue
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}
