package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/replicatest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
)

// TestSessionsAcrossEdgeProcesses runs two `toolmesh edge` processes with the
// flags `toolmesh up` gives its edge (plus the peers), in front of the real
// agents and owner services, the calls and owner workers and a Temporal dev
// server, behind a load balancer without affinity. At every 2025-era
// version a session begun on one edge lists tools, asks the owner (and
// hears its progress), registers an agent whose confirmation it is asked for
// on one edge and answers through the other, and ends through the other
// edge. When the edge holding a session is killed, the other answers 404
// and the client's new session works.
func TestSessionsAcrossEdgeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts the processes of a mesh")
	}
	wd, _ := os.Getwd()
	temporal, err := temporaltest.Binary(wd)
	if err != nil {
		t.Fatal(err)
	}
	bin, data := buildWithKeys(t)
	const secondEdgePort = 7199 // a port the plan leaves free
	offset := porttest.FreeOffset(t, append(porttest.Range(edgePort, 7300), temporalUIPort)...)
	out, err := exec.Command(bin, "processes", "--json", "--port-offset", strconv.Itoa(offset), "--data", data, "--temporal-bin", temporal).Output()
	if err != nil {
		t.Fatal(err)
	}
	var plan struct{ Processes []meshProcess }
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	byName := map[string]meshProcess{}
	for _, p := range plan.Processes {
		byName[p.Name] = p
	}
	for _, name := range []string{procTemporal, "agents", "owner", workerPrefix + "calls", workerPrefix + "owner"} {
		p := byName[name]
		var env []string
		for k, v := range p.Env {
			env = append(env, k+"="+v)
		}
		startBinary(t, bin, p.Probe.URL(), env, p.Args...)
	}

	edgeProc := byName[procEdge]
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", edgePort+offset), fmt.Sprintf("127.0.0.1:%d", secondEdgePort+offset)}
	peers := []string{"TOOLMESH_EDGE_SESSION_PEERS=" + strings.Join(addrs, ",")}
	first := startBinary(t, bin, edgeProc.Probe.URL(), peers, edgeProc.Args...)
	secondArgs := slices.Clone(edgeProc.Args)
	for i := range secondArgs[:len(secondArgs)-1] {
		switch secondArgs[i] {
		case "--addr":
			secondArgs[i+1] = addrs[1]
		case "--metrics-addr":
			secondArgs[i+1] = "off"
		case "--a2a-addr":
			secondArgs[i+1] = "" // none: the first edge serves A2A
		}
	}
	second := startBinary(t, bin, "http://"+addrs[1]+"/healthz", peers, secondArgs...)
	replicas := []replicatest.Replica{
		{Name: "second", Base: &url.URL{Scheme: "http", Host: addrs[1]}},
		{Name: "first", Base: &url.URL{Scheme: "http", Host: addrs[0]}},
	}

	for i, v := range edge.ProtocolVersions {
		if v >= edge.ModernProtocol {
			continue // stateless: no session
		}
		t.Run(v, func(t *testing.T) {
			rr := replicatest.New(t, replicas...)
			var progress atomic.Int32
			cs := connectSession(t, rr.URL+"/mcp", v, &progress)
			if h := rr.Hops()[0]; h.RPC != "initialize" || h.Replica != "second" {
				t.Fatalf("first request %+v, want initialize on the second edge", h)
			}
			for range 2 {
				if res, err := cs.ListTools(context.Background(), nil); err != nil || len(res.Tools) == 0 {
					t.Fatalf("tools/list = %v, %v", res, err)
				}
			}
			// Through the edge that does not hold the session: its progress
			// comes back through both.
			rr.TurnTo(t, cs, "first")
			ask, err := callAsk(t, cs, map[string]any{"question": "Deploy on " + v + "?", "wait_seconds": 1})
			if err != nil || ask.Ask.Status != "ASK_STATUS_PENDING" {
				t.Errorf("owner_ask = %+v, %v; want a pending ask", ask, err)
			}
			if progress.Load() == 0 {
				t.Error("owner_ask sent no progress")
			}
			// 2025-03-26 has no elicitation: its client gives everything.
			elicits := v >= "2025-06-18"
			agent := fmt.Sprintf("replica-bot-%d", i)
			args := map[string]any{"agent_id": agent}
			if !elicits {
				args["confirm"], args["reason"] = true, "registered across edge replicas"
			}
			if env := callTool(t, cs, "agents_register", args); env.Status != "ok" {
				t.Errorf("agents_register = %+v", env)
			}
			if env := callTool(t, cs, "agents_get", map[string]any{"agent_id": agent}); env.Status != "ok" {
				t.Errorf("agents_get after the elicited register = %+v", env)
			}
			rr.TurnTo(t, cs, "first")
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			hops := rr.Hops()
			for _, want := range []replicatest.Hop{
				{Replica: "first", Method: "POST", RPC: "tools/list", Status: 200},
				{Replica: "first", Method: "POST", RPC: "tools/call", Tool: "owner_ask", Status: 200},
				{Replica: "first", Method: "DELETE", Status: 204},
			} {
				if !slices.Contains(hops, want) {
					t.Errorf("no %+v among the requests: %+v", want, hops)
				}
			}
			if elicits && !replicatest.AnsweredElsewhere(hops, "agents_register", "first") && !replicatest.AnsweredElsewhere(hops, "agents_register", "second") {
				t.Errorf("agents_register was not answered through the other edge: %+v", hops)
			}
		})
	}

	t.Run("owner killed", func(t *testing.T) {
		rr := replicatest.New(t, replicas...)
		cs := connectSession(t, rr.URL+"/mcp", "2025-11-25", &atomic.Int32{})
		if env := callTool(t, cs, "agents_get", map[string]any{"agent_id": "local"}); env.Status != "ok" {
			t.Fatalf("agents_get = %+v", env)
		}
		rr.Remove("second")
		second.kill()
		before := len(rr.Hops())
		if _, err := cs.ListTools(context.Background(), nil); err == nil {
			t.Fatal("tools/list worked after its edge was killed")
		}
		if !slices.ContainsFunc(rr.Hops()[before:], func(h replicatest.Hop) bool { return h.Status == http.StatusNotFound }) {
			t.Errorf("no 404 after its edge was killed: %+v", rr.Hops()[before:])
		}
		again := connectSession(t, rr.URL+"/mcp", "2025-11-25", &atomic.Int32{})
		if env := callTool(t, again, "agents_get", map[string]any{"agent_id": "local"}); env.Status != "ok" {
			t.Errorf("agents_get in the new session = %+v", env)
		}
		if n := len(first.logs.Events("edge.session_refused")); n == 0 {
			t.Error("the surviving edge logged no refused session")
		}
	})
}

// connectSession opens a session at version whose user confirms every
// question with a reason, counting the progress it hears.
func connectSession(t *testing.T, url, version string, progress *atomic.Int32) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "sessions-e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "reason": "registered across edge replicas"}}, nil
		},
	})
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect at %s: %v", version, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// kill ends the process at once, as a crash would.
func (p *childProcess) kill() {
	p.stopped.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}
