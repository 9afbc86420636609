package agentcheck_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/agentcheck"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// directory is an in-memory AgentsService that counts its lookups.
type directory struct {
	agentsv1connect.UnimplementedAgentsServiceHandler
	mu      sync.Mutex
	status  map[string]agentsv1.AgentStatus
	lookups int
	askedBy []string
	// down makes every lookup fail as a directory that cannot be reached.
	down bool
	// hold, when set, delays every lookup until it is closed.
	hold chan struct{}
}

func (d *directory) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
}

func (d *directory) set(id string, s agentsv1.AgentStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status[id] = s
}

func (d *directory) Get(ctx context.Context, req *agentsv1.GetRequest) (*agentsv1.GetResponse, error) {
	d.mu.Lock()
	d.lookups++
	hold := d.hold
	d.mu.Unlock()
	if hold != nil {
		<-hold
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.askedBy = append(d.askedBy, mesh.FromContext(ctx).Caller.Agent)
	if d.down {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("directory restarting"))
	}
	s, ok := d.status[req.GetAgentId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("agent is not registered"))
	}
	return &agentsv1.GetResponse{Agent: &agentsv1.Agent{Id: req.GetAgentId(), Status: s}}, nil
}

func (d *directory) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups
}

// protected is a domain service behind the check: List answers for any
// registered, active caller.
type protected struct {
	tasksv1connect.UnimplementedTasksServiceHandler
}

func (protected) List(ctx context.Context, _ *tasksv1.ListRequest) (*tasksv1.ListResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	return &tasksv1.ListResponse{}, nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	dir *directory
	clk *clock
}

// eachProtocol serves the directory and a protected service checking
// against it, and runs fn with a client of the protected service once over
// Connect and once over gRPC.
func eachProtocol(t *testing.T, fn func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient)) {
	for _, p := range servertest.Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			f := &fixture{dir: &directory{status: map[string]agentsv1.AgentStatus{}}, clk: &clock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}}
			dirSrv := servertest.Start(t, server.Register(agentsv1connect.AgentsServiceName, agentsv1connect.AgentsServiceHandler(f.dir), agentsv1connect.NewAgentsServiceHandler, nil))
			check := agentcheck.New(dirSrv.URL, agentcheck.Options{TTL: 10 * time.Second, Now: f.clk.Now, HTTPClient: dirSrv.Client()})
			srv := servertest.StartWith(t, servertest.Options{Interceptors: []connect.Interceptor{check.Interceptor()}}, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(protected{}), tasksv1connect.NewTasksServiceHandler, nil))
			fn(t, f, tasksv1connect.NewTasksServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(p.Opts)...))
		})
	}
}

func call(c tasksv1connect.TasksServiceClient, agent string) error {
	ctx := context.Background()
	if agent != "" {
		ctx = servertest.As(ctx, agent)
	}
	_, err := c.List(ctx, &tasksv1.ListRequest{})
	return err
}

// refused checks that err is code with a message containing want.
func refused(t *testing.T, what string, err error, code connect.Code, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: call succeeded, want %v", what, code)
		return
	}
	if connect.CodeOf(err) != code || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want %v saying %q", what, err, code, want)
	}
}

func TestUnregisteredAgentsAreRefusedAndRegisteredOnesPass(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient) {
		refused(t, "unregistered agent", call(c, "stranger"), connect.CodePermissionDenied,
			"agent stranger is not registered; an operator must register it (agents_register)")
		refused(t, "agent id the directory cannot hold", call(c, "Not An Id"), connect.CodePermissionDenied, "is not registered")

		// Registering takes effect at once: refusals are not remembered.
		f.dir.set("stranger", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		if err := call(c, "stranger"); err != nil {
			t.Errorf("registered, active agent: %v, want the call to pass", err)
		}

		f.dir.set("sleepy", agentsv1.AgentStatus_AGENT_STATUS_PAUSED)
		refused(t, "paused agent", call(c, "sleepy"), connect.CodePermissionDenied, "agent sleepy is paused")
		f.dir.set("old", agentsv1.AgentStatus_AGENT_STATUS_RETIRED)
		refused(t, "retired agent", call(c, "old"), connect.CodePermissionDenied, "agent old is retired")

		// No agent at all is the handler's business: Unauthenticated.
		if err := call(c, ""); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("call without an agent: %v, want unauthenticated from the handler", err)
		}

		f.dir.mu.Lock()
		defer f.dir.mu.Unlock()
		for _, who := range f.dir.askedBy {
			if who == "" {
				t.Errorf("a lookup carried no identity; lookups are asked as the calling agent (asked by %v)", f.dir.askedBy)
				break
			}
		}
	})
}

