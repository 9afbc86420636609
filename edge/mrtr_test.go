package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// The sheets the test user answers from.
var (
	purgeSheet  = map[string]any{"agent_id": "victim", "confirm": true, "reason": "cleanup after the test"}
	remindSheet = map[string]any{"every": "2h", "channel": "CHANNEL_LOG", "confirm": true}
)

// The same elicited calls, driven by the go-sdk client at 2026-07-28
// (MRTR), by the go-sdk client at 2025-11-25 and 2025-06-18 (server-sent
// elicitation, every round) and by hand over raw HTTP, ask the same questions and end with the
// same result.
func TestEveryClientGetsTheSameQuestionsAndResult(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	cases := []struct {
		tool  string
		args  map[string]any
		sheet map[string]any
		want  []asked // the questions, by round
		data  string  // the final envelope's data
	}{
		{
			tool: "testing_purge", args: map[string]any{}, sheet: purgeSheet,
			want: []asked{
				{Message: "Purge notes needs more information: Agent id.", Fields: []string{"agent_id"}},
				{Message: "Purge notes is an administrative action. Confirm it and give a reason; both are recorded in the audit trail.\nArguments: {\"agent_id\":\"victim\"}", Fields: []string{"confirm", "reason"}},
			},
			data: `{"removed":2}`,
		},
		{
			tool: "testing_remind", args: map[string]any{"text": "stand up"}, sheet: remindSheet,
			want: []asked{
				{Message: "Plan a reminder needs more information: Every, Channel, Timezone.", Fields: []string{"channel", "every", "timezone"}},
				{Message: "Plan a reminder: please confirm.\nnext runs: 2030-01-01T11:00:00Z, 2030-01-01T13:00:00Z, 2030-01-01T15:00:00Z\nArguments: {\"channel\":\"CHANNEL_LOG\",\"every\":\"2h\",\"text\":\"stand up\"}", Fields: []string{"confirm"}},
			},
			data: `{"channel":"CHANNEL_LOG","count":1,"every":"2h","text":"stand up"}`,
		},
	}
	drivers := []struct {
		name string
		run  func(t *testing.T, f *fixture, tool string, args map[string]any, a *answerer) json.RawMessage
	}{
		{"go-sdk 2026-07-28", func(t *testing.T, f *fixture, tool string, args map[string]any, a *answerer) json.RawMessage {
			cs := f.connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.handler})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			return structured(t, res)
		}},
		{"go-sdk 2025-11-25", sessionDriver("2025-11-25")},
		{"go-sdk 2025-06-18", sessionDriver("2025-06-18")},
		{"raw HTTP", func(t *testing.T, f *fixture, tool string, args map[string]any, a *answerer) json.RawMessage {
			return rawCall(t, f.url, tool, args, a).StructuredContent
		}},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			var first json.RawMessage
			for i, d := range drivers {
				t.Run(d.name, func(t *testing.T) {
					m.backend.SeedNotes("victim", 2)
					// Each driver acts as an agent of its own, so results that
					// count per agent agree.
					f := m.edge(t, func(c *edge.Config) { c.DevAgent = fmt.Sprintf("agent-%d", i) })
					a := newAnswerer(c.sheet)
					got := d.run(t, f, c.tool, c.args, a)
					if diff := cmp.Diff(c.want, a.questions()); diff != "" {
						t.Errorf("questions asked (-want +got):\n%s", diff)
					}
					env := envelopeJSON(t, got)
					if env.Status != "ok" || !jsonEqual(string(env.Data), c.data) {
						t.Errorf("result = %s, want data %s", got, c.data)
					}
					if first == nil {
						first = got
					} else if !jsonEqual(string(first), string(got)) {
						t.Errorf("result = %s, want what the first client got: %s", got, first)
					}
				})
			}
		})
	}
	if n := m.backend.Executions("Purge"); n != len(drivers) {
		t.Errorf("Purge ran %d times, want once per client (%d)", n, len(drivers))
	}
	if n := m.backend.Executions("Remind"); n != len(drivers) {
		t.Errorf("Remind ran %d times, want once per client (%d)", n, len(drivers))
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}

// conversation drives testing_purge by hand, one round at a time.
type conversation struct {
	t     *testing.T
	tool  string
	args  map[string]any
	a     *answerer
	id    int
	extra http.Header
}

