package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestServiceConcurrencyMakesCallsWaitTheirTurn: with two calls in flight
// to a service, a third waits at the edge and reaches the service once one
// of them ends; a call whose caller gives up while it waits never reaches
// the service; a long-running tool passes the full gate.
func TestServiceConcurrencyMakesCallsWaitTheirTurn(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	// Every write waits a minute, or until its caller goes.
	backend := testingsvc.NewWith(testingsvc.Options{Delays: map[string]time.Duration{"Write": time.Minute}})
	svc := servertest.Start(t, backend.Server())
	f := edgetest.NewFixtureOn(t, backend, svc, func(c *edge.Config) {
		c.ServiceConcurrency, c.CallTimeout, c.Telemetry = 2, time.Minute, tel.Providers
	})
	cs := f.Connect(t, edgetest.AllVersions[0], "", nil)
	waiting := func() float64 {
		v, _ := telemetrytest.Value(t, tel.Scrape(t), "toolmesh_edge_service_waiting", map[string]string{"service": testingv1connect.TestingServiceName})
		return v
	}
	type call struct {
		cancel context.CancelFunc
		done   chan struct{} // closed when the call has returned
	}
	start := func(tool string, args map[string]any) call {
		ctx, cancel := context.WithCancel(context.Background())
		c := call{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(c.done)
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		}()
		t.Cleanup(func() { cancel(); <-c.done })
		return c
	}
	write := func() call { return start("testing_write", map[string]any{"note": "hello"}) }

	first := write()
	write()
	edgetest.WaitFor(t, func() bool { return backend.Calls("Write") == 2 }, "two writes to reach the service")
	third := write()
	edgetest.WaitFor(t, func() bool { return waiting() == 1 }, "the third write to wait at the edge")

	start("testing_wait", map[string]any{"millis": 60000})
	edgetest.WaitFor(t, func() bool { return backend.Calls("Wait") == 1 }, "a long-running tool to pass the full gate")

	gone := write()
	edgetest.WaitFor(t, func() bool { return waiting() == 2 }, "the fourth write to wait behind the third")
	gone.cancel()
	<-gone.done
	edgetest.WaitFor(t, func() bool { return waiting() == 1 }, "the write whose caller went to leave the queue")
	if n := backend.Calls("Write"); n != 2 {
		t.Errorf("the service saw %d writes while two were in flight and the rest waited, want 2", n)
	}

	first.cancel()
	<-first.done
	edgetest.WaitFor(t, func() bool { return backend.Calls("Write") == 3 }, "the third write to reach the service once the first ended")
	if v := waiting(); v != 0 {
		t.Errorf("%v calls still waiting, want 0", v)
	}
	select {
	case <-third.done:
		t.Error("the third write ended while the service still held it")
	default:
	}
}
