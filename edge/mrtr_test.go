package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// The same elicited calls, driven by the go-sdk client at 2026-07-28
// (MRTR), by the go-sdk client at 2025-11-25 and 2025-06-18 (server-sent
// elicitation, every round) and by hand over raw HTTP, ask the same questions and end with the
// same result.
func TestEveryClientGetsTheSameQuestionsAndResult(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	cases := []struct {
		tool  string
		args  map[string]any
		sheet map[string]any
		want  []edgetest.Asked // the questions, by round
		data  string           // the final envelope's data
	}{
		{
			tool: "testing_purge", args: map[string]any{}, sheet: edgetest.PurgeSheet,
			want: []edgetest.Asked{
				{Message: "Purge notes needs more information: Agent id.", Fields: []string{"agent_id"}},
				{Message: "Purge notes is an administrative action. Confirm it and give a reason; both are recorded in the audit trail.\nArguments: {\"agent_id\":\"victim\"}", Fields: []string{"confirm", "reason"}},
			},
			data: `{"removed":2}`,
		},
		{
			tool: "testing_remind", args: map[string]any{"text": "stand up"}, sheet: edgetest.RemindSheet,
			want: []edgetest.Asked{
				{Message: "Plan a reminder needs more information: Every, Channel, Timezone.", Fields: []string{"channel", "every", "timezone"}},
				{Message: "Plan a reminder: please confirm.\nnext runs: 2030-01-01T11:00:00Z, 2030-01-01T13:00:00Z, 2030-01-01T15:00:00Z\nArguments: {\"channel\":\"CHANNEL_LOG\",\"every\":\"2h\",\"text\":\"stand up\"}", Fields: []string{"confirm"}},
			},
			data: `{"channel":"CHANNEL_LOG","count":1,"every":"2h","text":"stand up"}`,
		},
	}
	drivers := []struct {
		name string
		run  func(t *testing.T, f *edgetest.Fixture, tool string, args map[string]any, a *edgetest.Answerer) json.RawMessage
	}{
		{"go-sdk 2026-07-28", func(t *testing.T, f *edgetest.Fixture, tool string, args map[string]any, a *edgetest.Answerer) json.RawMessage {
			cs := f.Connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			return edgetest.Structured(t, res)
		}},
		{"go-sdk 2025-11-25", sessionDriver("2025-11-25")},
		{"go-sdk 2025-06-18", sessionDriver("2025-06-18")},
		{"raw HTTP", func(t *testing.T, f *edgetest.Fixture, tool string, args map[string]any, a *edgetest.Answerer) json.RawMessage {
			return rawCall(t, f.URL, tool, args, a).StructuredContent
		}},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			var first json.RawMessage
			for i, d := range drivers {
				t.Run(d.name, func(t *testing.T) {
					m.Backend.SeedNotes("victim", 2)
					// Each driver acts as an agent of its own, so results that
					// count per agent agree.
					f := m.Edge(t, func(c *edge.Config) { c.DevAgent = fmt.Sprintf("agent-%d", i) })
					a := edgetest.NewAnswerer(c.sheet)
					got := d.run(t, f, c.tool, c.args, a)
					if diff := cmp.Diff(c.want, a.Questions()); diff != "" {
						t.Errorf("questions asked (-want +got):\n%s", diff)
					}
					env := edgetest.EnvelopeJSON(t, got)
					if env.Status != "ok" || !edgetest.JsonEqual(string(env.Data), c.data) {
						t.Errorf("result = %s, want data %s", got, c.data)
					}
					if first == nil {
						first = got
					} else if !edgetest.JsonEqual(string(first), string(got)) {
						t.Errorf("result = %s, want what the first client got: %s", got, first)
					}
				})
			}
		})
	}
	if n := m.Backend.Executions("Purge"); n != len(drivers) {
		t.Errorf("Purge ran %d times, want once per client (%d)", n, len(drivers))
	}
	if n := m.Backend.Executions("Remind"); n != len(drivers) {
		t.Errorf("Remind ran %d times, want once per client (%d)", n, len(drivers))
	}
}