func newConversation(t *testing.T) *conversation {
	return &conversation{t: t, tool: "testing_purge", args: map[string]any{}, a: newAnswerer(purgeSheet)}
}

// send sends one round (state "" starts the call) to url.
func (c *conversation) send(url, state string, responses map[string]any) rawResult {
	c.id++
	return rawRound(c.t, url, c.tool, c.id, c.args, state, responses, c.extra)
}

// answers are the answerer's responses to a round's questions.
func (c *conversation) answers(res rawResult) map[string]any {
	c.t.Helper()
	if res.ResultType != "input_required" {
		c.t.Fatalf("result = %+v, want input_required", res)
	}
	out := map[string]any{}
	for key, ir := range res.InputRequests {
		var schema any
		_ = json.Unmarshal(ir.Params.RequestedSchema, &schema)
		action, content := c.a.answer(ir.Params.Message, schema)
		out[key] = map[string]any{"action": action, "content": content}
	}
	return out
}

// toFinal drives the call up to its last round at url and returns the
// state and the answers of that round, unsent.
func (c *conversation) toFinal(url string) (string, map[string]any) {
	c.t.Helper()
	r1 := c.send(url, "", nil)
	r2 := c.send(url, r1.RequestState, c.answers(r1))
	if len(r2.InputRequests) != 1 || r2.InputRequests["r2.admin"].Method == "" {
		c.t.Fatalf("round 2 = %+v, want the admin confirmation", r2)
	}
	return r2.RequestState, c.answers(r2)
}

// refusedState is the one answer to an unusable requestState.
const refusedState = `{"status":"error","tool":"testing_purge","error_type":"ArgumentValidationError","domain_code":"invalid_argument","message":"requestState: not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over","violations":[{"field":"requestState","rule":"request_state","message":"not valid for this call (expired, already used, altered, or issued for another call); call the tool again without requestState to start over"}]}`

func isRefusal(res rawResult) bool {
	return res.ResultType == "complete" && res.IsError && string(res.StructuredContent) == refusedState
}

func isRemoved(t *testing.T, res rawResult, n int) bool {
	t.Helper()
	env := envelopeJSON(t, res.StructuredContent)
	return res.ResultType == "complete" && env.Status == "ok" && string(env.Data) == fmt.Sprintf(`{"removed":%d}`, n)
}

// The side effect of an elicited call happens once, whatever the clients,
// edges and workers do between and during its rounds.
func TestElicitedSideEffectRunsExactlyOnce(t *testing.T) {
	m := newMRTRMesh(t)

	t.Run("duplicate final round", func(t *testing.T) {
		m.startWorker(t)
		before := m.backend.Executions("Purge")
		m.backend.SeedNotes("victim", 3)
		f := m.edge(t, nil)
		c := newConversation(t)
		state, answers := c.toFinal(f.url)
		if first := c.send(f.url, state, answers); !isRemoved(t, first, 3) {
			t.Fatalf("final round = %+v", first)
		}
		if again := c.send(f.url, state, answers); !isRefusal(again) {
			t.Errorf("repeated final round = %s, want the refusal", again.StructuredContent)
		}
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	})

	t.Run("three concurrent final rounds", func(t *testing.T) {
		m.startWorker(t)
		before := m.backend.Executions("Purge")
		m.backend.SeedNotes("victim", 3)
		f := m.edge(t, nil)
		c := newConversation(t)
		state, answers := c.toFinal(f.url)
		results := make([]rawResult, 3)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = rawRound(t, f.url, c.tool, 100+i, c.args, state, answers, nil) })
		}
		wg.Wait()
		ok, refused := 0, 0
		for _, r := range results {
			switch {
			case isRemoved(t, r, 3):
				ok++
			case isRefusal(r):
				refused++
			default:
				t.Errorf("concurrent final round = %s", r.StructuredContent)
			}
		}
		if ok != 1 || refused != 2 {
			t.Errorf("concurrent final rounds: %d results, %d refusals; want 1 and 2", ok, refused)
		}
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	})

	t.Run("round 2 taken by a second edge", func(t *testing.T) {
		m.startWorker(t)
		before := m.backend.Executions("Purge")
		m.backend.SeedNotes("victim", 3)
		a, b := m.edge(t, nil), m.edge(t, nil)
		c := newConversation(t)
		r1 := c.send(a.url, "", nil)
		r2 := c.send(b.url, r1.RequestState, c.answers(r1))
		if final := c.send(a.url, r2.RequestState, c.answers(r2)); !isRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	})

	t.Run("worker killed between rounds", func(t *testing.T) {
		before := m.backend.Executions("Purge")
		m.backend.SeedNotes("victim", 3)
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
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	})

	t.Run("edge killed between rounds", func(t *testing.T) {
		m.startWorker(t)
		before := m.backend.Executions("Purge")
		m.backend.SeedNotes("victim", 3)
		a, aURL := m.startEdgeProcess(t)
		c := newConversation(t)
		r1 := c.send(aURL, "", nil)
		killProcess(t, a)
		_, bURL := m.startEdgeProcess(t)
		r2 := c.send(bURL, r1.RequestState, c.answers(r1))
		if final := c.send(bURL, r2.RequestState, c.answers(r2)); !isRemoved(t, final, 3) {
			t.Errorf("final round = %s", final.StructuredContent)
		}
		if n := m.backend.Executions("Purge") - before; n != 1 {
			t.Errorf("Purge ran %d times, want once", n)
		}
	})
}

