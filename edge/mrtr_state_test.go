package edge_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// The side effect of an elicited call happens once, whatever the clients,
// edges and workers do between and during its rounds.

// withContent is answers with field set to value in every form's content.
func withContent(answers map[string]any, field string, value any) map[string]any {
	out := map[string]any{}
	for k, v := range answers {
		a := maps.Clone(v.(map[string]any))
		content := maps.Clone(a["content"].(map[string]any))
		content[field] = value
		a["content"] = content
		out[k] = a
	}
	return out
}
func TestElicitedSideEffectRunsExactlyOnce(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)

	t.Run("duplicate final round", func(t *testing.T) {
		m.StartWorker(t)
		purgedOnce := m.SeedPurge(t)
		f := m.Edge(t, nil)
		c := edgetest.NewConversation(t)
		state, answers := c.ToFinal(f.URL)
		if first := c.Send(f.URL, state, answers); !edgetest.IsRemoved(t, first, 3) {
			t.Fatalf("final round = %+v", first)
		}
		// The same round sent again (a client retrying after an
		// unavailable answer) gets the first delivery's outcome.
		if again := c.Send(f.URL, state, answers); !edgetest.IsRemoved(t, again, 3) {
			t.Errorf("repeated final round = %+v, want the first one's result", again)
		}
		// The same state with other answers is refused.
		if other := c.Send(f.URL, state, withContent(answers, "reason", "another reason")); !isRefusal(other) {
			t.Errorf("final round with other answers = %+v, want the refusal", other)
		}
		purgedOnce()
	})

	t.Run("three concurrent final rounds", func(t *testing.T) {
		m.StartWorker(t)
		purgedOnce := m.SeedPurge(t)
		f := m.Edge(t, nil)
		c := edgetest.NewConversation(t)
		state, answers := c.ToFinal(f.URL)
		results := make([]edgetest.RawResult, 3)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = edgetest.RawRound(t, f.URL, c.Tool, 100+i, c.Args, state, answers, nil) })
		}
		wg.Wait()
		// All three are one delivery: each gets its result.
		for _, r := range results {
			if !edgetest.IsRemoved(t, r, 3) {
				t.Errorf("concurrent final round = %+v, want the one result", r)
			}
		}
		purgedOnce()
	})

	t.Run("round 2 taken by a second edge", func(t *testing.T) {
		m.StartWorker(t)
		purgedOnce := m.SeedPurge(t)
		a, b := m.Edge(t, nil), m.Edge(t, nil)
		c := edgetest.NewConversation(t)
		r1 := c.Send(a.URL, "", nil)
		r2 := c.Send(b.URL, r1.RequestState, c.Answers(r1))
		if final := c.Send(a.URL, r2.RequestState, c.Answers(r2)); !edgetest.IsRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})

	t.Run("worker killed between rounds", func(t *testing.T) {
		purgedOnce := m.SeedPurge(t)
		w := m.StartWorkerProcess(t)
		f := m.Edge(t, nil)
		c := edgetest.NewConversation(t)
		r1 := c.Send(f.URL, "", nil)
		edgetest.KillProcess(t, w)
		m.StartWorkerProcess(t)
		r2 := c.Send(f.URL, r1.RequestState, c.Answers(r1))
		if final := c.Send(f.URL, r2.RequestState, c.Answers(r2)); !edgetest.IsRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})

	t.Run("edge killed between rounds", func(t *testing.T) {
		m.StartWorker(t)
		purgedOnce := m.SeedPurge(t)
		a, aURL := m.StartEdgeProcess(t)
		c := edgetest.NewConversation(t)
		r1 := c.Send(aURL, "", nil)
		edgetest.KillProcess(t, a)
		_, bURL := m.StartEdgeProcess(t)
		r2 := c.Send(bURL, r1.RequestState, c.Answers(r1))
		if final := c.Send(bURL, r2.RequestState, c.Answers(r2)); !edgetest.IsRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})
}

