package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// These tests run the built binary (binmesh_test.go): every call in flight
// when a process stops or a dependency dies gets its answer.

// slowTasks is a tasks service whose Get and Create block until their
// caller gives up, counting the calls that arrived.
type slowTasks struct {
	tasksv1connect.UnimplementedTasksServiceHandler
	arrived atomic.Int32
}

func (s *slowTasks) Get(ctx context.Context, _ *tasksv1.GetRequest) (*tasksv1.GetResponse, error) {
	s.arrived.Add(1)
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

func (s *slowTasks) Create(ctx context.Context, _ *tasksv1.CreateRequest) (*tasksv1.CreateResponse, error) {
	s.arrived.Add(1)
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

// waitArrived waits until n calls reached the slow service.
func (s *slowTasks) waitArrived(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.arrived.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls reached the service", s.arrived.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const getArgs = `{"task_id":"tsk_00000000000000000000000000"}`

// TestProcessesAnswerEveryCallInFlight stops a real edge process with
// SIGTERM while calls are in flight on both protocol eras and over stdio,
// and cuts a dependency's connections mid-call: every call gets one tool
// result (unavailable, saying how to retry), none a dropped connection.
func TestProcessesAnswerEveryCallInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	bin := buildToolmesh(t)
	data := testMeshDir(t)

	t.Run("SIGTERM", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		edgeAddr := porttest.Addr(t)
		edgeProc := startBin(t, bin, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off",
			"--service", "tasks="+svc.URL, "--shutdown-grace", "500ms")
		url := "http://" + edgeAddr + "/mcp"

		type answer struct {
			name string
			env  envelope
			err  error
		}
		answers := make(chan answer, 4)
		// The stateless era, in the shape the edge answers without the SDK.
		go func() {
			resp, body := toolCall(t, &http.Client{}, url, "tasks_get", getArgs, nil)
			if resp.StatusCode != http.StatusOK {
				answers <- answer{name: "2026-07-28 raw", err: fmt.Errorf("status %d: %s", resp.StatusCode, body)}
				return
			}
			answers <- answer{name: "2026-07-28 raw", env: resultEnvelope(t, body)}
		}()
		// SDK clients on every era; the write carries an idempotency key.
		for _, c := range []struct{ version, tool, args string }{
			{"2026-07-28", "tasks_create", `{"description":"held"}`},
			{"2025-11-25", "tasks_create", `{"description":"held"}`},
			{"2025-06-18", "tasks_get", getArgs},
		} {
			mc := mcp.NewClient(&mcp.Implementation{Name: "sigterm", Version: "1"}, nil)
			s, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: c.version})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			go func() {
				var args map[string]any
				_ = json.Unmarshal([]byte(c.args), &args)
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: args, Meta: mcp.Meta{"dev.toolmesh/idempotencyKey": "key-" + c.version}})
				if err != nil {
					answers <- answer{name: c.version, err: err}
					return
				}
				answers <- answer{name: c.version + " " + c.tool, env: mcpResultEnvelope(res)}
			}()
		}
		slow.waitArrived(t, 4)
		if err := edgeProc.stop(t); err != nil {
			t.Errorf("the edge exited with %v after SIGTERM, want status 0", err)
		}
		for range 4 {
			a := <-answers
			switch {
			case a.err != nil:
				t.Errorf("%s: %v, want a tool result", a.name, a.err)
			case a.env.DomainCode != "unavailable" || !strings.Contains(a.env.Message, "shutting down"):
				t.Errorf("%s: %+v, want unavailable because the edge is shutting down", a.name, a.env)
			case strings.Contains(a.name, "tasks_create") && !strings.Contains(a.env.Message, `"key-`):
				t.Errorf("%s: %q, want the advice to retry with the same idempotency key", a.name, a.env.Message)
			}
		}
		if !strings.Contains(edgeProc.logs.String(), "edge.calls_cut_short") {
			t.Error("the edge did not log edge.calls_cut_short")
		}
	})

	t.Run("SIGTERM over stdio", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		cmd := exec.Command(bin, "edge", "--stdio", "--data", data, "--service", "tasks="+svc.URL, "--shutdown-grace", "200ms")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		logs := &logtest.Buffer{}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for _, m := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"desktop","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tasks_get","arguments":` + getArgs + `}}`,
		} {
			fmt.Fprintln(stdin, m)
		}
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		slow.waitArrived(t, 1)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var got string
		for lines.Scan() {
			if strings.Contains(lines.Text(), `"id":2`) {
				got = lines.Text()
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("edge --stdio exited with %v, want status 0\n%s", err, logs)
		}
		if !strings.Contains(got, `\"domain_code\":\"unavailable\"`) || !strings.Contains(got, "shutting down") {
			t.Errorf("the answer to the call in flight = %q, want an unavailable result", got)
		}
	})

	t.Run("a dependency dies", func(t *testing.T) {
		slow := &slowTasks{}
		svc := servertest.Start(t, server.Register(tasksv1connect.TasksServiceName, tasksv1connect.TasksServiceHandler(slow), tasksv1connect.NewTasksServiceHandler, nil))
		proxy := servertest.StartCutProxy(t, svc.Addr)
		edgeAddr := porttest.Addr(t)
		startBin(t, bin, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--data", data, "--metrics-addr", "off", "--service", "tasks=http://"+proxy.Addr)
		type result struct {
			resp *http.Response
			body string
		}
		done := make(chan result, 1)
		go func() {
			resp, body := toolCall(t, &http.Client{}, "http://"+edgeAddr+"/mcp", "tasks_create", `{"description":"d"}`, nil)
			done <- result{resp, body}
		}()
		slow.waitArrived(t, 1)
		proxy.Cut()
		r := <-done
		env := resultEnvelope(t, r.body)
		if r.resp.StatusCode != http.StatusOK || env.DomainCode != "unavailable" || !strings.Contains(env.Message, "may or may not have taken effect") {
			t.Errorf("a call whose service died = %d %+v, want an unavailable result with retry advice", r.resp.StatusCode, env)
		}
	})
}
