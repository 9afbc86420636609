package edge_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/toolmesh/toolmesh/edge/edgetest"
)

func TestMain(m *testing.M) { os.Exit(edgetest.RunTests(m, os.Getenv)) }

// rawCall drives a call by hand over raw HTTP, round after round, the way
// a 2026-07-28 client without an SDK would: the same arguments each time,
// the answers as inputResponses and the requestState echoed, under a new
// JSON-RPC id. It returns the final result.
func rawCall(t *testing.T, url, tool string, args any, a *edgetest.Answerer) edgetest.RawResult {
	t.Helper()
	state := ""
	var responses map[string]any
	for id := 1; id <= 10; id++ {
		res := edgetest.RawRound(t, url, tool, id, args, state, responses, nil)
		if res.ResultType != "input_required" {
			return res
		}
		responses = map[string]any{}
		for key, ir := range res.InputRequests {
			if ir.Method != "elicitation/create" || ir.Params.Mode != "form" {
				t.Fatalf("input request %s = %+v, want a form elicitation", key, ir)
			}
			var schema any
			_ = json.Unmarshal(ir.Params.RequestedSchema, &schema)
			action, content := a.Answer(ir.Params.Message, schema)
			r := map[string]any{"action": action}
			if content != nil {
				r["content"] = content
			}
			responses[key] = r
		}
		state = res.RequestState
	}
	t.Fatal("the call took more than 10 rounds")
	return edgetest.RawResult{}
}

// refusedState is the one answer to an unusable requestState: an
// invalid-params error, never a tool result.
const refusedState = `{"code":-32602,"message":"requestState: not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over","data":{"violations":[{"field":"requestState","rule":"request_state","message":"not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over"}]}}`

func isRefusal(res edgetest.RawResult) bool { return string(res.Error) == refusedState }
