package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// outcome is what a client got for one call.
type outcome struct {
	env edgetest.Envelope
	err error
}

func (o outcome) String() string {
	if o.err != nil {
		return "error: " + o.err.Error()
	}
	return fmt.Sprintf("%+v", o.env)
}

// callAsync calls tool on cs in the background.
func callAsync(cs *mcp.ClientSession, tool string, args map[string]any) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			out <- outcome{err: err}
			return
		}
		out <- outcome{env: envelopeOf(res)}
	}()
	return out
}

func envelopeOf(res *mcp.CallToolResult) edgetest.Envelope {
	var env edgetest.Envelope
	if len(res.Content) == 1 {
		if text, ok := res.Content[0].(*mcp.TextContent); ok {
			_ = json.Unmarshal([]byte(text.Text), &env)
		}
	}
	return env
}

// TestShutdownAnswersEveryCallInFlight runs the edge as the toolmesh
// command does (server.RunHTTP with the edge's Shutdown) and stops it while
// calls are in flight on every protocol era: a call that finishes within
// the grace period gets its result, the others are cut short and answer
// unavailable, and no client sees its connection drop.
func TestShutdownAnswersEveryCallInFlight(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.ShutdownGrace, c.CallTimeout = 3*time.Second, time.Minute })
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := logging.New(f.Logs, logging.ParseLevel("debug"))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- server.RunHTTP(ctx, server.NewHTTPServer(f.Edge.Handler(), log, server.Limits{}), lis, log,
			server.HTTPOptions{ShutdownTimeout: 20 * time.Second, AnswerInFlight: func(ctx context.Context) { _ = f.Edge.Shutdown(ctx) }})
	}()
	url := "http://" + lis.Addr().String() + "/mcp"

	var long, short []<-chan outcome
	for _, v := range edgetest.AllVersions {
		client := mcp.NewClient(&mcp.Implementation{Name: "shutdown-test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: v})
		if err != nil {
			t.Fatalf("connect at %s: %v", v, err)
		}
		defer cs.Close()
		long = append(long, callAsync(cs, "testing_wait", map[string]any{"millis": 60000}))
		short = append(short, callAsync(cs, "testing_wait", map[string]any{"millis": 100}))
	}
	edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait") == 2*len(edgetest.AllVersions) }, "every call to reach the service")
	stop()

	for i, c := range short {
		if o := <-c; o.err != nil || o.env.Status != "ok" {
			t.Errorf("%s: a call that ends within the grace period = %v, want ok", edgetest.AllVersions[i], o)
		}
	}
	for i, c := range long {
		o := <-c
		if o.err != nil || o.env.DomainCode != "unavailable" || !strings.Contains(o.env.Message, "shutting down") || !strings.Contains(o.env.Message, "Retry") {
			t.Errorf("%s: a call cut short = %v, want an unavailable result telling to retry", edgetest.AllVersions[i], o)
		}
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("RunHTTP = %v, want a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the edge did not stop (a stream kept the shutdown waiting)")
	}
	edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait.cancelled") == len(edgetest.AllVersions) }, "the service calls of the calls cut short to be cancelled")
	if n := len(f.Logs.Events("edge.calls_cut_short")); n != 1 {
		t.Errorf("edge.calls_cut_short events = %d, want 1", n)
	}
}

// TestShutdownRefusesNewCalls: once the edge is stopping, a call that
// arrives is not run and answers unavailable at once.
func TestShutdownRefusesNewCalls(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.ShutdownGrace, c.CallTimeout = time.Minute, time.Minute })
	cs := f.Connect(t, "2025-11-25", "", nil)
	held := callAsync(cs, "testing_wait", map[string]any{"millis": 60000})
	edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait") == 1 }, "the held call to reach the service")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- f.Edge.Shutdown(ctx) }()
	edgetest.WaitFor(t, func() bool { return len(f.Logs.Events("edge.stopping")) == 1 }, "the edge to begin stopping")

	_, env := edgetest.CallEnv(t, f.Connect(t, "", "", nil), "testing_write", map[string]any{"note": "n"})
	if env.DomainCode != "unavailable" || !strings.Contains(env.Message, "did not run") {
		t.Errorf("a call after shutdown began = %v, want unavailable saying it did not run", env)
	}
	if n := f.Backend.Calls("Write"); n != 0 {
		t.Errorf("writes reaching the service = %d, want 0", n)
	}
	cancel() // past the grace period: the held call is cut short
	if o := <-held; o.err != nil || o.env.DomainCode != "unavailable" {
		t.Errorf("the held call = %v, want unavailable", o)
	}
	<-stopped
}

// TestStdioAnswersCallsInFlightWhenStopped: a stdio edge whose context
// ends writes the answer of the call in flight before it returns.
func TestStdioAnswersCallsInFlightWhenStopped(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, func(c *edge.Config) { c.ShutdownGrace, c.CallTimeout = 100*time.Millisecond, time.Minute })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := f.Edge.ServeStdio(ctx, inR, outW)
		outW.Close()
		served <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := callAsync(cs, "testing_wait", map[string]any{"millis": 60000})
	edgetest.WaitFor(t, func() bool { return f.Backend.Calls("Wait") == 1 }, "the call to reach the service")
	cancel()
	if o := <-held; o.err != nil || o.env.DomainCode != "unavailable" || !strings.Contains(o.env.Message, "shutting down") {
		t.Errorf("the call in flight = %v, want unavailable", o)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio did not return")
	}
}

// TestACrashedServiceAnswersUnavailable: a service whose connections drop
// mid-call (its process died) leaves the call with an unavailable result,
// not a dropped connection.
func TestACrashedServiceAnswersUnavailable(t *testing.T) {
	t.Parallel()
	backend := testingsvc.New()
	svc := servertest.Start(t, backend.Server())
	proxy := servertest.StartCutProxy(t, svc.Addr)
	f := edgetest.NewFixtureOn(t, backend, svc, func(c *edge.Config) {
		c.Services = map[string]string{"toolmesh.testing.v1.TestingService": "http://" + proxy.Addr}
		c.HTTPClient = nil // a client of its own, through the proxy
		c.CallTimeout = time.Minute
	})
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			before := backend.Calls("Wait")
			held := callAsync(f.Connect(t, v, "", nil), "testing_wait", map[string]any{"millis": 60000})
			edgetest.WaitFor(t, func() bool { return backend.Calls("Wait") == before+1 }, "the call to reach the service")
			proxy.Cut()
			o := <-held
			// A read is retried as it is; cmd/toolmesh's process test checks
			// the advice a write gets.
			if o.err != nil || o.env.DomainCode != "unavailable" {
				t.Errorf("a call whose service died = %v, want unavailable", o)
			}
		})
	}
}