// Every unusable requestState is refused, each the same way, and logged at
// the request_state boundary; a refused attempt does not spend the state.
func TestRequestStateRefusals(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	iss := newIssuer(t)
	f := m.edge(t, func(c *edge.Config) { c.Auth = iss.authConfig(t) })
	token := func(subject string) http.Header {
		tok := iss.sign(t, jose.RS256, iss.valid(resourceFor(f.http), subject, "toolmesh:admin toolmesh:write"))
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
		if !res.IsError || res.ResultType != "complete" {
			t.Errorf("%s: result = %+v, want refused", at.name, res)
			continue
		}
		refusals = append(refusals, strings.ReplaceAll(string(res.StructuredContent), c.tool, "TOOL"))
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
		c.Auth = iss.authConfig(t)
		c.Elicitation.States = retired
	})
	tokenFor := func(fx *fixture) http.Header {
		tok := iss.sign(t, jose.RS256, iss.valid(resourceFor(fx.http), "alice", "toolmesh:admin toolmesh:write"))
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	alice.extra = tokenFor(oldEdge)
	if res := alice.send(oldEdge.url, state, answers); !res.IsError || strings.ReplaceAll(string(res.StructuredContent), alice.tool, "TOOL") != refusals[0] {
		t.Errorf("state of a retired key = %s, want the refusal", res.StructuredContent)
	}

	// The state was never spent: alice answers with it now, on an edge
	// whose previous key signed it, and the call goes on.
	next := m.edge(t, func(c *edge.Config) {
		c.Auth = iss.authConfig(t)
		c.Elicitation.States = rotated
	})
	alice.extra = tokenFor(next)
	r2 := alice.send(next.url, state, answers)
	if r2.ResultType != "input_required" || r2.InputRequests["r2.admin"].Method == "" {
		t.Fatalf("round 2 after the refusals = %+v, want the admin question", r2)
	}
	// Replay after completion: both states of the finished call are refused.
	m.backend.SeedNotes("victim", 1)
	if final := alice.send(next.url, r2.RequestState, alice.answers(r2)); !isRemoved(t, final, 1) {
		t.Fatalf("final round = %s", final.StructuredContent)
	}
	for name, s := range map[string]string{"round 1": state, "round 2": r2.RequestState} {
		if res := alice.send(next.url, s, answers); !isRefusal(res) {
			t.Errorf("replayed %s state after completion = %s, want the refusal", name, res.StructuredContent)
		}
	}
}

// A state is accepted for StateTTL, then refused.
func TestExpiredRequestStateIsRefused(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, func(c *edge.Config) { c.Elicitation.StateTTL = time.Second })
	c := newConversation(t)
	r1 := c.send(f.url, "", nil)
	time.Sleep(2100 * time.Millisecond)
	if res := c.send(f.url, r1.RequestState, c.answers(r1)); !isRefusal(res) {
		t.Errorf("expired state = %s, want the refusal", res.StructuredContent)
	}
	if m.backend.Executions("Purge") != 0 {
		t.Error("the call ran")
	}
}

// sessionDriver runs an elicited call with the go-sdk client at a version
// of the session era, answering the server's elicitation requests.
func sessionDriver(version string) func(t *testing.T, f *fixture, tool string, args map[string]any, a *answerer) json.RawMessage {
	return func(t *testing.T, f *fixture, tool string, args map[string]any, a *answerer) json.RawMessage {
		cs := f.connect(t, version, "", &mcp.ClientOptions{ElicitationHandler: a.handler})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return structured(t, res)
	}
}

