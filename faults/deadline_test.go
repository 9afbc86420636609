//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// A call deadline D (the edge's --call-timeout) crosses every hop: edge →
// service, and edge → calls workflow → service for an elicited call, whose
// side effect runs in the workflow's activity. The last hop — the test-only
// testing service — sleeps past D. Each hop returns at D, before its work
// would have ended (how far past D is reported: the target is 50ms), and no
// handler completes after its caller gave up.
func TestDeadlinesCrossEveryHop(t *testing.T) {
	const deadline = time.Second
	const waitWork = 3 * time.Second // what testing_wait sleeps
	m := sharedMesh(t)
	url := startEdge(t, m, "--call-timeout", deadline.String())
	plain := connectMCP(t, url, "", nil)
	confirming := connectMCP(t, url, "", &mcp.ClientOptions{ElicitationHandler: confirmNow})
	before := len(m.events(testingsvc.EventCallEnded))

	// edge → service: testing_wait sleeps 3s.
	var overruns []float64
	wrong := 0
	for range 10 {
		o := callTool(plain, "testing_wait", map[string]any{"millis": waitWork.Milliseconds()}, "")
		if o.code() != "deadline_exceeded" {
			wrong++
			t.Logf("testing_wait past the deadline: %s %s %v", o.code(), o.env.Message, o.err)
		}
		overruns = append(overruns, float64((o.end.Sub(o.start)-deadline).Microseconds())/1000)
	}
	// edge → workflow → service: testing_purge asks for its admin inputs,
	// then its side effect sleeps 5s (TOOLMESH_TESTING_DELAYS) in the
	// calls worker's activity.
	for i := range 3 {
		o := callTool(confirming, "testing_purge", map[string]any{"agent_id": "local"}, fmt.Sprintf("deadline-purge-%d-%d", time.Now().UnixNano(), i))
		if o.code() != "deadline_exceeded" {
			wrong++
			t.Logf("testing_purge past the deadline: %s %s %v", o.code(), o.env.Message, o.err)
		}
	}
	slices.Sort(overruns)
	figure(t, "calls not answered deadline_exceeded", wrong, "0", wrong == 0)
	// A hop that waited for its work would come back when the work ends
	// (waitMillis, purgeDelay): assert it came back before, and report how
	// far past D it did.
	figure(t, "edge → service: answered before the work would have ended", ms(time.Duration(lastOf(overruns)*float64(time.Millisecond))+deadline),
		fmt.Sprintf("< %s", waitWork), lastOf(overruns) < float64((waitWork-deadline).Milliseconds()))
	report(t, fmt.Sprintf("edge → service: overrun past D=%s, at the client (p50 / max)", deadline),
		fmt.Sprintf("%.1f / %.1f ms", percentile(overruns, 50), lastOf(overruns)), "max <= 50 ms", lastOf(overruns) <= 50)

	// The service's own account of each hop (testingsvc's call_ended
	// events): how far past its deadline it returned, and whether it
	// completed although its caller had gone.
	var waits, purges []float64
	completedAfterCancel, notCancelled := 0, 0
	eventually(t, 10*time.Second, "the service logged every ended call", func() bool {
		return len(m.events(testingsvc.EventCallEnded)) >= before+13
	})
	for _, e := range m.events(testingsvc.EventCallEnded)[before:] {
		over, _ := e["overrun_ms"].(float64)
		switch e["method"] {
		case "Wait":
			waits = append(waits, over)
		case "Purge":
			purges = append(purges, over)
		}
		if e["completed_after_cancel"] == true {
			completedAfterCancel++
		}
		if e["cancelled"] != true {
			notCancelled++
		}
	}
	slices.Sort(waits)
	slices.Sort(purges)
	figure(t, "last hops that logged their end (edge → service / workflow → service)", fmt.Sprintf("%d / %d", len(waits), len(purges)), "10 / 3", len(waits) == 10 && len(purges) == 3)
	report(t, "service hop (edge → service): overrun past its deadline (p50 / max)", fmt.Sprintf("%.1f / %.1f ms", percentile(waits, 50), lastOf(waits)), "max <= 50 ms", lastOf(waits) <= 50)
	report(t, "service hop (workflow → service): overrun past its deadline (p50 / max)", fmt.Sprintf("%.1f / %.1f ms", percentile(purges, 50), lastOf(purges)), "max <= 50 ms", lastOf(purges) <= 50)
	figure(t, "last hops that ran to the end past the deadline", notCancelled, "0", notCancelled == 0)
	figure(t, "handlers completing after cancellation", completedAfterCancel, "0", completedAfterCancel == 0)
}

func lastOf(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// confirmNow confirms an admin call's missing inputs at once.
func confirmNow(_ context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "reason": "fault suite"}}, nil
}

// startEdge runs one more edge in front of the shared mesh's services,
// Temporal and workers, with extra flags; it returns its MCP endpoint.
func startEdge(t *testing.T, m *mesh, flags ...string) string {
	t.Helper()
	addr := porttest.Addr(t)
	args := []string{"edge", "--addr", addr, "--data", m.data, "--temporal", m.temporal, "--metrics-addr", "off"}
	for domain, u := range m.services {
		args = append(args, "--service", domain+"="+u)
	}
	var logs logtest.Buffer
	cmd := exec.Command(suite.bin, append(args, flags...)...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	eventually(t, 30*time.Second, "the extra edge serving", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return "http://" + addr + "/mcp"
}
