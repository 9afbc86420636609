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
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// seedPurge seeds the notes testing_purge removes and returns the check
// that the purge ran exactly once since.
func (m *mrtrMesh) seedPurge(t *testing.T) (purgedOnce func()) {
	before := m.backend.Executions("Purge")
	m.backend.SeedNotes("victim", 3)
	return func() {
		t.Helper()
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	}
}

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
	m := newMRTRMesh(t)

	t.Run("duplicate final round", func(t *testing.T) {
		m.startWorker(t)
		purgedOnce := m.seedPurge(t)
		f := m.edge(t, nil)
		c := newConversation(t)
		state, answers := c.toFinal(f.url)
		if first := c.send(f.url, state, answers); !isRemoved(t, first, 3) {
			t.Fatalf("final round = %+v", first)
		}
		// The same round sent again (a client retrying after an
		// unavailable answer) gets the first delivery's outcome.
		if again := c.send(f.url, state, answers); !isRemoved(t, again, 3) {
			t.Errorf("repeated final round = %+v, want the first one's result", again)
		}
		// The same state with other answers is refused.
		if other := c.send(f.url, state, withContent(answers, "reason", "another reason")); !isRefusal(other) {
			t.Errorf("final round with other answers = %+v, want the refusal", other)
		}
		purgedOnce()
	})

	t.Run("three concurrent final rounds", func(t *testing.T) {
		m.startWorker(t)
		purgedOnce := m.seedPurge(t)
		f := m.edge(t, nil)
		c := newConversation(t)
		state, answers := c.toFinal(f.url)
		results := make([]rawResult, 3)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = rawRound(t, f.url, c.tool, 100+i, c.args, state, answers, nil) })
		}
		wg.Wait()
		// All three are one delivery: each gets its result.
		for _, r := range results {
			if !isRemoved(t, r, 3) {
				t.Errorf("concurrent final round = %+v, want the one result", r)
			}
		}
		purgedOnce()
	})

	t.Run("round 2 taken by a second edge", func(t *testing.T) {
		m.startWorker(t)
		purgedOnce := m.seedPurge(t)
		a, b := m.edge(t, nil), m.edge(t, nil)
		c := newConversation(t)
		r1 := c.send(a.url, "", nil)
		r2 := c.send(b.url, r1.RequestState, c.answers(r1))
		if final := c.send(a.url, r2.RequestState, c.answers(r2)); !isRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})

	t.Run("worker killed between rounds", func(t *testing.T) {
		purgedOnce := m.seedPurge(t)
		w := m.startWorkerProcess(t)
		f := m.edge(t, nil)
		c := newConversation(t)
		r1 := c.send(f.url, "", nil)
		killProcess(t, w)
		m.startWorkerProcess(t)
		r2 := c.send(f.url, r1.RequestState, c.answers(r1))
		if final := c.send(f.url, r2.RequestState, c.answers(r2)); !isRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})

	t.Run("edge killed between rounds", func(t *testing.T) {
		m.startWorker(t)
		purgedOnce := m.seedPurge(t)
		a, aURL := m.startEdgeProcess(t)
		c := newConversation(t)
		r1 := c.send(aURL, "", nil)
		killProcess(t, a)
		_, bURL := m.startEdgeProcess(t)
		r2 := c.send(bURL, r1.RequestState, c.answers(r1))
		if final := c.send(bURL, r2.RequestState, c.answers(r2)); !isRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		purgedOnce()
	})
}

