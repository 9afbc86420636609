//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
)

// TestEventsThroughKillsAndAReceiverDown: while asks are created and
// answered and work tasks started (three events each), the owner and tasks
// services (between a change and its event: the outbox), the event log
// (the relay), the delivery worker and the Temporal dev server are killed
// in turn, and the webhook receiver
// answers 503 for the first minute. Every event the event log recorded for
// the subscriber reaches it once the receiver is back, its signature
// verified; duplicates are counted by event id.
func TestEventsThroughKillsAndAReceiverDown(t *testing.T) {
	m := sharedMesh(t)
	hc := &http.Client{Timeout: 30 * time.Second}
	down := time.Now()
	sub := startEventsSubscriber(t, m.mcpURL, hc, down, down.Add(time.Minute), "ask.created", "ask.answered", "work_task.status_changed")
	asker := connectMCP(t, m.mcpURL, "", nil)
	run := fmt.Sprintf("e%d", time.Now().UnixNano()%1e9)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	asked, answered, started := 0, 0, 0
	wg.Go(func() {
		every(400*time.Millisecond, stop, func(i int) {
			key := fmt.Sprintf("%s-ask-%d", run, i)
			var ask ownerv1.AskResponse
			if !retry(func() bool {
				return protoData(callTool(asker, "owner_ask", map[string]any{"question": "ship " + key + "?", "wait_seconds": 0, "timeout_seconds": 3600}, key), &ask) == nil
			}) {
				return
			}
			mu.Lock()
			asked++
			mu.Unlock()
			if retry(func() bool {
				o := callTool(asker, "owner_answer", map[string]any{"ask_id": ask.GetAsk().GetAskId(), "answer": "yes"}, key+"-answer")
				return o.ok() || o.code() == "conflict"
			}) {
				mu.Lock()
				answered++
				mu.Unlock()
			}
			var task tasksv1.CreateResponse
			if !retry(func() bool {
				return protoData(callTool(asker, "tasks_create", map[string]any{"description": "ship " + key}, key+"-task"), &task) == nil
			}) {
				return
			}
			if retry(func() bool {
				o := callTool(asker, "tasks_update_status", map[string]any{"task_id": task.GetTask().GetId(), "status": "TASK_STATUS_RUNNING"}, key+"-start")
				return o.ok() || o.code() == "conflict"
			}) {
				mu.Lock()
				started++
				mu.Unlock()
			}
		})
	})

	var killed []string
	for _, name := range []string{"owner", "tasks", "eventlog", "worker-eventlog"} {
		time.Sleep(5 * time.Second)
		f := m.kill(t, name, syscall.SIGKILL)
		readyAgain(t, m, name, f, 2*time.Minute)
		killed = append(killed, name)
	}
	time.Sleep(5 * time.Second)
	m.killTemporalServer(t)
	killed = append(killed, "the Temporal dev server")
	m.waitReady(t, 2*time.Minute)
	// The receiver is down for a minute from the start: the producer runs
	// until after it is back.
	eventually(t, 3*time.Minute, "the receiver back", func() bool { return time.Now().After(down.Add(time.Minute + 5*time.Second)) })
	close(stop)
	wg.Wait()
	m.waitReady(t, 2*time.Minute)
	mu.Lock()
	figure(t, "asks created / answered, tasks started while "+fmt.Sprint(killed)+" were killed", fmt.Sprintf("%d / %d, %d", asked, answered, started),
		"> 0", asked > 0 && answered > 0 && started > 0)
	mu.Unlock()
	sub.check(t, m.mcpURL, hc)
}
