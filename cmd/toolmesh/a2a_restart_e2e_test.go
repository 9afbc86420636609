package main

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/a2alink"
)

// grpcClient opens a2a-go/v2's own client to the agent at base over the
// gRPC interface its card names.
func grpcClient(t *testing.T, base string) *a2aclient.Client {
	t.Helper()
	card, err := a2alink.FetchCard(t.Context(), http.DefaultClient, base)
	if err != nil {
		t.Fatal(err)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolGRPC && i.ProtocolVersion == a2a.Version {
			iface = i
		}
	}
	if iface == nil {
		t.Fatalf("the card offers no gRPC 1.0 interface: %s", card.Raw)
	}
	c, err := a2aclient.NewFromEndpoints(t.Context(), []*a2a.AgentInterface{iface}, a2aclient.WithDefaultsDisabled(),
		a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// processPID is the pid of one process `toolmesh up` runs, once it is
// ready, with how often it was restarted.
func processPID(t *testing.T, bin string, m *upMesh, name string) (pid, restarts int, ready bool) {
	t.Helper()
	for _, p := range upStatusOf(t, bin, m).Processes {
		if p.Name == name {
			return p.PID, p.Restarts, p.State == "ready"
		}
	}
	t.Fatalf("up runs no process %s", name)
	return 0, 0, false
}

func sendText(id, text string) *a2a.SendMessageRequest {
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	msg.ID = id
	return &a2a.SendMessageRequest{Message: msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}
}

// TestA2AOverGRPCSurvivesAnEdgeRestart: a2a-go/v2's own client, over the
// gRPC binding, against the processes `toolmesh up` runs, sends, gets and
// cancels a task; then it streams one, the edge is killed (kill -9)
// mid-stream, and after `up` restarts it the client resubscribes from the
// last event it had and receives every later event, none twice.
func TestA2AOverGRPCSurvivesAnEdgeRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	base := m.Link(t, linkA2A)
	c := grpcClient(t, base)
	ctx := t.Context()

	res, err := c.SendMessage(ctx, sendText("grpc-1", "Hello over gRPC."))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateWorking {
		t.Fatalf("SendMessage = %#v, want a working task", res)
	}
	if got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateWorking {
		t.Errorf("GetTask = %+v, %v; want the working task", got, err)
	}
	if got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Errorf("CancelTask = %+v, %v; want canceled", got, err)
	}
	if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "tsk_unknown"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("GetTask of an unknown task: %v, want TaskNotFound", err)
	}

	// A stream, open on the edge when it is killed.
	first, last, pid, killed := streamUntilEdgeKilled(t, bin, m, c, sendText("grpc-stream", "Stream me over gRPC."))
	eventually(t, time.Minute, "the edge restarted", func() bool {
		p, restarts, ready := processPID(t, bin, m, "edge")
		return ready && p != pid && restarts == 1
	})
	restarted := time.Since(killed)

	// The agent answers while nobody streams.
	s := mcpSessionTo(t, m.Link(t, linkMCP))
	answerAsAgent(t, s, waitForMessage(t, s, "Stream me over gRPC."), "Answered after the restart.")

	rctx := a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{a2alink.ParamLastEventID: {last}})
	var kinds, ids []string
	seen := map[string]bool{}
	for ev, err := range grpcClient(t, base).SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: first.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		var meta map[string]any
		switch e := ev.(type) {
		case *a2a.Task:
			kinds = append(kinds, "task")
			continue
		case *a2a.TaskArtifactUpdateEvent:
			kinds, meta = append(kinds, "artifact"), e.Metadata
		case *a2a.TaskStatusUpdateEvent:
			kinds, meta = append(kinds, string(e.Status.State)), e.Metadata
		}
		id, _ := meta[a2alink.EventsExtension].(map[string]any)["id"].(string)
		if seen[id] {
			t.Errorf("event %s twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	want := []string{string(first.ID) + "/2", string(first.ID) + "/3"}
	if len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] || len(kinds) != 3 || kinds[2] != string(a2a.TaskStateCompleted) {
		t.Errorf("after the restart: %v with ids %v, want the task, the answer and completed, ids %v", kinds, ids, want)
	}
	t.Logf("edge killed mid-stream: restarted and ready in %s; resubscribed from %s: %d events, %d lost, %d twice",
		restarted.Round(100*time.Millisecond), last, len(ids), 2-len(seen), len(ids)-len(seen))
}

// streamUntilEdgeKilled streams msg with c, reads the stream's first event
// (the task, naming its first event), then kills `up`'s edge (kill -9) and
// waits until the stream has failed with it. It returns the task, the last
// event id the client had, the killed edge's pid and when it was killed.
func streamUntilEdgeKilled(t *testing.T, bin string, m *upMesh, c *a2aclient.Client, msg *a2a.SendMessageRequest) (first *a2a.Task, last string, pid int, killed time.Time) {
	t.Helper()
	sctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	events := make(chan a2a.Event)
	streamErr := make(chan error, 1)
	go func() {
		for ev, err := range c.SendStreamingMessage(sctx, msg) {
			if err != nil {
				streamErr <- err
				return
			}
			select {
			case events <- ev:
			case <-sctx.Done():
				return
			}
		}
		streamErr <- nil
	}()
	select {
	case ev := <-events:
		first, _ = ev.(*a2a.Task)
	case err := <-streamErr:
		t.Fatalf("the stream ended before its first event: %v", err)
	}
	if first == nil {
		t.Fatal("the stream's first event is not the task")
	}
	last, _ = first.Metadata[a2alink.EventsExtension].(map[string]any)["last_event_id"].(string)
	if last != string(first.ID)+"/1" {
		t.Fatalf("the stream's first event names last_event_id %q, want %s/1", last, first.ID)
	}
	pid, _, _ = processPID(t, bin, m, procEdge)
	killed = time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-streamErr:
		if err == nil {
			t.Fatal("the stream ended cleanly when the edge was killed")
		}
	case ev := <-events:
		t.Fatalf("an event %#v after the edge was killed, before anything happened", ev)
	case <-time.After(time.Minute):
		t.Fatal("the stream did not end when the edge was killed")
	}
	return first, last, pid, killed
}
