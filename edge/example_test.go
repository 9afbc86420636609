package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// exampleEdge builds an edge in front of one service of the mesh — the
// test-only testing domain's, served as every service is — and returns it
// with a function that stops both.
func exampleEdge() (*edge.Edge, func()) {
	ctx, stop := context.WithCancel(context.Background())
	// Services trust the mesh key the edge signs its calls with.
	signer := servertest.MeshSigner()
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(ctx, lis, logging.Discard(), server.Options{Mesh: signer.Verifier()}, testingsvc.New().Server())
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(stopped) }()

	e, err := edge.New(edge.Config{
		// The contracts whose tools the edge serves, and where their
		// services are. Without Auth it runs in development mode: loopback
		// only, every caller the local owner.
		Contracts: []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")},
		Services:  map[string]string{testingv1connect.TestingServiceName: "http://" + lis.Addr().String()},
		Mesh:      signer,
	}, logging.Discard())
	if err != nil {
		log.Fatal(err)
	}
	return e, func() { stop(); <-stopped }
}

// An edge serves MCP at /mcp: a client calls a tool, and the result is the
// one envelope every tool answers with.
func ExampleNew() {
	e, stop := exampleEdge()
	defer stop()
	hs := httptest.NewServer(e.Handler())
	defer hs.Close()

	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: edge.ModernProtocol})
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	var env struct {
		Status string `json:"status"`
		Data   struct {
			Message string `json:"message"`
			Agent   string `json:"agent_id"`
		} `json:"data"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &env); err != nil {
		log.Fatal(err)
	}
	fmt.Println(env.Status, env.Data.Message, "as", env.Data.Agent)
	// Output: ok hello as local
}

// A door hands each tool call to the pipeline, the one path every call
// takes — identity, grants, limits, guardrails, decoding and validation,
// the service call, the envelope, the audit record — and gets its outcome.
// Every refusal is an envelope too.
func ExampleEdge_Pipeline() {
	e, stop := exampleEdge()
	defer stop()
	p := e.Pipeline()
	echo, _ := p.Lookup("testing_echo")
	caller := identity.Dev("local")
	for _, args := range []string{`{"message":"hello"}`, `{"message":""}`, `["not", "an", "object"]`} {
		out := p.Call(context.Background(), &port.Call{Tool: echo, Caller: caller, Arguments: json.RawMessage(args)})
		env := out.Envelope
		if env.IsError() {
			fmt.Println(env.Status, env.DomainCode, env.Violations[0].Rule)
			continue
		}
		var echoed struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(env.Data, &echoed)
		fmt.Println(env.Status, echoed.Message)
	}
	// No caller, no call.
	out := p.Call(context.Background(), &port.Call{Tool: echo, Arguments: json.RawMessage(`{"message":"hello"}`)})
	fmt.Println(out.Envelope.Status, out.Envelope.DomainCode)
	// Output:
	// ok hello
	// error invalid_argument required
	// error invalid_argument arguments.object
	// error unauthenticated
}
