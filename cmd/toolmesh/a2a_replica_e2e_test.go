package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// secondEdge starts another `toolmesh edge` beside the one m's `up` runs:
// the command `toolmesh processes` plans for the edge (same services, mesh
// key, Temporal, state keys), on free ports of its own. It returns its
// MCP endpoint and the A2A base URL of the development agent; it is killed
// when the test ends.
func secondEdge(t *testing.T, bin, temporal string, m *upMesh) (mcpURL, a2aBase string) {
	t.Helper()
	out, err := exec.Command(bin, "processes", "--json", "--port-offset", strconv.Itoa(m.Offset), "--data", m.Data,
		"--temporal-bin", temporal).Output()
	if err != nil {
		t.Fatalf("toolmesh processes: %v", err)
	}
	var plan struct {
		Processes []meshProcess `json:"processes"`
	}
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, p := range plan.Processes {
		if p.Name == procEdge {
			args = p.Args
		}
	}
	if args == nil {
		t.Fatalf("the plan has no edge: %s", out)
	}
	off := porttest.FreeOffset(t, edgePort, edgeMetricsPort, a2aPort)
	addr := fmt.Sprintf("127.0.0.1:%d", edgePort+off)
	a2aAddr := fmt.Sprintf("127.0.0.1:%d", a2aPort+off)
	own := map[string]string{"--addr": addr, "--metrics-addr": fmt.Sprintf("127.0.0.1:%d", edgeMetricsPort+off), "--a2a-addr": a2aAddr}
	for i := 0; i+1 < len(args); i++ {
		if v, ok := own[args[i]]; ok {
			args[i+1] = v
			delete(own, args[i])
		}
	}
	if len(own) > 0 {
		t.Fatalf("the edge's command sets none of %v: %v", own, args)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = m.Dir
	cmd.Env = os.Environ()
	logs := &logtest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	eventually(t, time.Minute, "the second edge is ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("the second edge exited:\n%s", tail(logs.String()))
		default:
		}
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return "http://" + addr + "/mcp", "http://" + a2aAddr + "/a2a/agents/local/"
}

// TestA2AStreamResubscribesOnASecondEdge: two edges serve one mesh (the
// one `up` runs and a second with the same configuration on ports of its
// own). A stream opened on the first is cut by a kill -9 of that edge; the
// client resubscribes on the second at once, from the last event id it
// had, and receives every later event live — the agent answers through the
// second edge's MCP endpoint while the first is still down — none twice.
func TestA2AStreamResubscribesOnASecondEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh and a second edge")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	mcp2, base2 := secondEdge(t, bin, temporal, m)
	ctx := t.Context()

	first, last, _, _ := streamUntilEdgeKilled(t, bin, m, grpcClient(t, m.Link(t, linkA2A)), sendText("replica-stream", "Stream me across replicas."))

	// Resubscribe on the second edge, then answer through it: the events
	// reach the new stream as they happen.
	type got struct {
		ev  a2a.Event
		err error
	}
	resub := make(chan got)
	subscribed := time.Now()
	rctx := a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{a2alink.ParamLastEventID: {last}})
	go func() {
		defer close(resub)
		for ev, err := range grpcClient(t, base2).SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: first.ID}) {
			select {
			case resub <- got{ev, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var toFirst time.Duration
	select {
	case g := <-resub:
		toFirst = time.Since(subscribed)
		if task, ok := g.ev.(*a2a.Task); g.err != nil || !ok || task.ID != first.ID || task.Status.State != a2a.TaskStateWorking {
			t.Fatalf("the resubscription's first event: %#v, %v; want the working task", g.ev, g.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no first event on the second edge within a minute")
	}
	s := mcpSessionTo(t, mcp2)
	answerAsAgent(t, s, waitForMessage(t, s, "Stream me across replicas."), "Answered through the second edge.")

	var kinds, ids []string
	seen := map[string]bool{}
	for g := range resub {
		if g.err != nil {
			t.Fatal(g.err)
		}
		var meta map[string]any
		switch e := g.ev.(type) {
		case *a2a.TaskArtifactUpdateEvent:
			kinds, meta = append(kinds, "artifact"), e.Metadata
		case *a2a.TaskStatusUpdateEvent:
			kinds, meta = append(kinds, string(e.Status.State)), e.Metadata
		default:
			t.Fatalf("a second snapshot on the resubscription: %#v", g.ev)
		}
		id, _ := meta[a2alink.EventsExtension].(map[string]any)["id"].(string)
		if seen[id] {
			t.Errorf("event %s twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	want := []string{string(first.ID) + "/2", string(first.ID) + "/3"}
	if len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] || kinds[1] != string(a2a.TaskStateCompleted) {
		t.Errorf("on the second edge: %v with ids %v, want the answer and completed, ids %v", kinds, ids, want)
	}
	lost := 0
	for _, id := range want {
		if !seen[id] {
			lost++
		}
	}
	t.Logf("first edge killed mid-stream; resubscribed on the second from %s: first event after %s, %d events, %d lost, %d twice",
		last, toFirst.Round(time.Millisecond), len(ids), lost, len(ids)-len(seen))
}
