// Package mesh carries what travels with every call inside the mesh: who is
// calling (the caller's identity and acting agent), how deep the chain of
// tool invocations already is, and the call's idempotency key.
//
// The edge sets it on outgoing requests; every service reads it back in an
// interceptor, so handlers find it in their context.
//
// This first version takes identity from plain request headers. It is a
// placeholder for the signed mesh token that replaces it: services must not be
// reachable by untrusted callers while it is in use.
package mesh

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// Header names used inside the mesh.
const (
	HeaderAgent          = "Toolmesh-Agent"
	HeaderSubject        = "Toolmesh-Subject"
	HeaderDepth          = "Toolmesh-Depth"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Caller is the identity a service acts for.
type Caller struct {
	// Subject is the authenticated principal (a user or a client).
	Subject string
	// Agent is the agent id the call acts as; domains key their data by it.
	Agent string
	// Depth is how many tool invocations led to this call (0 for a direct call).
	Depth int
}

// Call is the mesh metadata of one request.
type Call struct {
	Caller Caller
	// IdempotencyKey, when set, makes a side-effecting call safe to retry:
	// the service applies it once and returns the first result again.
	IdempotencyKey string
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
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("no calling agent: set the %s header", HeaderAgent))
	}
	return a, nil
}

// SetHeaders writes c into outgoing request headers.
func SetHeaders(h http.Header, c Call) {
	if c.Caller.Agent != "" {
		h.Set(HeaderAgent, c.Caller.Agent)
	}
	if c.Caller.Subject != "" {
		h.Set(HeaderSubject, c.Caller.Subject)
	}
	h.Set(HeaderDepth, strconv.Itoa(c.Caller.Depth))
	if c.IdempotencyKey != "" {
		h.Set(HeaderIdempotencyKey, c.IdempotencyKey)
	}
}

// maxHeaderLen bounds every mesh header value.
const maxHeaderLen = 256

// ParseHeaders reads the mesh metadata from incoming request headers.
func ParseHeaders(h http.Header) (Call, error) {
	var c Call
	c.Caller.Agent = strings.TrimSpace(h.Get(HeaderAgent))
	c.Caller.Subject = strings.TrimSpace(h.Get(HeaderSubject))
	c.IdempotencyKey = strings.TrimSpace(h.Get(HeaderIdempotencyKey))
	for name, v := range map[string]string{HeaderAgent: c.Caller.Agent, HeaderSubject: c.Caller.Subject, HeaderIdempotencyKey: c.IdempotencyKey} {
		if len(v) > maxHeaderLen {
			return Call{}, fmt.Errorf("header %s is longer than %d bytes", name, maxHeaderLen)
		}
	}
	if d := h.Get(HeaderDepth); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 1000 {
			return Call{}, fmt.Errorf("header %s must be a small non-negative integer", HeaderDepth)
		}
		c.Caller.Depth = n
	}
	if c.Caller.Subject == "" {
		c.Caller.Subject = c.Caller.Agent
	}
	return c, nil
}

// NewServerInterceptor returns the interceptor that reads the mesh metadata
// of every incoming request into its context. Malformed metadata is
// Unauthenticated.
func NewServerInterceptor() connect.Interceptor {
	return serverInterceptor{}
}

type serverInterceptor struct{}

func (serverInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		c, err := ParseHeaders(req.Header())
		if err != nil {
			return nil, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return next(WithCall(ctx, c), req)
	}
}

func (serverInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (serverInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c, err := ParseHeaders(conn.RequestHeader())
		if err != nil {
			return connect.NewError(connect.CodeUnauthenticated, err)
		}
		return next(WithCall(ctx, c), conn)
	}
}

// NewClientInterceptor returns the interceptor that sends the mesh metadata
// found in the request context (see WithCall) with every outgoing call.
func NewClientInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				SetHeaders(req.Header(), FromContext(ctx))
			}
			return next(ctx, req)
		}
	})
}
