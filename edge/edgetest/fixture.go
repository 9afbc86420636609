// Package edgetest is what the edge's black-box tests share — the root's
// (pipeline, contract, transcripts) and the MCP door's (edge/mcpdoor): an
// edge built by edge.New in front of the test backend (Fixture), a Temporal
// dev server and calls worker for elicited calls and MCP tasks (MRTRMesh),
// MCP clients, raw JSON-RPC over HTTP, and the fake services some tests put
// behind the edge. Only tests import it (internal/archtest).
package edgetest

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
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestingService is the test-only contract's service.
func TestingService() protoreflect.ServiceDescriptor {
	return testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")
}

// Fixture is an edge in front of the test-only backend.
type Fixture struct {
	Backend *testingsvc.Service
	Svc     *servertest.Server
	Edge    *edge.Edge
	HTTP    *httptest.Server
	URL     string // the /mcp endpoint
	Logs    *logtest.Buffer
}

// Connect opens a go-sdk client session at protocol version (the latest
// when empty), with a bearer token when token is set.
func (f *Fixture) Connect(t testing.TB, version, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return f.ConnectAs(t, version, token, opts, nil)
}

// ConnectWith is connect without a token, with setup run on the client
// before it connects (its roots, say).
func (f *Fixture) ConnectWith(t testing.TB, version string, opts *mcp.ClientOptions, setup func(*mcp.Client)) *mcp.ClientSession {
	t.Helper()
	return f.ConnectAs(t, version, "", opts, setup)
}

func (f *Fixture) ConnectAs(t testing.TB, version, token string, opts *mcp.ClientOptions, setup func(*mcp.Client)) *mcp.ClientSession {
	t.Helper()
	transport := &mcp.StreamableClientTransport{Endpoint: f.URL}
	if token != "" {
		transport.HTTPClient = &http.Client{Transport: BearerTransport{token, http.DefaultTransport}}
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

// ResourceFor is the canonical URI of the edge listening on ts: the
// audience its tokens name.
func ResourceFor(ts *httptest.Server) string { return "http://" + ts.Listener.Addr().String() + "/mcp" }

// NewFixture serves an edge whose only backend is the test service;
// configure adjusts the edge's configuration before it is built.
func NewFixture(t testing.TB, configure func(*edge.Config)) *Fixture {
	t.Helper()
	backend := testingsvc.New()
	return NewFixtureOn(t, backend, servertest.Start(t, backend.Server()), configure)
}

// NewFixtureOn serves an edge in front of a running test backend (several
// edges may share one).
func NewFixtureOn(t testing.TB, backend *testingsvc.Service, svc *servertest.Server, configure func(*edge.Config)) *Fixture {
	t.Helper()
	f := &Fixture{Backend: backend, Svc: svc, Logs: &logtest.Buffer{}}
	cfg := edge.Config{
		Contracts:   []protoreflect.ServiceDescriptor{TestingService()},
		Services:    map[string]string{testingv1connect.TestingServiceName: f.Svc.URL},
		HTTPClient:  f.Svc.Client(),
		Mesh:        servertest.MeshSigner(),
		CallTimeout: 5 * time.Second,
	}
	f.HTTP = httptest.NewUnstartedServer(nil)
	if configure != nil {
		configure(&cfg)
	}
	if cfg.Auth != nil && cfg.Auth.Resource == "" {
		cfg.Auth.Resource = ResourceFor(f.HTTP)
	}
	e, err := edge.New(cfg, logging.New(f.Logs, logging.ParseLevel("debug")))
	if err != nil {
		f.HTTP.Close()
		t.Fatal(err)
	}
	f.Edge = e
	f.HTTP.Config.Handler = e.Handler()
	f.HTTP.Start()
	t.Cleanup(f.HTTP.Close)
	f.URL = f.HTTP.URL + "/mcp"
	return f
}

// BearerTransport adds a bearer token to every request.
type BearerTransport struct {
	Token string
	Base  http.RoundTripper
}

func (b BearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Base.RoundTrip(r)
}

// CallEnv calls a tool and returns its envelope (see Call in services.go,
// which also checks the result's shape).
func CallEnv(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, FullEnvelope) {
	t.Helper()
	res, _ := Call(t, cs, tool, args)
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var env FullEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("structuredContent is not an envelope: %s", raw)
	}
	return res, env
}

// FullEnvelope is every field of an envelope.
type FullEnvelope struct {
	EnvelopeCore
	Violation         string `json:"violation"`
	Gap               string `json:"gap"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
	ErrorID           string `json:"error_id"`
}

type EnvelopeCore = Envelope