// Clients that do not declare elicitation, of either era, are refused as
// before, with exactly what is missing named; nothing is started. So is a
// 2025-03-26 client, whose protocol has no elicitation, whatever it
// declares.
func TestClientsThatCannotElicitGetWhatIsMissingNamed(t *testing.T) {
	m := newMRTRMesh(t)
	f := m.edge(t, nil)
	asked := newAnswerer(purgeSheet)
	for _, v := range []string{edge.ModernProtocol, "2025-11-25", "2025-03-26"} {
		var opts *mcp.ClientOptions
		if v == "2025-03-26" {
			opts = &mcp.ClientOptions{ElicitationHandler: asked.handler}
		}
		cs := f.connect(t, v, "", opts)
		_, env := callEnv(t, cs, "testing_purge", map[string]any{"agent_id": "victim"})
		if env.DomainCode != "guardrail_violated" || env.Violation != "missing_confirm" || !strings.Contains(env.Message, "set confirm to true (the JSON boolean) and give a non-blank reason") {
			t.Errorf("%s: testing_purge without confirm and reason = %+v", v, env)
		}
		_, env = callEnv(t, cs, "testing_remind", map[string]any{"text": "x"})
		var fields []string
		for _, vi := range env.Violations {
			fields = append(fields, vi.Field)
		}
		if env.DomainCode != "invalid_argument" || !cmp.Equal(fields, []string{"every", "channel"}) {
			t.Errorf("%s: testing_remind without every and channel = %+v, want invalid_argument naming both", v, env)
		}
	}
	if m.backend.Calls("Purge")+m.backend.Calls("Remind") != 0 {
		t.Error("a refused call reached the service")
	}
	if q := asked.questions(); len(q) != 0 {
		t.Errorf("the 2025-03-26 client was asked %v", q)
	}
}

// Declining or cancelling a question ends the call without its side
// effect, with a declined envelope, in either era.
func TestDeclineAndCancelEndTheCall(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	for _, c := range []struct{ version, action string }{{edge.ModernProtocol, "decline"}, {"2025-11-25", "cancel"}} {
		a := newAnswerer(purgeSheet)
		a.action = c.action
		cs := f.connect(t, c.version, "", &mcp.ClientOptions{ElicitationHandler: a.handler})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_purge", Arguments: map[string]any{"agent_id": "victim"}})
		if err != nil {
			t.Fatal(err)
		}
		env := envelopeJSON(t, structured(t, res))
		if !res.IsError || env.DomainCode != "declined" || env.ErrorType != "DeclinedError" || !strings.Contains(env.Message, "nothing was done") {
			t.Errorf("%s after %s: %+v", c.version, c.action, env)
		}
	}
	if n := m.backend.Calls("Purge"); n != 0 {
		t.Errorf("Purge was called %d times after the user declined", n)
	}
}

// Answers are checked against the form that was asked; an answer that does
// not fit, or lacks a field, is asked again instead of reaching the service.
func TestAnswersThatDoNotFitAreAskedAgain(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	c := newConversation(t)
	c.args = map[string]any{"agent_id": "victim"}
	r1 := c.send(f.url, "", nil)
	bad := map[string]any{"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": "yes", "reason": "because"}}}
	r2 := c.send(f.url, r1.RequestState, bad)
	q, ok := r2.InputRequests["r2.admin"]
	if r2.ResultType != "input_required" || !ok || !strings.HasPrefix(q.Params.Message, "That answer does not fit:") {
		t.Fatalf("after an answer of the wrong type: %+v", r2)
	}
	missing := map[string]any{"r2.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}
	r3 := c.send(f.url, r2.RequestState, missing)
	if q, ok := r3.InputRequests["r3.admin"]; !ok || !strings.HasPrefix(q.Params.Message, "Still needed: Reason.") {
		t.Fatalf("after an answer without a reason: %+v", r3)
	}
	m.backend.SeedNotes("victim", 1)
	if final := c.send(f.url, r3.RequestState, c.answers(r3)); !isRemoved(t, final, 1) {
		t.Errorf("final = %s", final.StructuredContent)
	}
}

