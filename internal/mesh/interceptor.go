package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/bearer"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
)

// NewServerInterceptor returns the interceptor that verifies the mesh token of
// every incoming request and puts the call it carries into the handler's
// context. A request with no token, or a token that fails verification, is
// Unauthenticated; a presented token that fails is logged once at the jwt
// boundary (the token itself never is).
func NewServerInterceptor(v *Verifier, log *slog.Logger) connect.Interceptor {
	return &serverInterceptor{v: v, log: log, now: time.Now}
}

type serverInterceptor struct {
	v   *Verifier
	log *slog.Logger
	now clock.Clock
}

// errNoToken tells a direct caller how to get a token.
var errNoToken = errors.New("missing mesh token: send \"Authorization: Bearer <token>\"; for local development, `toolmesh token --agent <id>` mints one")

func (i *serverInterceptor) authenticate(ctx context.Context, h http.Header) (context.Context, error) {
	tok, err := bearer.Token(h)
	if errors.Is(err, bearer.ErrAmbiguous) {
		// Connect answers InvalidArgument with HTTP 400.
		boundary.LogRejection(ctx, i.log, boundary.JWT, []boundary.Violation{{Field: "authorization", Rule: "mesh_token.single", Message: err.Error()}})
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid_request: %w", err))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errNoToken)
	}
	caller, err := i.v.Verify(tok, i.now())
	if err != nil {
		var te *TokenError
		field := "token"
		if errors.As(err, &te) {
			field = te.Field
		}
		boundary.LogRejection(ctx, i.log, boundary.JWT, []boundary.Violation{{Field: field, Rule: "mesh_token", Message: err.Error()}})
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid mesh token: %w", err))
	}
	key := strings.TrimSpace(h.Get(HeaderIdempotencyKey))
	if len(key) > maxIdempotencyKeyLen {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("header %s is longer than %d bytes", HeaderIdempotencyKey, maxIdempotencyKeyLen))
	}
	return WithCall(ctx, Call{Caller: caller, IdempotencyKey: key, token: tok}), nil
}

func (i *serverInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, err := i.authenticate(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *serverInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *serverInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.authenticate(ctx, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// NewClientInterceptor returns a client interceptor that mints a mesh token
// for the call in the request's context (WithCall) and sends it with the
// call's idempotency key. The token lives for ttl, and never past the
// context's deadline. A context without a call sends no token.
func NewClientInterceptor(s *Signer, ttl time.Duration) connect.Interceptor {
	return &clientInterceptor{s: s, ttl: ttl, now: time.Now}
}

type clientInterceptor struct {
	s   *Signer
	ttl time.Duration
	now clock.Clock
}

func (i *clientInterceptor) headers(ctx context.Context, h http.Header) error {
	c := FromContext(ctx)
	if c.Caller.Agent == "" {
		return nil
	}
	now := i.now()
	exp := now.Add(i.ttl)
	if d, ok := ctx.Deadline(); ok && d.Before(exp) {
		exp = d
	}
	tok, err := i.s.Mint(c.Caller, now, exp)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	SetHeaders(h, tok, c.IdempotencyKey)
	return nil
}

func (i *clientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			if err := i.headers(ctx, req.Header()); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (i *clientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if err := i.headers(ctx, conn.RequestHeader()); err != nil {
			return &failedConn{StreamingClientConn: conn, err: err}
		}
		return conn
	}
}

func (i *clientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// NewForwardingInterceptor returns a client interceptor for a service that
// calls another service as its own caller (a lookup "about itself"): it
// forwards the verified mesh token of the call being served, unchanged, so
// services never need the signing key. A context without one sends none.
func NewForwardingInterceptor() connect.Interceptor {
	return forwardingInterceptor{}
}

type forwardingInterceptor struct{}

func (forwardingInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if tok := FromContext(ctx).token; req.Spec().IsClient && tok != "" {
			req.Header().Set(HeaderAuthorization, "Bearer "+tok)
		}
		return next(ctx, req)
	}
}

func (forwardingInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if tok := FromContext(ctx).token; tok != "" {
			conn.RequestHeader().Set(HeaderAuthorization, "Bearer "+tok)
		}
		return conn
	}
}

func (forwardingInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// failedConn reports a token minting failure on the first send.
type failedConn struct {
	connect.StreamingClientConn
	err error
}

func (c *failedConn) Send(any) error { return c.err }