// sessionDriver runs an elicited call with the go-sdk client at a version
// of the session era, answering the server's elicitation requests.
func sessionDriver(version string) func(t *testing.T, f *edgetest.Fixture, tool string, args map[string]any, a *edgetest.Answerer) json.RawMessage {
	return func(t *testing.T, f *edgetest.Fixture, tool string, args map[string]any, a *edgetest.Answerer) json.RawMessage {
		cs := f.Connect(t, version, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return edgetest.Structured(t, res)
	}
}

// Clients that do not declare elicitation, of either era, are refused as
// before, with exactly what is missing named; nothing is started. So is a
// 2025-03-26 client, whose protocol has no elicitation, whatever it
// declares.
func TestClientsThatCannotElicitGetWhatIsMissingNamed(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	f := m.Edge(t, nil)
	asked := edgetest.NewAnswerer(edgetest.PurgeSheet)
	for _, v := range []string{edge.ModernProtocol, "2025-11-25", "2025-03-26"} {
		var opts *mcp.ClientOptions
		if v == "2025-03-26" {
			opts = &mcp.ClientOptions{ElicitationHandler: asked.Handler}
		}
		cs := f.Connect(t, v, "", opts)
		_, env := edgetest.CallEnv(t, cs, "testing_purge", map[string]any{"agent_id": "victim"})
		if env.DomainCode != "guardrail_violated" || env.Violation != "missing_confirm" || !strings.Contains(env.Message, "set confirm to true (the JSON boolean) and give a non-blank reason") {
			t.Errorf("%s: testing_purge without confirm and reason = %+v", v, env)
		}
		_, env = edgetest.CallEnv(t, cs, "testing_remind", map[string]any{"text": "x"})
		var fields []string
		for _, vi := range env.Violations {
			fields = append(fields, vi.Field)
		}
		if env.DomainCode != "invalid_argument" || !cmp.Equal(fields, []string{"every", "channel"}) {
			t.Errorf("%s: testing_remind without every and channel = %+v, want invalid_argument naming both", v, env)
		}
	}
	if m.Backend.Calls("Purge")+m.Backend.Calls("Remind") != 0 {
		t.Error("a refused call reached the service")
	}
	if q := asked.Questions(); len(q) != 0 {
		t.Errorf("the 2025-03-26 client was asked %v", q)
	}
}

// Declining or cancelling a question ends the call without its side
// effect, with a declined envelope, in either era.
func TestDeclineAndCancelEndTheCall(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, c := range []struct{ version, action string }{{edge.ModernProtocol, "decline"}, {"2025-11-25", "cancel"}} {
		a := edgetest.NewAnswerer(edgetest.PurgeSheet)
		a.Action = c.action
		cs := f.Connect(t, c.version, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_purge", Arguments: map[string]any{"agent_id": "victim"}})
		if err != nil {
			t.Fatal(err)
		}
		env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
		if !res.IsError || env.DomainCode != "declined" || env.ErrorType != "DeclinedError" || !strings.Contains(env.Message, "nothing was done") {
			t.Errorf("%s after %s: %+v", c.version, c.action, env)
		}
	}
	if n := m.Backend.Calls("Purge"); n != 0 {
		t.Errorf("Purge was called %d times after the user declined", n)
	}
}

// Answers are checked against the form that was asked; an answer that does
// not fit, or lacks a field, is asked again instead of reaching the service.
func TestAnswersThatDoNotFitAreAskedAgain(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	c := edgetest.NewConversation(t)
	c.Args = map[string]any{"agent_id": "victim"}
	r1 := c.Send(f.URL, "", nil)
	bad := map[string]any{"r1.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": "yes", "reason": "because"}}}
	r2 := c.Send(f.URL, r1.RequestState, bad)
	q, ok := r2.InputRequests["r2.admin"]
	if r2.ResultType != "input_required" || !ok || !strings.HasPrefix(q.Params.Message, "That answer does not fit:") {
		t.Fatalf("after an answer of the wrong type: %+v", r2)
	}
	missing := map[string]any{"r2.admin": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}
	r3 := c.Send(f.URL, r2.RequestState, missing)
	if q, ok := r3.InputRequests["r3.admin"]; !ok || !strings.HasPrefix(q.Params.Message, "Still needed: Reason.") {
		t.Fatalf("after an answer without a reason: %+v", r3)
	}
	m.Backend.SeedNotes("victim", 1)
	if final := c.Send(f.URL, r3.RequestState, c.Answers(r3)); !edgetest.IsRemoved(t, final, 1) {
		t.Errorf("final = %s", final.StructuredContent)
	}
}