// A call nobody answers is given up: its workflow fails as abandoned and
// operators find it by its status; its state is refused afterwards.
func TestAbandonedCallIsVisibleAsSuch(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, func(c *edge.Config) {
		c.Elicitation.StateTTL = time.Second
		c.Elicitation.AbandonAfter = 2 * time.Second
	})
	c := newConversation(t)
	r1 := c.send(f.url, "", nil)
	st, err := requeststate.Parse(r1.RequestState)
	if err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf("WorkflowId = '%s' AND %s = 'abandoned' AND %s = 'testing_purge'", st.WorkflowID, workflowcontract.SearchAttrStatus, workflowcontract.SearchAttrTool)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := m.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetExecutions()) == 1 {
			if s := resp.GetExecutions()[0].GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
				t.Errorf("abandoned workflow status = %s, want failed", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no workflow matches %q", query)
		}
		time.Sleep(200 * time.Millisecond)
	}
	desc, err := m.tc.DescribeWorkflowExecution(context.Background(), st.WorkflowID, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if s := desc.GetExecutionConfig().GetUserMetadata().GetSummary(); s == nil {
		t.Error("the workflow has no summary for the UI")
	}
	if res := c.send(f.url, r1.RequestState, c.answers(r1)); !isRefusal(res) {
		t.Errorf("state of an abandoned call = %s, want the refusal", res.StructuredContent)
	}
}

// A client that repeats a finished call with the same idempotency key gets
// its result again, and the call does not run twice.
func TestRepeatedIdempotencyKeyGetsTheSameResult(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	m.backend.SeedNotes("victim", 4)
	a := newAnswerer(purgeSheet)
	cs := f.connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.handler})
	params := &mcp.CallToolParams{Name: "testing_purge", Arguments: map[string]any{}, Meta: mcp.Meta{edge.MetaIdempotencyKey: "purge-victim-1"}}
	first, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	params.Meta = mcp.Meta{edge.MetaIdempotencyKey: "purge-victim-1"}
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

// Fields are asked for only when the arguments fall short for want of
// them: an optional elicitable field that is merely absent asks nothing,
// and arguments with other faults are refused at once, every fault named.
func TestOnlyMissingElicitableFieldsAreAsked(t *testing.T) {
	m := newMRTRMesh(t)
	m.startWorker(t)
	f := m.edge(t, nil)
	a := newAnswerer(remindSheet)
	cs := f.connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.handler})

	_, env := callEnv(t, cs, "testing_remind", map[string]any{"text": "stand up", "every": "2h", "channel": "CHANNEL_LOG"})
	if env.Status != "ok" || len(a.questions()) != 0 {
		t.Errorf("complete arguments without the optional timezone: %+v after %d questions, want ok without any", env, len(a.questions()))
	}
	_, env = callEnv(t, cs, "testing_remind", map[string]any{"every": "2h"})
	var fields []string
	for _, v := range env.Violations {
		fields = append(fields, v.Field)
	}
	if env.DomainCode != "invalid_argument" || !cmp.Equal(fields, []string{"text", "channel"}) || len(a.questions()) != 0 {
		t.Errorf("text missing (not elicitable) and channel missing: %+v after %d questions, want invalid_argument naming both, no question", env, len(a.questions()))
	}
	if n := m.backend.Executions("Remind"); n != 1 {
		t.Errorf("Remind ran %d times, want once", n)
	}
}

// With Temporal unreachable, a call that would ask answers unavailable (and
// calls that need no question are served as usual).
func TestUnreachableTemporalAnswersUnavailable(t *testing.T) {
	tc, err := temporalclient.NewLazy(temporalclient.Config{HostPort: "127.0.0.1:1"}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	key, _ := requeststate.GenerateKey()
	sealer, _ := requeststate.NewSealer(key)
	f := newFixture(t, func(c *edge.Config) {
		c.CallTimeout = 200 * time.Millisecond
		c.Elicitation = &edge.Elicitation{Temporal: tc, States: sealer}
	})
	c := newConversation(t)
	res := c.send(f.url, "", nil)
	env := envelopeJSON(t, res.StructuredContent)
	if env.DomainCode != "unavailable" || !strings.Contains(env.Message, "retry") {
		t.Errorf("round 1 without Temporal = %+v, want unavailable", env)
	}
	cs := f.connect(t, edge.ModernProtocol, "", nil)
	if _, env := callEnv(t, cs, "testing_echo", map[string]any{"message": "hi"}); env.Status != "ok" {
		t.Errorf("a call that asks nothing = %+v", env)
	}
}
