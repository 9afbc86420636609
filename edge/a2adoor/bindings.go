package a2adoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/boundary"
)

// Each binding has its route: it negotiates the A2A version, authenticates
// the caller, parses the request at the binding's boundary (boundary.go)
// and hands it to the SDK's transport with the call (who, for which agent,
// through which binding) in its context. What is refused before the SDK
// sees it is answered in the binding's own shape: a JSON-RPC error, an
// AIP-193 error body, a gRPC status.

// The boundaries of the three bindings.
const (
	bindingJSONRPC = boundary.A2AJSONRPC
	bindingREST    = boundary.A2AREST
	bindingGRPC    = boundary.A2AGRPC
)

// grpcPrefix is the path of the gRPC binding's service.
const grpcPrefix = "/lf.a2a.v1.A2AService/"

// call is one A2A request as the door's handler sees it.
type call struct {
	principal *identity.Principal
	// agent is the agent the URL names; over gRPC none: the request's
	// tenant names it.
	agent string
	// served says agent is known to be served (the route asked).
	served bool
	// binding is the boundary label of the binding it came through.
	binding string
	// version is the A2A version it speaks.
	version string
	// list holds the ListTasks query parameters the REST transport of
	// a2a-go v2.3.1 drops (historyLength, statusTimestampAfter).
	list *a2a.ListTasksRequest
	// req is the HTTP request of a gRPC call, authenticated in the gRPC
	// interceptor.
	req *http.Request
	// tenant is the tenant a gRPC request names: a2a-go v2.3.1's gRPC
	// handler drops it from CancelTask and SubscribeToTask, so the
	// interceptor keeps it from the wire's message.
	tenant string
	// rejected is set once the handler refused the request at the
	// boundary (and logged it).
	rejected bool
}

type callKey struct{}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return &call{binding: bindingJSONRPC}
	}
	return c
}

// requestedVersion is the A2A version the request asks for (A2A-Version,
// as a header or a query parameter); empty is 0.3 (A2A 1.0 §3.6.2).
func requestedVersion(r *http.Request) string {
	v := r.Header.Get(a2a.SvcParamVersion)
	if v == "" {
		v = r.URL.Query().Get(a2a.SvcParamVersion)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return a2alink.Version03
	}
	if v == "1" {
		return a2alink.Version10
	}
	return v
}

// readBody reads the request body, at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, false
	}
	return body, true
}

// jsonContent reports whether the request's body is JSON (application/json,
// or A2A's application/a2a+json).
func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || mt == "application/a2a+json")
}

// authenticate returns the caller: with authentication on, a bearer JWT
// for the A2A resource granting toolmesh:write; in development mode the
// local caller. A failure says what to answer.
func (g *Door) authenticate(r *http.Request) (*identity.Principal, *identity.Failure) {
	if g.auth == nil {
		return g.dev, nil
	}
	p, _, fail := g.auth.Authenticate(r)
	if fail == nil && !p.HasScope(identity.ScopeWrite) {
		fail = &identity.Failure{Status: http.StatusForbidden, Code: "insufficient_scope", Reason: "A2A calls need scope " + identity.ScopeWrite, Scope: identity.ScopeWrite}
	}
	if fail != nil {
		return nil, fail
	}
	return p, nil
}

