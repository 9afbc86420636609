// Package meshclient builds the clients a process of the mesh calls the
// domain services with — the edge, the workers, and a service that calls
// another — all the same way: one HTTP transport, a deadline on every
// call, the caller's mesh token, and a span of the caller's trace.
//
//	c := meshclient.Config{Signer: signer, Timeout: 15 * time.Second}
//	owner := meshclient.New(c, ownerv1connect.NewOwnerServiceClient, ownerURL)
//	ctx = mesh.WithCall(ctx, mesh.Call{Caller: caller})
//	res, err := owner.GetAsk(ctx, req)
package meshclient

import (
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Config says how a process calls the mesh's services.
type Config struct {
	// HTTP reaches the services (default HTTP()).
	HTTP connect.HTTPClient
	// Signer mints the mesh token of each call, for the caller in its
	// context (mesh.WithCall). Nil forwards instead the verified token of
	// the call being served: a service that asks another about its own
	// caller needs no signing key.
	Signer *mesh.Signer
	// Timeout is the deadline of each call whose context has none sooner,
	// and the longest a minted token lives. Zero: the context's deadline
	// only.
	Timeout time.Duration
	// Telemetry makes each call a span of the caller's trace.
	Telemetry telemetry.Providers
	// Interceptors are applied after the mesh's own.
	Interceptors []connect.Interceptor
}

// New builds the generated client of one service (newClient is its
// New<Service>Client) at baseURL.
func New[T any](c Config, newClient func(connect.HTTPClient, string, ...connect.ClientOption) T, baseURL string) T {
	return newClient(c.httpClient(), strings.TrimRight(baseURL, "/"), c.Options()...)
}

// Options are the client options every mesh client has, for a client built
// by hand (a tool binding's).
func (c Config) Options() []connect.ClientOption {
	icpt := []connect.Interceptor{deadline(c.Timeout)}
	if c.Signer != nil {
		ttl := c.Timeout
		if ttl <= 0 {
			ttl = time.Minute
		}
		icpt = append(icpt, mesh.NewClientInterceptor(c.Signer, ttl))
	} else {
		icpt = append(icpt, mesh.NewForwardingInterceptor())
	}
	return []connect.ClientOption{
		c.Telemetry.ClientOption(),
		connect.WithInterceptors(append(icpt, c.Interceptors...)...),
		// Inside the mesh, compressing small messages costs more CPU than
		// it saves bytes.
		connect.WithAcceptCompression("gzip", nil, nil),
	}
}

func (c Config) httpClient() connect.HTTPClient {
	if hc, ok := c.HTTP.(*http.Client); c.HTTP == nil || ok && hc == nil {
		return ForServices(HTTP())
	}
	return ForServices(c.HTTP)
}

// HTTP is the client every process of the mesh reaches the services with:
// HTTP/1.1 over kept-alive connections, one per call in flight, each call
// carried on its caller's goroutine (Transport). The services also speak
// h2c, and a client of the mesh could multiplex its calls over one HTTP/2
// connection, but a Go HTTP/2 server hands every request between
// goroutines several times: measured under make bench-mesh, a point read
// cost the tasks service 162 µs of CPU over h2c and 103 µs over HTTP/1.1,
// and the edge 221 and 182 µs. So the edge, the workers and a service
// calling another all speak HTTP/1.1.
//
// Connections are not capped (a long-running call holds one for its wait),
// and up to 256 per service are kept: closing those beyond the idle limit
// after every call, under many callers, costs both sides a connection per
// call. Each connection holds a read buffer for its lifetime, and under
// many callers there is one connection per call in flight; a service
// call's answer is a few hundred bytes, so 1 KiB does instead of
// net/http's 4 KiB.
func HTTP() *http.Client {
	return &http.Client{Transport: NewTransport(nil)}
}

// deadline bounds each call by d, unless its context ends sooner.
func deadline(d time.Duration) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if dl, ok := ctx.Deadline(); req.Spec().IsClient && (!ok || time.Until(dl) > d) {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			return next(ctx, req)
		}
	})
}
