package edge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/port"
)

// A panic in the edge's own pipeline, after the call's work is done, still
// gives the client exactly one answer: an internal envelope whose error id
// names the logged panic. The same for a direct call, a later round of an
// elicited call, and a call that would have become an MCP task.
func TestPipelinePanicIsOneInternalAnswer(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	edge.PanicAfter(f.Edge, func(c *port.Call) bool {
		later := c.Elicitation != nil && c.Elicitation.State != ""
		return later || c.Tasks || strings.Contains(string(c.Arguments), "panic please")
	})
	internal := func(t *testing.T, env edgetest.FullEnvelope) {
		t.Helper()
		if env.Status != "error" || env.DomainCode != "internal" || env.ErrorID == "" {
			t.Fatalf("envelope = %+v, want an internal error with an error id", env)
		}
		var logged int
		for _, ev := range f.Logs.Events("tool.error") {
			if ev["error_id"] == env.ErrorID && strings.Contains(ev["error"].(string), "panic") {
				logged++
			}
		}
		if logged != 1 {
			t.Errorf("%d tool.error events with error id %s naming the panic, want 1", logged, env.ErrorID)
		}
	}

	t.Run("direct call", func(t *testing.T) {
		before := m.Backend.Calls("Echo")
		res, env := edgetest.CallEnv(t, f.Connect(t, "", "", nil), "testing_echo", map[string]any{"message": "panic please"})
		if !res.IsError {
			t.Errorf("result is not an error: %+v", res)
		}
		internal(t, env)
		if n := m.Backend.Calls("Echo") - before; n != 1 {
			t.Errorf("the service saw %d calls, want 1", n)
		}
	})

	t.Run("later round of an elicited call", func(t *testing.T) {
		c := edgetest.NewConversation(t)
		r1 := c.Send(f.URL, "", nil)
		if r1.RequestState == "" {
			t.Fatalf("round 1 = %+v, want questions", r1)
		}
		r2 := c.Send(f.URL, r1.RequestState, c.Answers(r1))
		if r2.Error != nil || r2.ResultType != "complete" || !r2.IsError {
			t.Fatalf("round 2 = %+v, want one complete error result", r2)
		}
		internal(t, edgetest.EnvelopeJSON(t, r2.StructuredContent))
	})

	t.Run("call that becomes a task", func(t *testing.T) {
		r := edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 0}}, edgetest.TasksCaps)
		if r.Error != nil {
			t.Fatalf("JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)
		}
		var res edgetest.RawResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.ResultType != "complete" || !res.IsError {
			t.Fatalf("result = %s, want one complete error result", r.Result)
		}
		internal(t, edgetest.EnvelopeJSON(t, res.StructuredContent))
	})
}