// serveJSONRPC serves the JSON-RPC binding of an agent, in the version
// the request asks for: 1.0, or 0.3 when it names none.
func (g *Door) serveJSONRPC(w http.ResponseWriter, r *http.Request) {
	agent := r.PathValue("agent")
	version := requestedVersion(r)
	if !jsonContent(r) {
		httpguard.WriteRPCError(w, http.StatusUnsupportedMediaType, nil, httpguard.CodeInvalidRequest, "Content-Type must be application/json", nil)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		httpguard.WriteRPCError(w, http.StatusRequestEntityTooLarge, nil, httpguard.CodeInvalidRequest, fmt.Sprintf("the request body is larger than %d bytes", maxBody), nil)
		return
	}
	p, fail := g.authenticate(r)
	if fail != nil {
		w.Header().Set("WWW-Authenticate", g.auth.Challenge(fail))
		code := httpguard.CodeUnauthorized
		if version == a2alink.Version10 {
			code = map[bool]int{true: codeUnauthenticated, false: codeUnauthorized}[fail.Status == http.StatusUnauthorized]
		}
		httpguard.WriteRPCError(w, fail.Status, nil, code, fail.Text(), nil)
		return
	}
	var transport http.Handler
	switch version {
	case a2alink.Version10:
		transport = g.jsonrpc10
	case a2alink.Version03:
		transport = g.jsonrpc03
	default:
		id, _, _ := httpguard.Peek(body)
		httpguard.WriteRPCError(w, http.StatusOK, plainID(id), codeVersionNotSupported,
			fmt.Sprintf("Version not supported: this agent speaks A2A %s and %s over JSON-RPC, not %q", a2alink.Version10, a2alink.Version03, httpguard.Truncate(version, 16)), nil)
		return
	}
	c := &call{principal: p, agent: agent, binding: bindingJSONRPC, version: version}
	if f := g.parseJSONRPC(r.Context(), body, version); f != nil {
		httpguard.WriteRPCError(w, http.StatusOK, f.id, f.code, f.msg, nil)
		return
	}
	if _, err := g.activeAgent(r.Context(), agent); err != nil {
		id, _, _ := httpguard.Peek(body)
		if agentMissing(err) {
			httpguard.WriteRPCError(w, http.StatusNotFound, plainID(id), httpguard.CodeInvalidRequest, fmt.Sprintf("no agent %q is served here", httpguard.Truncate(agent, 64)), nil)
			return
		}
		g.log.ErrorContext(r.Context(), "a2a.directory_failed", "agent", httpguard.Truncate(agent, 64), "error", err)
		httpguard.WriteRPCError(w, http.StatusServiceUnavailable, plainID(id), httpguard.CodeInternalError, errUnavailable.Message, nil)
		return
	}
	c.served = true
	r = r.WithContext(withCall(r.Context(), c))
	r.Body = io.NopCloser(bytes.NewReader(body))
	transport.ServeHTTP(w, r)
}

func plainID(id json.RawMessage) json.RawMessage {
	if httpguard.PlainID(id) {
		return id
	}
	return nil
}

// serveREST serves the HTTP+JSON binding of an agent (A2A 1.0; a request
// naming no version is served as 1.0, the only version here).
func (g *Door) serveREST(w http.ResponseWriter, r *http.Request) {
	agent := r.PathValue("agent")
	if v := requestedVersion(r); v != a2alink.Version10 && r.Header.Get(a2a.SvcParamVersion)+r.URL.Query().Get(a2a.SvcParamVersion) != "" {
		writeRESTError(w, a2a.NewError(a2a.ErrVersionNotSupported,
			fmt.Sprintf("Version not supported: this agent speaks A2A %s over HTTP+JSON, not %q", a2alink.Version10, httpguard.Truncate(v, 16))))
		return
	}
	p, fail := g.authenticate(r)
	if fail != nil {
		w.Header().Set("WWW-Authenticate", g.auth.Challenge(fail))
		sentinel := map[bool]error{true: a2a.ErrUnauthenticated, false: a2a.ErrUnauthorized}[fail.Status == http.StatusUnauthorized]
		writeRESTError(w, a2a.NewError(sentinel, fail.Text()))
		return
	}
	c := &call{principal: p, agent: agent, binding: bindingREST, version: a2alink.Version10}
	path := strings.TrimPrefix(r.URL.Path, a2aPathPrefix+agent+"/rest")
	if r.Body != nil && r.Method == http.MethodPost {
		if r.ContentLength != 0 && !jsonContent(r) {
			writeRESTError(w, a2a.NewError(a2a.ErrUnsupportedContentType, "Content-Type must be application/json or application/a2a+json"))
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			writeRESTError(w, a2a.NewError(a2a.ErrInvalidRequest, fmt.Sprintf("the request body is larger than %d bytes", maxBody)))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := g.parseREST(r.Context(), path, body); err != nil {
			writeRESTError(w, err)
			return
		}
	}
	if r.Method == http.MethodGet && path == "/tasks" {
		list, err := g.parseListQuery(r.Context(), r)
		if err != nil {
			writeRESTError(w, err)
			return
		}
		c.list = list
	}
	if _, err := g.activeAgent(r.Context(), agent); err != nil {
		if agentMissing(err) {
			writeRESTError(w, a2a.NewError(a2a.ErrTaskNotFound, fmt.Sprintf("no agent %q is served here", httpguard.Truncate(agent, 64))))
			return
		}
		g.log.ErrorContext(r.Context(), "a2a.directory_failed", "agent", httpguard.Truncate(agent, 64), "error", err)
		writeRESTError(w, failed(err))
		return
	}
	c.served = true
	r2 := r.WithContext(withCall(r.Context(), c))
	u := *r.URL
	u.Path, u.RawPath = path, ""
	r2.URL = &u
	g.rest.ServeHTTP(w, r2)
}

// restStatus is the HTTP status and google.rpc code name of an A2A error
// over HTTP+JSON (A2A 1.0 §11, as a2a-go answers them).
func restStatus(err error) (int, string) {
	for _, m := range []struct {
		err    error
		status int
		name   string
	}{
		{a2a.ErrTaskNotFound, http.StatusNotFound, "NOT_FOUND"},
		{a2a.ErrUnauthenticated, http.StatusUnauthorized, "UNAUTHENTICATED"},
		{a2a.ErrUnauthorized, http.StatusForbidden, "PERMISSION_DENIED"},
		{a2a.ErrVersionNotSupported, http.StatusBadRequest, "FAILED_PRECONDITION"},
		{a2a.ErrUnsupportedContentType, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{a2a.ErrInvalidParams, http.StatusBadRequest, "INVALID_ARGUMENT"},
		{a2a.ErrInvalidRequest, http.StatusBadRequest, "INVALID_ARGUMENT"},
	} {
		if errorIs(err, m.err) {
			return m.status, m.name
		}
	}
	return http.StatusInternalServerError, "INTERNAL"
}

// writeRESTError answers err as an HTTP+JSON error: the AIP-193 body
// a2a-go's REST transport writes and reads.
func writeRESTError(w http.ResponseWriter, err error) {
	st, name := restStatus(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": st, "status": name, "message": err.Error(),
		"details": []any{map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": a2a.ErrorReason(err), "domain": a2a.ProtocolDomain}},
	}})
}

// serveGRPC serves the gRPC binding (A2A 1.0, service lf.a2a.v1.A2AService):
// the gRPC server authenticates each call in its interceptor.
func (g *Door) serveGRPC(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		http.Error(w, "gRPC needs HTTP/2 and Content-Type application/grpc", http.StatusUnsupportedMediaType)
		return
	}
	c := &call{binding: bindingGRPC, version: a2alink.Version10, req: r}
	g.grpc.ServeHTTP(w, r.WithContext(withCall(r.Context(), c)))
}

