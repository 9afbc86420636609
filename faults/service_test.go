//go:build faults

package faults

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// every starts fn(i) in a goroutine of its own each period, until stop is
// closed, and returns once all of them have returned.
func every(period time.Duration, stop <-chan struct{}, fn func(i int)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(period):
		}
		wg.Go(func() { fn(i) })
	}
}

// loadFor runs fn in workers goroutines, each in a loop with pause between
// calls, until stop is closed.
func loadFor(workers int, pause time.Duration, stop <-chan struct{}, fn func(worker, n int)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(w, n)
				time.Sleep(pause)
			}
		})
	}
	return &wg
}

// A domain service killed with SIGKILL under load through the edge: every
// call gets one tool result (unavailable while tasks is down), tasks serves
// again without a person, the other domains do not notice, and no write
// that was acknowledged is lost.
func TestDomainServiceKilledUnderLoad(t *testing.T) {
	m := sharedMesh(t)
	var tasksCalls, otherCalls outcomes
	stop := make(chan struct{})
	run := fmt.Sprintf("a%d", time.Now().UnixNano())
	writerSessions, otherSessions := openSessions(t, m.mcpURL, 4), openSessions(t, m.mcpURL, 2)
	writers := loadFor(4, 5*time.Millisecond, stop, func(w, n int) {
		cs := writerSessions[w]
		key := fmt.Sprintf("%s-%d-%d", run, w, n)
		tasksCalls.add(callTool(cs, "tasks_create", map[string]any{"description": "fault suite " + key}, key))
	})
	others := loadFor(2, 5*time.Millisecond, stop, func(w, n int) {
		cs := otherSessions[w]
		if w == 0 {
			key := fmt.Sprintf("%s-m-%d", run, n)
			otherCalls.add(callTool(cs, "memory_save", map[string]any{"key": key, "content": "kept while tasks restarts"}, key))
		} else {
			otherCalls.add(callTool(cs, "credits_balance", map[string]any{}, ""))
		}
	})
	time.Sleep(2 * time.Second) // load before the kill
	killed := m.kill(t, "tasks", syscall.SIGKILL)
	back := servingAgain(t, &tasksCalls, killed)
	time.Sleep(2 * time.Second) // load after it is back
	close(stop)
	writers.Wait()
	others.Wait()

	all := tasksCalls.list()
	var noResult, unavailable, otherFailures int
	var acked []string
	for _, o := range all {
		switch c := o.code(); c {
		case "ok":
			var created tasksv1.CreateResponse
			if err := protoData(o, &created); err != nil {
				t.Fatal(err)
			}
			acked = append(acked, created.GetTask().GetId())
		case "transport":
			noResult++
			t.Logf("no tool result: %v", o.err)
		case "unavailable":
			unavailable++
		default:
			otherFailures++
			t.Logf("tasks_create failed with %s: %s", c, o.env.Message)
		}
	}
	otherFailed := failures(t, otherCalls.list())
	figure(t, "tool calls (tasks / other domains)", fmt.Sprintf("%d / %d", len(all), len(otherCalls.list())), "> 0", len(all) > 0 && len(otherCalls.list()) > 0)
	figure(t, "calls without exactly one tool result", noResult, "0", noResult == 0)
	figure(t, "tasks calls answered unavailable while it was down", unavailable, "any (retryable)", true)
	figure(t, "tasks calls failed otherwise", otherFailures, "0", otherFailures == 0)
	secs := back.Sub(killed.sent).Seconds()
	report(t, "seconds until tasks served again", secs, "<= 10", secs <= 10)
	figure(t, "calls to other domains failed", otherFailed, "0", otherFailed == 0)

	// Every acknowledged write is there.
	client := tasksv1connect.NewTasksServiceClient(h2c(), m.services["tasks"], bearer(m.token(t, "local")))
	lost := 0
	for _, id := range acked {
		if _, err := client.Get(context.Background(), &tasksv1.GetRequest{TaskId: id}); err != nil {
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("get task %s: %v", id, err)
			}
			lost++
		}
	}
	figure(t, "acknowledged writes lost", fmt.Sprintf("%d of %d", lost, len(acked)), "0", lost == 0 && len(acked) > 0)
}

// The agents directory unreachable for longer than the services' caller
// check trusts an answer (frozen with SIGSTOP for 15s; the check's TTL is
// 10s), under load through the edge: every other service keeps serving the
// agents it saw active, from the remembered answer, so no call fails.
func TestAgentsDirectoryUnreachableUnderLoad(t *testing.T) {
	const freeze = 15 * time.Second
	m := sharedMesh(t)
	before := len(m.events("agentcheck.lookup_failed"))
	var calls outcomes
	stop := make(chan struct{})
	run := fmt.Sprintf("d%d", time.Now().UnixNano())
	sessions := openSessions(t, m.mcpURL, 3)
	load := loadFor(3, 20*time.Millisecond, stop, func(w, n int) {
		key := fmt.Sprintf("%s-%d-%d", run, w, n)
		switch w {
		case 0:
			calls.add(callTool(sessions[w], "tasks_create", map[string]any{"description": key}, key))
		case 1:
			calls.add(callTool(sessions[w], "memory_save", map[string]any{"key": key, "content": "while agents is away"}, key))
		default:
			calls.add(callTool(sessions[w], "messages_list", map[string]any{"limit": 1}, ""))
		}
	})
	time.Sleep(2 * time.Second)
	frozen := m.kill(t, "agents", syscall.SIGSTOP)
	time.Sleep(freeze)
	thawed := m.kill(t, "agents", syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	close(stop)
	load.Wait()

	// Calls that started while agents was frozen: a service that waited
	// for the directory instead of serving its remembered answer would
	// hold the first of them until the thaw, for about the whole freeze.
	failed := failures(t, calls.list())
	var slowest time.Duration
	for _, o := range calls.list() {
		if o.start.After(frozen.sent) && o.start.Before(thawed.sent) {
			slowest = max(slowest, o.end.Sub(o.start))
		}
	}
	bridged := map[string]bool{}
	for _, e := range m.events("agentcheck.lookup_failed")[before:] {
		bridged[fmt.Sprint(e["service"])] = true
	}
	figure(t, "calls to tasks, memory, messages (failed)", fmt.Sprintf("%d (%d)", len(calls.list()), failed), "0 failed", failed == 0)
	figure(t, "slowest call while agents was frozen", ms(slowest), fmt.Sprintf("< %s (did not wait for the thaw)", freeze), slowest < freeze)
	report(t, "slowest call while agents was frozen, against one lookup timeout", ms(slowest), "<= 6s (one 5s lookup timeout)", slowest <= 6*time.Second)
	figure(t, "services that served remembered answers", len(bridged), "3", len(bridged) == 3)
}