// Every unusable requestState is refused, each the same way, and logged at
// the request_state boundary; a refused attempt does not spend the state.
func TestRequestStateRefusals(t *testing.T) {
	t.Parallel()
	m := newMRTRMesh(t)
	m.startWorker(t)
	iss := identitytest.NewIssuer(t)
	f := m.edge(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	token := func(subject string) http.Header {
		tok := iss.Sign(t, jose.RS256, iss.Valid(resourceFor(f.http), subject, "toolmesh:admin toolmesh:write"))
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	alice := newConversation(t)
	alice.extra = token("alice")
	r1 := alice.send(f.url, "", nil)
	state, answers := r1.RequestState, alice.answers(r1)
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
		conv  func() *conversation
	}{
		{"another principal", state, func() *conversation { c := newConversation(t); c.extra = token("bob"); return c }},
		{"changed arguments", state, func() *conversation {
			c := newConversation(t)
			c.extra, c.args = token("alice"), map[string]any{"agent_id": "someone-else"}
			return c
		}},
		{"another tool", state, func() *conversation {
			c := newConversation(t)
			c.extra, c.tool, c.args = token("alice"), "testing_remind", map[string]any{}
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
		res := c.send(f.url, at.state, answers)
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
	if n := len(f.logs.Events("boundary.validation_failed")); n < len(attempts) {
		t.Errorf("%d boundary.validation_failed events, want one per refusal (%d)", n, len(attempts))
	}
	for _, e := range f.logs.Events("boundary.validation_failed") {
		if e["boundary"] != "request_state" {
			t.Errorf("rejection logged at boundary %v, want request_state", e["boundary"])
		}
	}

	// A retired key: an edge that only holds newer keys refuses the state;
	// an edge whose previous key signed it accepts it.
	retiredKey, _ := requeststate.GenerateKey()
	newKey, _ := requeststate.GenerateKey()
	retired, _ := requeststate.NewSealer(retiredKey, newKey)
	rotated, _ := requeststate.NewSealer(newKey, m.key)
	oldEdge := m.edge(t, func(c *edge.Config) {
		c.Auth = iss.AuthConfig(t)
		c.Elicitation.States = retired
	})
	tokenFor := func(fx *fixture) http.Header {
		tok := iss.Sign(t, jose.RS256, iss.Valid(resourceFor(fx.http), "alice", "toolmesh:admin toolmesh:write"))
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	alice.extra = tokenFor(oldEdge)
	if res := alice.send(oldEdge.url, state, answers); !isRefusal(res) {
		t.Errorf("state of a retired key = %+v, want the refusal", res)
	}

	// The state was never spent: alice answers with it now, on an edge
	// whose previous key signed it, and the call goes on.
	next := m.edge(t, func(c *edge.Config) {
		c.Auth = iss.AuthConfig(t)
		c.Elicitation.States = rotated
	})
	alice.extra = tokenFor(next)
	r2 := alice.send(next.url, state, answers)
	if r2.ResultType != "input_required" || r2.InputRequests["r2.admin"].Method == "" {
		t.Fatalf("round 2 after the refusals = %+v, want the admin question", r2)
	}
	// Replay after completion with other answers: both states of the
	// finished call are refused. (The same answers again get the same
	// outcome: TestElicitedSideEffectRunsExactlyOnce.)
	m.backend.SeedNotes("victim", 1)
	final2 := alice.answers(r2)
	if final := alice.send(next.url, r2.RequestState, final2); !isRemoved(t, final, 1) {
		t.Fatalf("final round = %s", final.StructuredContent)
	}
	replays := map[string][2]any{
		"round 1": {state, withContent(answers, "agent_id", "someone-else")},
		"round 2": {r2.RequestState, withContent(final2, "reason", "another reason")},
	}
	for name, r := range replays {
		if res := alice.send(next.url, r[0].(string), r[1].(map[string]any)); !isRefusal(res) {
			t.Errorf("replayed %s state after completion with other answers = %+v, want the refusal", name, res)
		}
	}
}

// A state is accepted for StateTTL, then refused: the edge's clock is
// moved past the state's expiry rather than waited out.
func TestExpiredRequestStateIsRefused(t *testing.T) {
	t.Parallel()
	m := newMRTRMesh(t)
	m.startWorker(t)
	var skew atomic.Int64
	f := m.edge(t, func(c *edge.Config) {
		c.Elicitation.StateTTL = time.Second
		c.Elicitation.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	c := newConversation(t)
	r1 := c.send(f.url, "", nil)
	skew.Store(int64(time.Second + time.Millisecond))
	if res := c.send(f.url, r1.RequestState, c.answers(r1)); !isRefusal(res) {
		t.Errorf("expired state = %+v, want the refusal", res)
	}
	if m.backend.Executions("Purge") != 0 {
		t.Error("the call ran")
	}
}

// A client that repeats a finished call with the same idempotency key gets
// its result again, and the call does not run twice.
func TestRepeatedIdempotencyKeyGetsTheSameResult(t *testing.T) {
	t.Parallel()
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	m.backend.SeedNotes("victim", 4)
	a := newAnswerer(purgeSheet)
	cs := f.connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.handler})
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
	if got, want := string(structured(t, again)), string(structured(t, first)); got != want || !strings.Contains(want, `"removed":4`) {
		t.Errorf("repeated call = %s, want the first result %s", got, want)
	}
	if n := m.backend.Executions("Purge"); n != 1 || len(a.questions()) != 2 {
		t.Errorf("Purge ran %d times after %d questions, want once after 2", n, len(a.questions()))
	}
}
