// Package servertest starts mesh services for tests: a real listener on
// 127.0.0.1, the production server (interceptors, health, reflection, REST
// gateway) and clients that speak Connect or gRPC to it. Calls carry the
// caller identity put in their context with mesh.WithCall, as a mesh token
// signed with a fixed test key (MeshSigner) that every test server accepts.
package servertest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/sqldb"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Server is a running test server.
type Server struct {
	// URL is the base URL, "http://127.0.0.1:<port>".
	URL string
	// Addr is host:port.
	Addr string

	stop   func()
	client *http.Client
}

// Options tune Start.
type Options struct {
	// Log receives the server's logs (discarded when nil).
	Log *slog.Logger
	// DrainDelay is passed to the server.
	DrainDelay time.Duration
	// Interceptors are passed to the server (they run after the mesh and
	// validation interceptors).
	Interceptors []connect.Interceptor
	// Telemetry and Metrics are passed to the server.
	Telemetry telemetry.Providers
	Metrics   http.Handler
}

// Start serves services until the test ends.
func Start(tb testing.TB, services ...server.Service) *Server {
	tb.Helper()
	return StartWith(tb, Options{}, services...)
}

// StartWith is Start with options.
func StartWith(tb testing.TB, opts Options, services ...server.Service) *Server {
	tb.Helper()
	log := opts.Log
	if log == nil {
		log = logging.Discard()
	}
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, lis, log, server.Options{Busy: sqldb.IsBusy, DrainDelay: opts.DrainDelay, ShutdownTimeout: 5 * time.Second, Interceptors: opts.Interceptors, Mesh: MeshSigner().Verifier(),
		Telemetry: opts.Telemetry, Metrics: opts.Metrics}, services...)
	if err != nil {
		cancel()
		lis.Close()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	s := &Server{URL: "http://" + lis.Addr().String(), Addr: lis.Addr().String(), client: HTTPClient()}
	var stopped bool
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		// Idle client connections would hold the HTTP/2 shutdown for its
		// GOAWAY grace period.
		s.client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("server stopped with error: %v", err)
		}
	}
	tb.Cleanup(s.stop)
	return s
}

// Client returns an h2c HTTP client for this server; its connections are
// closed before the server stops.
func (s *Server) Client() *http.Client { return s.client }

// REST calls the server's REST gateway with the Authorization header
// bearer (Bearer, BearerFor): method on path with the JSON body ("" for
// none). It returns the status code and the response body.
func (s *Server) REST(tb testing.TB, bearer, method, path, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), method, s.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", bearer)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return resp.StatusCode, string(out)
}

// Stop shuts the server down now (it is also stopped when the test ends).
func (s *Server) Stop() { s.stop() }

// HTTPClient returns a client that speaks cleartext HTTP/2 (h2c), as gRPC
// and streaming need.
func HTTPClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols}}
}

// Protocol is a wire protocol a service is tested over.
type Protocol struct {
	Name string
	Opts []connect.ClientOption
}

// Protocols returns the protocols every service is tested over: Connect and
// gRPC.
func Protocols() []Protocol {
	return []Protocol{
		{"connect", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	}
}

// EachProtocol runs fn once per protocol of Protocols, as subtests named
// for it, each against a fresh server from start and a client of it made
// with newClient (a generated New<Service>Client).
func EachProtocol[C any](t *testing.T, start func(t *testing.T) *Server,
	newClient func(connect.HTTPClient, string, ...connect.ClientOption) C, fn func(t *testing.T, c C)) {
	for _, p := range Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			srv := start(t)
			fn(t, newClient(srv.Client(), srv.URL, ClientOptions(p.Opts)...))
		})
	}
}

// Code returns the Connect code of err, the error of a call that should
// have failed; it fails the test when the call succeeded.
func Code(tb testing.TB, err error) connect.Code {
	tb.Helper()
	if err == nil {
		tb.Fatal("call succeeded, want an error")
	}
	return connect.CodeOf(err)
}

// ClientOptions returns the options for a client of a test server: the given
// protocol options plus the interceptor that sends the caller identity from
// the call's context as a mesh token.
func ClientOptions(protocol []connect.ClientOption) []connect.ClientOption {
	return append([]connect.ClientOption{connect.WithInterceptors(mesh.NewClientInterceptor(MeshSigner(), time.Minute))}, protocol...)
}