// Every unusable requestState is refused, each the same way, and logged at
// the request_state boundary; a refused attempt does not spend the state.
func TestRequestStateRefusals(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	iss := identitytest.NewIssuer(t)
	f := m.Edge(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	token := func(subject string) http.Header {
		tok := iss.Sign(t, jose.RS256, iss.Valid(edgetest.ResourceFor(f.HTTP), subject, "toolmesh:admin toolmesh:write"))
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	alice := edgetest.NewConversation(t)
	alice.Extra = token("alice")
	r1 := alice.Send(f.URL, "", nil)
	state, answers := r1.RequestState, alice.Answers(r1)
	decoded, err := requeststate.Parse(state)
	if err != nil || decoded.Round != 1 || !strings.HasPrefix(decoded.WorkflowID, "call/testing_purge/") || decoded.RunID == "" {
		t.Fatalf("state = %+v, %v", decoded, err)
	}

	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 0x01
		return string(b)
	}
	attempts := []struct {
		name  string
		state string
		conv  func() *edgetest.Conversation
	}{
		{"another principal", state, func() *edgetest.Conversation { c := edgetest.NewConversation(t); c.Extra = token("bob"); return c }},
		{"changed arguments", state, func() *edgetest.Conversation {
			c := edgetest.NewConversation(t)
			c.Extra, c.Args = token("alice"), map[string]any{"agent_id": "someone-else"}
			return c
		}},
		{"another tool", state, func() *edgetest.Conversation {
			c := edgetest.NewConversation(t)
			c.Extra, c.Tool, c.Args = token("alice"), "testing_remind", map[string]any{}
			return c
		}},
		{"truncated", state[:len(state)-5], nil},
		{"first bit flipped", flip(state, 0), nil},
		{"middle bit flipped", flip(state, len(state)/2), nil},
		{"last bit flipped", flip(state, len(state)-1), nil},
		{"garbage", "not-a-state", nil},
	}
	var refusals []string
	for _, at := range attempts {
		c := alice
		if at.conv != nil {
			c = at.conv()
		}
		res := c.Send(f.URL, at.state, answers)
		if res.Error == nil {
			t.Errorf("%s: result = %+v, want refused", at.name, res)
			continue
		}
		refusals = append(refusals, string(res.Error))
	}
	for i, r := range refusals {
		if r != refusals[0] {
			t.Errorf("refusal %d (%s) = %s, want it the same as every other: %s", i, attempts[i].name, r, refusals[0])
		}
	}
	if n := len(f.Logs.Events("boundary.validation_failed")); n < len(attempts) {
		t.Errorf("%d boundary.validation_failed events, want one per refusal (%d)", n, len(attempts))
	}
	for _, e := range f.Logs.Events("boundary.validation_failed") {
		if e["boundary"] != "request_state" {
			t.Errorf("rejection logged at boundary %v, want request_state", e["boundary"])
		}
	}

	// A retired key: an edge that only holds newer keys refuses the state;
	// an edge whose previous key signed it accepts it.
	retiredKey, _ := requeststate.GenerateKey()
	newKey, _ := requeststate.GenerateKey()
	retired, _ := requeststate.NewSealer(retiredKey, newKey)
	rotated, _ := requeststate.NewSealer(newKey, m.Key)
	oldEdge := m.Edge(t, func(c *edge.Config) {
		c.Auth = iss.AuthConfig(t)
		c.Elicitation.States = retired
	})
	tokenFor := func(fx *edgetest.Fixture) http.Header {
		tok := iss.Sign(t, jose.RS256, iss.Valid(edgetest.ResourceFor(fx.HTTP), "alice", "toolmesh:admin toolmesh:write"))
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	alice.Extra = tokenFor(oldEdge)
	if res := alice.Send(oldEdge.URL, state, answers); !isRefusal(res) {
		t.Errorf("state of a retired key = %+v, want the refusal", res)
	}

	// The state was never spent: alice answers with it now, on an edge
	// whose previous key signed it, and the call goes on.
	next := m.Edge(t, func(c *edge.Config) {
		c.Auth = iss.AuthConfig(t)
		c.Elicitation.States = rotated
	})
	alice.Extra = tokenFor(next)
	r2 := alice.Send(next.URL, state, answers)
	if r2.ResultType != "input_required" || r2.InputRequests["r2.admin"].Method == "" {
		t.Fatalf("round 2 after the refusals = %+v, want the admin question", r2)
	}
	// Replay after completion with other answers: both states of the
	// finished call are refused. (The same answers again get the same
	// outcome: TestElicitedSideEffectRunsExactlyOnce.)
	m.Backend.SeedNotes("victim", 1)
	final2 := alice.Answers(r2)
	if final := alice.Send(next.URL, r2.RequestState, final2); !edgetest.IsRemoved(t, final, 1) {
		t.Fatalf("final round = %s", final.StructuredContent)
	}
	replays := map[string][2]any{
		"round 1": {state, withContent(answers, "agent_id", "someone-else")},
		"round 2": {r2.RequestState, withContent(final2, "reason", "another reason")},
	}
	for name, r := range replays {
		if res := alice.Send(next.URL, r[0].(string), r[1].(map[string]any)); !isRefusal(res) {
			t.Errorf("replayed %s state after completion with other answers = %+v, want the refusal", name, res)
		}
	}
}

// A state is accepted for StateTTL, then refused: the edge's clock is
// moved past the state's expiry rather than waited out.
func TestExpiredRequestStateIsRefused(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	var skew atomic.Int64
	f := m.Edge(t, func(c *edge.Config) {
		c.Elicitation.StateTTL = time.Second
		c.Elicitation.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	c := edgetest.NewConversation(t)
	r1 := c.Send(f.URL, "", nil)
	skew.Store(int64(time.Second + time.Millisecond))
	if res := c.Send(f.URL, r1.RequestState, c.Answers(r1)); !isRefusal(res) {
		t.Errorf("expired state = %+v, want the refusal", res)
	}
	if m.Backend.Executions("Purge") != 0 {
		t.Error("the call ran")
	}
}

// A client that repeats a finished call with the same idempotency key gets
// its result again, and the call does not run twice.
func TestRepeatedIdempotencyKeyGetsTheSameResult(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	m.Backend.SeedNotes("victim", 4)
	a := edgetest.NewAnswerer(edgetest.PurgeSheet)
	cs := f.Connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
	// The key is new to the Temporal server, which every test of the
	// binary shares (and -count runs again): the same key there is a
	// retry of that earlier call.
	key := fmt.Sprintf("purge-victim-%d", time.Now().UnixNano())
	params := &mcp.CallToolParams{Name: "testing_purge", Arguments: map[string]any{}, Meta: mcp.Meta{edge.MetaIdempotencyKey: key}}
	first, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	params.Meta = mcp.Meta{edge.MetaIdempotencyKey: key}
	again, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(edgetest.Structured(t, again)), string(edgetest.Structured(t, first)); got != want || !strings.Contains(want, `"removed":4`) {
		t.Errorf("repeated call = %s, want the first result %s", got, want)
	}
	if n := m.Backend.Executions("Purge"); n != 1 || len(a.Questions()) != 2 {
		t.Errorf("Purge ran %d times after %d questions, want once after 2", n, len(a.Questions()))
	}
}
