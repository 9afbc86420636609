//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// answerClock measures, for one session that makes one call at a time, the
// longest the server took to say its next thing: from the call's request,
// or from the client's answer to a question of the call, to the server's
// next question or the call's result. The client's own thinking time is not
// the server's.
type answerClock struct {
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
}

func (c *answerClock) mark(now time.Time, fromLast bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fromLast {
		c.longest = max(c.longest, now.Sub(c.last))
	}
	c.last = now
}

// confirm is confirmAdmin, timed.
func (c *answerClock) confirm(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	c.mark(time.Now(), true)
	defer func() { c.mark(time.Now(), false) }()
	return confirmAdmin(ctx, req)
}

// call makes one tools/call, timed.
func (c *answerClock) call(cs *mcp.ClientSession, tool string, args map[string]any, key string) outcome {
	c.mark(time.Now(), false)
	o := callTool(cs, tool, args, key)
	c.mark(o.end, true)
	return o
}

// The calls worker and the Temporal dev server killed 20 times, by turns,
// while elicited admin calls (credits_grant, confirmed in a second round)
// and the same grants as MCP tasks (tools/call, tasks/update to confirm,
// tasks/get to follow; a third client) go on: the server never takes more
// than 30 s to answer (a round it cannot
// finish is answered unavailable, retryable), a client that retries with
// the same idempotency key gets the call's one outcome, and every grant's
// side effect happens at most once — exactly once for a call answered ok.
func TestElicitedRoundsThroughRestarts(t *testing.T) {
	m := sharedMesh(t)
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)
	const clients = 2
	clocks := make([]*answerClock, clients)
	sessions := make([]*mcp.ClientSession, clients)
	for i := range clients {
		clocks[i] = &answerClock{}
		sessions[i] = connectMCP(t, m.mcpURL, "", &mcp.ClientOptions{ElicitationHandler: clocks[i].confirm})
	}

	tasks := &taskClient{url: m.mcpURL, http: &http.Client{Timeout: callTimeout}, clock: &answerClock{}}
	clocks = append(clocks, tasks.clock)

	wallet := "local"
	stop := make(chan struct{})
	var mu sync.Mutex
	final := map[string]outcome{}
	attempts, unavailable := 0, 0
	taskCalls, taskRequests, taskRetried := 0, 0, 0
	load := loadFor(clients+1, 100*time.Millisecond, stop, func(w, n int) {
		if w == clients {
			ref := fmt.Sprintf("%s-task-%d", run, n)
			o, requests, retried := tasks.grantAsTask(map[string]any{"wallet": wallet, "amount": "1", "reference": ref}, ref, 3*time.Minute)
			mu.Lock()
			final[ref] = o
			taskCalls++
			taskRequests += requests
			taskRetried += retried
			mu.Unlock()
			return
		}
		ref := fmt.Sprintf("%s-grant-%d-%d", run, w, n)
		var o outcome
		// A client retries a retryable answer with the same key, as
		// docs/elicitation.md says, for at most two minutes.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			o = clocks[w].call(sessions[w], "credits_grant", map[string]any{"wallet": wallet, "amount": "1", "reference": ref}, ref)
			mu.Lock()
			attempts++
			if o.code() == "unavailable" {
				unavailable++
			}
			mu.Unlock()
			if o.code() != "unavailable" || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		mu.Lock()
		final[ref] = o
		mu.Unlock()
	})

	time.Sleep(3 * time.Second)
	const kills = 20
	for i := range kills {
		var killed fault
		name := "worker-calls"
		if i%2 == 1 {
			name = "temporal"
			killed = m.killTemporalServer(t)
		} else {
			killed = m.kill(t, name, syscall.SIGKILL)
		}
		readyAgain(t, m, name, killed, time.Minute)
		time.Sleep(2 * time.Second)
	}
	m.waitReady(t, time.Minute)
	time.Sleep(3 * time.Second)
	close(stop)
	load.Wait()

	entries := ledgerEntries(t, m, wallet)
	var noResult, okWithout, twice, failedApplied, ok int
	codes := map[string]int{}
	for ref, o := range final {
		codes[o.code()]++
		switch {
		case o.err != nil:
			noResult++
			t.Logf("grant %s: no tool result: %v", ref, o.err)
		case o.ok():
			ok++
			if entries[ref] != 1 {
				okWithout++
			}
		case o.code() != "unavailable" && entries[ref] > 0:
			// An unavailable answer promises nothing either way; any other
			// failure means nothing was done.
			failedApplied++
			t.Logf("grant %s answered %s (%s) but was applied", ref, o.code(), o.env.Message)
		}
		if entries[ref] > 1 {
			twice++
		}
	}
	var longest time.Duration
	for _, c := range clocks {
		longest = max(longest, c.longest)
	}
	figure(t, "kills (calls worker, Temporal by turns)", kills, "20", true)
	figure(t, "grants, elicited and as tasks (elicited attempts, unavailable answers)", fmt.Sprintf("%d (%d, %d) %v", len(final), attempts, unavailable, codes), "> 0 ok", ok > 0)
	figure(t, "grants as MCP tasks (task requests, retried)", fmt.Sprintf("%d (%d, %d)", taskCalls, taskRequests, taskRetried), "> 0", taskCalls > 0)
	figure(t, "longest server answer (s)", longest.Seconds(), "<= 30", longest <= 30*time.Second)
	figure(t, "calls without exactly one tool result", noResult, "0", noResult == 0)
	figure(t, "ok calls whose side effect did not happen once", okWithout, "0", okWithout == 0)
	figure(t, "side effects twice", twice, "0", twice == 0)
	figure(t, "failed calls whose side effect happened", failedApplied, "0", failedApplied == 0)
}