func TestActiveAnswersAreCachedForTheTTL(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient) {
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		for i := range 3 {
			if err := call(c, "worker"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		f.clk.Advance(4 * time.Second)
		if err := call(c, "worker"); err != nil {
			t.Fatal(err)
		}
		if n := f.dir.count(); n != 1 {
			t.Errorf("4 calls within the first half of the TTL asked the directory %d times, want 1", n)
		}

		// An agent that is not called for longer than the TTL is asked
		// about again, and pausing shows at once.
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_PAUSED)
		f.clk.Advance(7 * time.Second)
		refused(t, "after the TTL", call(c, "worker"), connect.CodePermissionDenied, "agent worker is paused")
		if n := f.dir.count(); n != 2 {
			t.Errorf("directory asked %d times, want 2", n)
		}
	})
}

func TestAnAgentThatKeepsCallingIsRefreshedInTheBackground(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient) {
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		if err := call(c, "worker"); err != nil {
			t.Fatal(err)
		}
		// In the TTL's second half a call passes at once (the cached
		// answer) and refreshes the answer behind it: the pause reaches
		// the agent's calls before the TTL runs out.
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_PAUSED)
		f.clk.Advance(6 * time.Second)
		if err := call(c, "worker"); err != nil {
			t.Fatalf("call in the TTL's second half: %v, want the cached answer", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for call(c, "worker") == nil {
			if time.Now().After(deadline) {
				t.Fatal("the background refresh never showed the pause (clock still within the TTL)")
			}
			time.Sleep(time.Millisecond)
		}
		refused(t, "after the refresh", call(c, "worker"), connect.CodePermissionDenied, "agent worker is paused")
	})
}

func TestConcurrentChecksOfOneAgentShareOneLookup(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient) {
		f.dir.set("busy", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		hold := make(chan struct{})
		f.dir.mu.Lock()
		f.dir.hold = hold
		f.dir.mu.Unlock()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() { errs <- call(c, "busy") })
		}
		// Hold the first lookup until the directory has seen 20 (what 20
		// calls without sharing would ask) or for a second; with sharing
		// it sees one. (A call that comes late finds the answer cached,
		// so this cannot fail when the checker shares lookups.)
		for deadline := time.Now().Add(time.Second); f.dir.count() < 20 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		close(hold)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("call: %v", err)
			}
		}
		if n := f.dir.count(); n != 1 {
			t.Errorf("20 concurrent calls of one agent asked the directory %d times, want 1", n)
		}
	})
}

func TestRememberedAnswersServeWhileTheDirectoryIsDown(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fixture, c tasksv1connect.TasksServiceClient) {
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		f.dir.set("newcomer", agentsv1.AgentStatus_AGENT_STATUS_ACTIVE)
		if err := call(c, "worker"); err != nil {
			t.Fatal(err)
		}
		f.dir.setDown(true)
		f.clk.Advance(time.Minute)
		if err := call(c, "worker"); err != nil {
			t.Errorf("directory down, worker seen active a minute ago: %v, want the remembered answer", err)
		}
		refused(t, "directory down, agent never seen", call(c, "newcomer"), connect.CodeUnavailable, "cannot check that agent newcomer is registered")
		f.clk.Advance(5 * time.Minute)
		refused(t, "directory down past TTL + MaxStale", call(c, "worker"), connect.CodeUnavailable, "cannot check that agent worker is registered")

		// Back: the directory is asked again and its answer counts.
		f.dir.setDown(false)
		f.dir.set("worker", agentsv1.AgentStatus_AGENT_STATUS_RETIRED)
		refused(t, "directory back", call(c, "worker"), connect.CodePermissionDenied, "agent worker is retired")
	})
}

func TestUnreachableDirectoryRefusesCalls(t *testing.T) {
	check := agentcheck.New("http://127.0.0.1:1", agentcheck.Options{HTTPClient: servertest.HTTPClient()})
	srv := servertest.StartWith(t, servertest.Options{Interceptors: []connect.Interceptor{check.Interceptor()}}, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(protected{}), tasksv1connect.NewTasksServiceHandler, nil))
	c := tasksv1connect.NewTasksServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	refused(t, "directory down", call(c, "worker"), connect.CodeUnavailable, "cannot check that agent worker is registered")
}
