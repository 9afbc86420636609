// Package mesh carries what travels with every call inside the mesh: who is
// calling (subject, acting agent, roles), how deep the chain of tool
// invocations already is, and the call's idempotency key.
//
// Identity travels as a short-lived mesh token: a JWT signed with the mesh's
// Ed25519 key (see Signer and Verifier) in the Authorization header. The edge
// (and, later, workers) hold the private key and mint a token per call;
// services hold only the public key and verify it in NewServerInterceptor, so
// a bare header never establishes identity. The idempotency key is a plain
// header: it is not identity, and services scope it by agent.
//
// Handlers read the verified call with FromContext, RequireAgent and
// RequireRole; tests and clients attach identity with WithCall and
// NewClientInterceptor.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
)

// Header names used inside the mesh.
const (
	// HeaderAuthorization carries "Bearer <mesh token>".
	HeaderAuthorization = "Authorization"
	// HeaderIdempotencyKey makes a side-effecting call safe to retry.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// RoleOwner is the role of the human owner of the platform; owner-only RPCs
// require it.
const RoleOwner = "owner"

// RoleAdmin is the role of an operator who oversees agents without being the
// owner: it reads what the owner reads about every agent (wallets, for one)
// but answers no asks and approves nothing.
const RoleAdmin = "admin"

// RoleService is the role of the mesh's own components (the edge recording
// audit, workers acting for themselves). Their agent names a component, not a
// registered agent, so the agent registration check lets them through.
const RoleService = "service"

// MaxDepth bounds the invocation depth a token may carry.
const MaxDepth = 1000

// Caller is the identity a service acts for.
type Caller struct {
	// Subject is the authenticated principal (a user or a client).
	Subject string
	// Agent is the agent id the call acts as; domains key their data by it.
	Agent string
	// Roles are the caller's roles (RoleOwner, ...).
	Roles []string
	// Depth is how many tool invocations led to this call (0 for a direct call).
	Depth int
	// Grants are what the caller may call, as the edge's scopes say it:
	// "toolmesh:read", "toolmesh:write", "toolmesh:admin", and
	// "toolmesh:tool:<name>" for each explicit grant of a tool; GrantAll
	// for the development owner, who holds every grant. Services act on
	// the caller's roles, not on these; they travel so that work a service
	// does later for the caller (a workflow run's tool calls) can be held
	// to what the caller itself may call (toolcatalog.Tool.PermittedBy).
	Grants []string
}

// GrantAll is the grant of a caller that may call every tool.
const GrantAll = "*"

// HasRole reports whether the caller holds role.
func (c Caller) HasRole(role string) bool { return slices.Contains(c.Roles, role) }

// Oversees reports whether the caller may read every agent's records, not
// only its own: the owner and admins may.
func (c Caller) Oversees() bool { return c.HasRole(RoleOwner) || c.HasRole(RoleAdmin) }

// Call is the mesh metadata of one request.
type Call struct {
	Caller Caller
	// IdempotencyKey, when set, makes a side-effecting call safe to retry:
	// the service applies it once and returns the first result again.
	IdempotencyKey string

	// token is the verified mesh token the call arrived with, for
	// NewForwardingInterceptor.
	token string
}

type ctxKey struct{}

// WithCall returns ctx carrying c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the call metadata in ctx (the zero Call if none).
func FromContext(ctx context.Context) Call {
	c, _ := ctx.Value(ctxKey{}).(Call)
	return c
}

// RequireAgent returns the calling agent, or an Unauthenticated error when the
// call carries none.
func RequireAgent(ctx context.Context) (string, error) {
	a := FromContext(ctx).Caller.Agent
	if a == "" {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	return a, nil
}

// ListedAgent is whose items a list call reads: the agent the request
// names (requested, "" for none), checked against the caller. The owner
// lists any agent's, or every agent's when none is named (""); any other
// caller only its own, whatever it names (another agent's is refused by
// name: PermissionDenied). what names the items in that refusal
// ("asks", "runs").
func ListedAgent(ctx context.Context, requested, what string) (string, error) {
	agent, err := RequireAgent(ctx)
	if err != nil {
		return "", err
	}
	if FromContext(ctx).Caller.HasRole(RoleOwner) {
		return requested, nil
	}
	if requested != "" && requested != agent {
		return "", connect.NewError(connect.CodePermissionDenied, fmt.Errorf("an agent lists only its own %s; omit agent_id", what))
	}
	return agent, nil
}

// RequireRole returns the caller when it holds role, else PermissionDenied
// (or Unauthenticated when the call carries no identity).
func RequireRole(ctx context.Context, role string) (Caller, error) {
	c := FromContext(ctx).Caller
	if c.Agent == "" {
		return Caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("no calling agent: the call carries no verified mesh identity"))
	}
	if !c.HasRole(role) {
		return Caller{}, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("this call needs the %s role", role))
	}
	return c, nil
}

// SetHeaders writes a mesh token and an idempotency key into outgoing
// request headers.
func SetHeaders(h http.Header, token, idempotencyKey string) {
	h.Set(HeaderAuthorization, "Bearer "+token)
	if idempotencyKey != "" {
		h.Set(HeaderIdempotencyKey, idempotencyKey)
	}
}

// maxIdempotencyKeyLen bounds the idempotency key header.
const maxIdempotencyKeyLen = 256
