package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// testingService is the test-only contract's service.
func testingService() protoreflect.ServiceDescriptor {
	return testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")
}

// fixture is an edge in front of the test-only backend.
type fixture struct {
	backend *testingsvc.Service
	svc     *servertest.Server
	edge    *edge.Edge
	http    *httptest.Server
	url     string // the /mcp endpoint
	logs    *logtest.Buffer
}

// resourceFor is the canonical URI of the edge listening on ts: the
// audience its tokens name.
func resourceFor(ts *httptest.Server) string { return "http://" + ts.Listener.Addr().String() + "/mcp" }

// newFixture serves an edge whose only backend is the test service;
// configure adjusts the edge's configuration before it is built.
func newFixture(t testing.TB, configure func(*edge.Config)) *fixture {
	t.Helper()
	backend := testingsvc.New()
	return newFixtureOn(t, backend, servertest.Start(t, backend.Server()), configure)
}

// newFixtureOn serves an edge in front of a running test backend (several
// edges may share one).
func newFixtureOn(t testing.TB, backend *testingsvc.Service, svc *servertest.Server, configure func(*edge.Config)) *fixture {
	t.Helper()
	f := &fixture{backend: backend, svc: svc, logs: &logtest.Buffer{}}
	cfg := edge.Config{
		Contracts:   []protoreflect.ServiceDescriptor{testingService()},
		Services:    map[string]string{testingv1connect.TestingServiceName: f.svc.URL},
		HTTPClient:  f.svc.Client(),
		Mesh:        servertest.MeshSigner(),
		CallTimeout: 5 * time.Second,
	}
	f.http = httptest.NewUnstartedServer(nil)
	if configure != nil {
		configure(&cfg)
	}
	if cfg.Auth != nil && cfg.Auth.Resource == "" {
		cfg.Auth.Resource = resourceFor(f.http)
	}
	e, err := edge.New(cfg, logging.New(f.logs, logging.ParseLevel("debug")))
	if err != nil {
		f.http.Close()
		t.Fatal(err)
	}
	f.edge = e
	f.http.Config.Handler = e.Handler()
	f.http.Start()
	t.Cleanup(f.http.Close)
	f.url = f.http.URL + "/mcp"
	return f
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect opens a go-sdk client session at protocol version (the latest
// when empty), with a bearer token when token is set.
func (f *fixture) connect(t testing.TB, version, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return f.connectAs(t, version, token, opts, nil)
}

// connectWith is connect without a token, with setup run on the client
// before it connects (its roots, say).
func (f *fixture) connectWith(t testing.TB, version string, opts *mcp.ClientOptions, setup func(*mcp.Client)) *mcp.ClientSession {
	t.Helper()
	return f.connectAs(t, version, "", opts, setup)
}

func (f *fixture) connectAs(t testing.TB, version, token string, opts *mcp.ClientOptions, setup func(*mcp.Client)) *mcp.ClientSession {
	t.Helper()
	transport := &mcp.StreamableClientTransport{Endpoint: f.url}
	if token != "" {
		transport.HTTPClient = &http.Client{Transport: bearerTransport{token, http.DefaultTransport}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "edge-test", Version: "1"}, opts)
	if setup != nil {
		setup(client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(ctx, transport, sopts)
	if err != nil {
		t.Fatalf("connect MCP client at %q: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callEnv calls a tool and returns its envelope (see call in edge_test.go,
// which also checks the result's shape).
func callEnv(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, fullEnvelope) {
	t.Helper()
	res, _ := call(t, cs, tool, args)
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var env fullEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("structuredContent is not an envelope: %s", raw)
	}
	return res, env
}

// fullEnvelope is every field of an envelope.
type fullEnvelope struct {
	envelopeCore
	Violation         string `json:"violation"`
	Gap               string `json:"gap"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
	ErrorID           string `json:"error_id"`
}

type envelopeCore = envelope
