package edge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/port"
)

// A panic in the edge's own pipeline, after the call's work is done, still
// gives the client exactly one answer: an internal envelope whose error id
// names the logged panic. The same for a direct call, a later round of an
// elicited call, and a call that would have become an MCP task.
func TestPipelinePanicIsOneInternalAnswer(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	edge.PanicAfter(f.edge, func(c *port.Call) bool {
		later := c.MCP != nil && c.MCP.Params.RequestState != ""
		return later || c.Tasks || strings.Contains(string(c.Arguments), "panic please")
	})
	internal := func(t *testing.T, env fullEnvelope) {
		t.Helper()
		if env.Status != "error" || env.DomainCode != "internal" || env.ErrorID == "" {
			t.Fatalf("envelope = %+v, want an internal error with an error id", env)
		}
		var logged int
		for _, ev := range f.logs.Events("tool.error") {
			if ev["error_id"] == env.ErrorID && strings.Contains(ev["error"].(string), "panic") {
				logged++
			}
		}
		if logged != 1 {
			t.Errorf("%d tool.error events with error id %s naming the panic, want 1", logged, env.ErrorID)
		}
	}

	t.Run("direct call", func(t *testing.T) {
		before := m.backend.Calls("Echo")
		res, env := callEnv(t, f.connect(t, "", "", nil), "testing_echo", map[string]any{"message": "panic please"})
		if !res.IsError {
			t.Errorf("result is not an error: %+v", res)
		}
		internal(t, env)
		if n := m.backend.Calls("Echo") - before; n != 1 {
			t.Errorf("the service saw %d calls, want 1", n)
		}
	})

	t.Run("later round of an elicited call", func(t *testing.T) {
		c := newConversation(t)
		r1 := c.send(f.url, "", nil)
		if r1.RequestState == "" {
			t.Fatalf("round 1 = %+v, want questions", r1)
		}
		r2 := c.send(f.url, r1.RequestState, c.answers(r1))
		if r2.Error != nil || r2.ResultType != "complete" || !r2.IsError {
			t.Fatalf("round 2 = %+v, want one complete error result", r2)
		}
		internal(t, envelopeJSON(t, r2.StructuredContent))
	})

	t.Run("call that becomes a task", func(t *testing.T) {
		r := taskRequest(t, f.url, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 0}}, tasksCaps)
		if r.Error != nil {
			t.Fatalf("JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)
		}
		var res rawResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.ResultType != "complete" || !res.IsError {
			t.Fatalf("result = %s, want one complete error result", r.Result)
		}
		internal(t, envelopeJSON(t, res.StructuredContent))
	})
}