// A call nobody answers is given up: its workflow fails as abandoned and
// operators find it by its status; its state is refused afterwards.
func TestAbandonedCallIsVisibleAsSuch(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, func(c *edge.Config) {
		c.Elicitation.StateTTL = time.Second
		c.Elicitation.AbandonAfter = 2 * time.Second
	})
	c := edgetest.NewConversation(t)
	r1 := c.Send(f.URL, "", nil)
	st, err := requeststate.Parse(r1.RequestState)
	if err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf("WorkflowId = '%s' AND %s = 'abandoned' AND %s = 'testing_purge'", st.WorkflowID, workflowcontract.SearchAttrStatus, workflowcontract.SearchAttrTool)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := m.Tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
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
	desc, err := m.Tc.DescribeWorkflow(context.Background(), st.WorkflowID, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if s := desc.RawResponse.GetExecutionConfig().GetUserMetadata().GetSummary(); s == nil {
		t.Error("the workflow has no summary for the UI")
	}
	if res := c.Send(f.URL, r1.RequestState, c.Answers(r1)); !isRefusal(res) {
		t.Errorf("state of an abandoned call = %+v, want the refusal", res)
	}
}

// Fields are asked for only when the arguments fall short for want of
// them: an optional elicitable field that is merely absent asks nothing,
// and arguments with other faults are refused at once, every fault named.
func TestOnlyMissingElicitableFieldsAreAsked(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	a := edgetest.NewAnswerer(edgetest.RemindSheet)
	cs := f.Connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})

	_, env := edgetest.CallEnv(t, cs, "testing_remind", map[string]any{"text": "stand up", "every": "2h", "channel": "CHANNEL_LOG"})
	if env.Status != "ok" || len(a.Questions()) != 0 {
		t.Errorf("complete arguments without the optional timezone: %+v after %d questions, want ok without any", env, len(a.Questions()))
	}
	_, env = edgetest.CallEnv(t, cs, "testing_remind", map[string]any{"every": "2h"})
	var fields []string
	for _, v := range env.Violations {
		fields = append(fields, v.Field)
	}
	if env.DomainCode != "invalid_argument" || !cmp.Equal(fields, []string{"text", "channel"}) || len(a.Questions()) != 0 {
		t.Errorf("text missing (not elicitable) and channel missing: %+v after %d questions, want invalid_argument naming both, no question", env, len(a.Questions()))
	}
	if n := m.Backend.Executions("Remind"); n != 1 {
		t.Errorf("Remind ran %d times, want once", n)
	}
}

// With Temporal unreachable, a call that would ask answers unavailable (and
// calls that need no question are served as usual).
func TestUnreachableTemporalAnswersUnavailable(t *testing.T) {
	t.Parallel()
	tc, err := temporalclient.NewLazy(temporalclient.Config{HostPort: "127.0.0.1:1"}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	key, _ := requeststate.GenerateKey()
	sealer, _ := requeststate.NewSealer(key)
	f := edgetest.NewFixture(t, func(c *edge.Config) {
		// Long enough for the call that asks nothing, however loaded the
		// machine; the unreachable Temporal answers within it.
		c.CallTimeout = 3 * time.Second
		c.Elicitation = &edge.Elicitation{Temporal: tc, States: sealer}
	})
	c := edgetest.NewConversation(t)
	res := c.Send(f.URL, "", nil)
	env := edgetest.EnvelopeJSON(t, res.StructuredContent)
	if env.DomainCode != "unavailable" || !strings.Contains(env.Message, "retry") {
		t.Errorf("round 1 without Temporal = %+v, want unavailable", env)
	}
	cs := f.Connect(t, edge.ModernProtocol, "", nil)
	if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "hi"}); env.Status != "ok" {
		t.Errorf("a call that asks nothing = %+v", env)
	}
}

// TestSessionAdminCallAsksOverTheSession: a session's call of an
// administrative tool asks for its confirmation on the call's own stream,
// which the SDK keeps; the session fast path leaves such calls to it.
func TestSessionAdminCallAsksOverTheSession(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, v := range []string{"2025-11-25", "2025-06-18"} {
		a := edgetest.NewAnswerer(edgetest.PurgeSheet)
		cs := f.Connect(t, v, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_grant", Arguments: map[string]any{"agent_id": "grantee-" + v, "amount": 5}})
		if err != nil {
			t.Fatal(err)
		}
		if env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res)); env.Status != "ok" || !edgetest.JsonEqual(string(env.Data), `{"balance":"5"}`) {
			t.Errorf("%s: testing_grant = %+v, want the grant made", v, env)
		}
		if q := a.Questions(); len(q) != 1 || !slices.Equal(q[0].Fields, []string{"confirm", "reason"}) {
			t.Errorf("%s: asked %+v, want the confirmation once", v, q)
		}
	}
	if n := len(f.Logs.Events("mcp.session_call_served")); n != 0 {
		t.Errorf("the session fast path served %d administrative calls", n)
	}
}