// grpcCall authenticates a gRPC call and checks its version.
func (g *Door) grpcCall(ctx context.Context) error {
	c := callOf(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get(strings.ToLower(a2a.SvcParamVersion)); len(vs) > 0 && vs[0] != "" && vs[0] != a2alink.Version10 && vs[0] != "1" {
		return status.Errorf(codes.Unimplemented, "Version not supported: this agent speaks A2A %s over gRPC, not %q", a2alink.Version10, httpguard.Truncate(vs[0], 16))
	}
	if c.req == nil {
		return status.Error(codes.Internal, "the call came by no route of the door")
	}
	p, fail := g.authenticate(c.req)
	if fail != nil {
		code := map[bool]codes.Code{true: codes.Unauthenticated, false: codes.PermissionDenied}[fail.Status == http.StatusUnauthorized]
		if g.auth != nil {
			_ = grpc.SetHeader(ctx, metadata.Pairs("www-authenticate", g.auth.Challenge(fail)))
		}
		return status.Error(code, fail.Text())
	}
	c.principal = p
	return nil
}

func (g *Door) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := g.grpcCall(ctx); err != nil {
		return nil, err
	}
	keepTenant(ctx, req)
	res, err := next(ctx, req)
	g.grpcRejected(ctx, info.FullMethod, err)
	return res, err
}

func (g *Door) grpcStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := g.grpcCall(ss.Context()); err != nil {
		return err
	}
	err := next(srv, tenantKeeper{ss})
	g.grpcRejected(ss.Context(), info.FullMethod, err)
	return err
}

// keepTenant records the tenant a gRPC request message names.
func keepTenant(ctx context.Context, msg any) {
	if t, ok := msg.(interface{ GetTenant() string }); ok {
		callOf(ctx).tenant = t.GetTenant()
	}
}

// tenantKeeper records the tenant of a streaming call's request.
type tenantKeeper struct{ grpc.ServerStream }

func (s tenantKeeper) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		keepTenant(s.Context(), m)
	}
	return err
}

// grpcRejected logs the rejection of a request the SDK could not read
// (its conversion from the wire's messages) at the a2a.grpc boundary; the
// door's handler logs its own.
func (g *Door) grpcRejected(ctx context.Context, method string, err error) {
	if status.Code(err) != codes.InvalidArgument || callOf(ctx).rejected {
		return
	}
	boundary.LogRejection(ctx, g.log, bindingGRPC, []boundary.Violation{{Rule: "request", Message: method + ": " + status.Convert(err).Message()}})
}

// Codes of the JSON-RPC binding that httpguard does not name.
const (
	codeUnauthenticated     = -31401
	codeUnauthorized        = -31403
	codeVersionNotSupported = -32009
)
