//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The edge killed with SIGKILL under load: the calls in flight at that
// moment fail, calls made while it is down are refused at connect, up
// brings it back within seconds, and after that nothing fails. A 2025-era
// session from before the kill is gone: its id gets 404, as the MCP spec
// asks, so the client starts a new session.
func TestEdgeKilledUnderLoad(t *testing.T) {
	m := sharedMesh(t)
	old := connectMCP(t, m.mcpURL, "2025-11-25", nil)
	if o := callTool(old, "tasks_list", map[string]any{}, ""); !o.ok() {
		t.Fatalf("2025-era session before the kill: %s %v", o.code(), o.err)
	}
	oldSession := old.ID()

	var calls outcomes
	stop := make(chan struct{})
	sessions := openSessions(t, m.mcpURL, 4)
	load := loadFor(4, 5*time.Millisecond, stop, func(w, n int) {
		calls.add(callTool(sessions[w], "tasks_list", map[string]any{"limit": 5}, ""))
	})
	time.Sleep(2 * time.Second)
	killed := m.kill(t, "edge", syscall.SIGKILL)
	back := servingAgain(t, &calls, killed)
	time.Sleep(2 * time.Second)
	close(stop)
	load.Wait()

	// A call that met the kill — it was still running when the signal was
	// sent, or it started before the edge served again — ends with its
	// connection reset (the dying edge had it) or refused at connect
	// (nothing listened). Of those, the ones that started before the
	// signal was sent were in flight at the kill: at most one per client,
	// since each client waits for its call before the next. Nothing else
	// may fail.
	var inFlight, metKill, after, other int
	for _, o := range calls.list() {
		switch {
		case o.ok():
		case o.end.After(killed.sent) && o.start.Before(back) && (isReset(o.err) || isRefused(o.err)):
			metKill++
			if o.start.Before(killed.sent) {
				inFlight++
			}
		case o.start.After(back):
			after++
			t.Logf("call after the edge was back failed: %s %s %v", o.code(), o.env.Message, o.err)
		default:
			other++
			t.Logf("call failed: %s %s %v (start %s after the signal was sent)", o.code(), o.env.Message, o.err, o.start.Sub(killed.sent))
		}
	}
	figure(t, "tool calls", len(calls.list()), "> 0", len(calls.list()) > 0)
	figure(t, "calls in flight when the edge was killed that failed", inFlight, "<= 4 (one per client)", inFlight <= 4)
	figure(t, "calls that met the kill or the outage (reset or refused)", metKill, "any", true)
	figure(t, "other failed calls", other, "0", other == 0)
	figure(t, "failed calls after the edge was back", after, "0", after == 0)
	secs := back.Sub(killed.sent).Seconds()
	report(t, "seconds until the edge served again", secs, "<= 10", secs <= 10)

	// The session from before the kill: 404.
	req, _ := http.NewRequest(http.MethodPost, m.mcpURL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", oldSession)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	figure(t, "2025-era session id from before the kill", fmt.Sprintf("HTTP %d", resp.StatusCode), "HTTP 404", resp.StatusCode == http.StatusNotFound)
}