// MeshSigner signs mesh tokens with the test key every test server accepts
// (give it to an edge under test). The key is derived from a fixed seed: it
// is public, and only for tests.
func MeshSigner() *mesh.Signer {
	s, err := mesh.NewSigner(MeshKey(), "servertest")
	if err != nil {
		panic(err) // a fixed, valid key
	}
	return s
}

// MeshKey is the private key of MeshSigner (an A2A door signs cards with
// it).
func MeshKey() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("toolmesh servertest mesh key"))
	return ed25519.NewKeyFromSeed(seed[:])
}

// As returns ctx acting as agent.
func As(ctx context.Context, agent string) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent}})
}

// WithIdempotencyKey returns ctx whose calls carry key as their idempotency key.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	c := mesh.FromContext(ctx)
	c.IdempotencyKey = key
	return mesh.WithCall(ctx, c)
}

// Violations returns the protovalidate violations an InvalidArgument error
// carries, as field path ("" for message-level rules) -> rule ids. It fails
// the test when err is not InvalidArgument.
func Violations(tb testing.TB, err error) map[string][]string {
	tb.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		tb.Fatalf("error = %v, want invalid_argument", err)
	}
	out := map[string][]string{}
	for _, d := range ce.Details() {
		m, err := d.Value()
		if err != nil {
			tb.Fatal(err)
		}
		vs, ok := m.(*validate.Violations)
		if !ok {
			continue
		}
		for _, v := range vs.GetViolations() {
			var path []string
			for _, e := range v.GetField().GetElements() {
				path = append(path, e.GetFieldName())
			}
			f := strings.Join(path, ".")
			out[f] = append(out[f], v.GetRuleId())
		}
	}
	return out
}

// Bearer returns an Authorization header value ("Bearer <mesh token>") that
// acts as agent, for calls made without a Connect client (REST, raw HTTP).
func Bearer(agent string) string {
	return BearerFor(mesh.Caller{Subject: agent, Agent: agent})
}

// BearerFor is Bearer for any caller (roles, depth, another subject).
func BearerFor(c mesh.Caller) string {
	now := time.Now()
	tok, err := MeshSigner().Mint(c, now, now.Add(time.Minute))
	if err != nil {
		panic(err) // only an invalid caller fails, a test bug
	}
	return "Bearer " + tok
}

// Unexpected checks that err answers an unexpected error: code (Internal,
// or Unavailable for a busy store), the fixed message with an error id, the
// id as a detail, and one rpc.error event in logs under that id. It returns
// the event; its "error" is the cause.
func Unexpected(tb testing.TB, err error, code connect.Code, logs *logtest.Buffer) map[string]any {
	tb.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		tb.Fatalf("error = %v, want %s", err, code)
	}
	id := rpcerror.ID(err)
	want := rpcerror.MessageInternal
	if code == connect.CodeUnavailable {
		want = rpcerror.MessageBusy
	}
	if id == "" || ce.Message() != rpcerror.WithID(want, id) {
		tb.Fatalf("error message %q, error id %q; want %q with an error id", ce.Message(), id, want)
	}
	return LoggedError(tb, logs, id)
}

// LoggedError returns the one rpc.error event logged under the error id,
// failing the test when there is none or more than one.
func LoggedError(tb testing.TB, logs *logtest.Buffer, id string) map[string]any {
	tb.Helper()
	var found []map[string]any
	for _, e := range logs.Events("rpc.error") {
		if e[rpcerror.MetadataErrorID] == id {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		tb.Fatalf("rpc.error events with error_id %s: %d, want 1; log:\n%s", id, len(found), logs.String())
	}
	return found[0]
}

// InternalText lists what of an unexpected error's cause shows in text, a
// message a caller received: any of causes (the failure's table, path,
// trigger text), the words of database errors, or the "step: cause" chain
// of a wrapped Go error. Empty when text hides the cause.
func InternalText(text string, causes ...string) []string {
	var found []string
	lower := strings.ToLower(text)
	for _, s := range append([]string{"sql", "no such table", "constraint", "database is locked", "busy_timeout", "trigger", ": "}, causes...) {
		if strings.Contains(lower, strings.ToLower(s)) {
			found = append(found, s)
		}
	}
	return found
}
