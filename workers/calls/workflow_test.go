package calls_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

const digest = "sha256:feed"

// adminSchema is the form the edge sends for the admin inputs.
func adminSchema(t *testing.T) *structpb.Struct {
	return mustStruct(t, map[string]any{
		"type": "object",
		"properties": map[string]any{
			"confirm": map[string]any{"type": "boolean", "title": "Confirm"},
			"reason":  map[string]any{"type": "string", "title": "Reason", "minLength": 1, "maxLength": 500},
		},
		"required": []any{"confirm", "reason"},
	})
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// purgeInput is testing_purge called without agent_id, confirm or reason.
func purgeInput(t *testing.T) *callsv1.ElicitedCallInput {
	return &callsv1.ElicitedCallInput{
		Tool:            "testing_purge",
		Title:           "Purge notes",
		Admin:           true,
		Caller:          &callsv1.Caller{Subject: "alice", Agent: "agent-1", Roles: []string{"owner"}},
		Arguments:       `{}`,
		ArgumentsDigest: digest,
		Steps: []*callsv1.Step{
			{Kind: callsv1.StepKind_STEP_KIND_FIELDS, Fields: []string{"agent_id"}, RequestedSchema: mustStruct(t, map[string]any{
				"type":       "object",
				"properties": map[string]any{"agent_id": map[string]any{"type": "string", "title": "Agent id", "minLength": 1, "maxLength": 64}},
				"required":   []any{"agent_id"},
			})},
			{Kind: callsv1.StepKind_STEP_KIND_ADMIN, Fields: []string{"confirm", "reason"}, RequestedSchema: adminSchema(t)},
		},
		RoundTimeout: durationpb.New(10 * time.Minute),
	}
}

// remindInput is testing_remind called with only a text.
func remindInput(t *testing.T) *callsv1.ElicitedCallInput {
	return &callsv1.ElicitedCallInput{
		Tool:            "testing_remind",
		Title:           "Plan a reminder",
		Caller:          &callsv1.Caller{Subject: "alice", Agent: "agent-1"},
		Arguments:       `{"text":"stand up"}`,
		ArgumentsDigest: digest,
		Steps: []*callsv1.Step{
			{Kind: callsv1.StepKind_STEP_KIND_FIELDS, Fields: []string{"every", "channel"}, RequestedSchema: mustStruct(t, map[string]any{
				"type": "object",
				"properties": map[string]any{
					"every": map[string]any{"type": "string", "title": "Every", "maxLength": 8},
					"channel": map[string]any{"type": "string", "title": "Channel", "oneOf": []any{
						map[string]any{"const": "CHANNEL_LOG", "title": "Log"},
						map[string]any{"const": "CHANNEL_WEBHOOK", "title": "Webhook"},
					}},
				},
				"required": []any{"every", "channel"},
			})},
			{Kind: callsv1.StepKind_STEP_KIND_PREVIEW, PreviewTool: "testing_remind_preview"},
		},
		RoundTimeout: durationpb.New(10 * time.Minute),
	}
}

// harness runs one ElicitedCall in the test suite with fake activities.
type harness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu       sync.Mutex
	invokes  []*callsv1.InvokeInput
	previews []*callsv1.InvokeInput
	statuses []string
	invoke   func(*callsv1.InvokeInput) string // envelope
	// invokeActivity, when set, runs instead of invoke.
	invokeActivity func(context.Context, *callsv1.InvokeInput) (*callsv1.InvokeOutput, error)
	preview        func(*callsv1.InvokeInput) string
	// extensions are the extensions recorded in the audit trail.
	extensions []*callsv1.ExtendTaskUpdate
	// endVisits are the visits the service was told ended.
	endVisits []*callsv1.EndVisitInput
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, env: workflowtest.NewEnv()}
	h.env.SetStartWorkflowOptions(testStartOptions())
	h.env.RegisterWorkflowWithOptions(calls.ElicitedCall, workflow.RegisterOptions{Name: calls.Contract().Name})
	h.invoke = func(*callsv1.InvokeInput) string { return `{"status":"ok","data":{"removed":2}}` }
	h.preview = func(*callsv1.InvokeInput) string {
		return `{"status":"ok","data":{"next_runs":["2030-01-01T11:00:00Z","2030-01-01T13:00:00Z","2030-01-01T15:00:00Z","2030-01-01T17:00:00Z"]}}`
	}
	h.env.RegisterActivityWithOptions(func(ctx context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		h.mu.Lock()
		h.invokes = append(h.invokes, in)
		h.mu.Unlock()
		if h.invokeActivity != nil {
			return h.invokeActivity(ctx, in)
		}
		return &callsv1.InvokeOutput{Envelope: h.invoke(in)}, nil
	}, activity.RegisterOptions{Name: calls.ActivityInvoke})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		h.mu.Lock()
		h.previews = append(h.previews, in)
		h.mu.Unlock()
		return &callsv1.InvokeOutput{Envelope: h.preview(in)}, nil
	}, activity.RegisterOptions{Name: calls.ActivityPreview})
	h.env.RegisterActivityWithOptions(func(_ context.Context, up *callsv1.ExtendTaskUpdate) error {
		h.mu.Lock()
		h.extensions = append(h.extensions, up)
		h.mu.Unlock()
		return nil
	}, activity.RegisterOptions{Name: calls.ActivityRecordExtension})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in *callsv1.EndVisitInput) error {
		h.mu.Lock()
		h.endVisits = append(h.endVisits, in)
		h.mu.Unlock()
		return nil
	}, activity.RegisterOptions{Name: calls.ActivityEndVisit})
	workflowtest.OnStatus(h.env, func(status string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.statuses = append(h.statuses, status)
	})
	return h
}

func testStartOptions() client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: "call/testing_purge/0123456789abcdef0123456789abcdef"}
}

// outcome is what one update got.
type outcome struct {
	rejected error
	result   *callsv1.RoundResult
	err      error
}

// round sends the update of round r with answers after delay, recording
// its outcome into *out.
func (h *harness) round(delay time.Duration, r int32, digest string, answers map[string]*callsv1.Answer, out *outcome) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(calls.RoundUpdate().Name, fmt.Sprintf("u-%d-%s", r, delay), &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { out.rejected = err },
			OnComplete: func(v any, err error) {
				out.err = err
				if err == nil {
					out.result = v.(*callsv1.RoundResult)
				}
			},
		}, &callsv1.RoundRequest{Round: r, ArgumentsDigest: digest, Answers: answers})
	}, delay)
}

func (h *harness) run(in *callsv1.ElicitedCallInput) {
	h.env.ExecuteWorkflow(calls.Contract().Name, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
}

// purgeAtOnce runs a purge whose arguments are complete, so it needs no
// round of questions, and returns its result.
func (h *harness) purgeAtOnce() toolcall.Envelope {
	h.t.Helper()
	in := purgeInput(h.t)
	in.Arguments = `{"agent_id":"agent-9","confirm":true,"reason":"r"}`
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.run(in)
	return envelopeOf(h.t, o0)
}

func accept(t *testing.T, content map[string]any) *callsv1.Answer {
	return &callsv1.Answer{Action: callsv1.Action_ACTION_ACCEPT, Content: mustStruct(t, content)}
}

func question(t *testing.T, o outcome, round int32, key string) *callsv1.Question {
	t.Helper()
	if o.rejected != nil || o.err != nil || o.result == nil {
		t.Fatalf("round: rejected %v, failed %v, result %v; want questions of round %d", o.rejected, o.err, o.result, round)
	}
	if o.result.GetRound() != round || len(o.result.GetQuestions()) != 1 || o.result.GetQuestions()[0].GetKey() != key {
		t.Fatalf("round result = %v, want round %d asking %s", o.result, round, key)
	}
	return o.result.GetQuestions()[0]
}

func envelopeOf(t *testing.T, o outcome) toolcall.Envelope {
	t.Helper()
	if o.rejected != nil || o.err != nil || o.result == nil || o.result.GetEnvelope() == "" {
		t.Fatalf("final round: rejected %v, failed %v, result %v; want an envelope", o.rejected, o.err, o.result)
	}
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(o.result.GetEnvelope()), &env); err != nil {
		t.Fatal(err)
	}
	return env
}

func properties(q *callsv1.Question) []string {
	var names []string
	for k := range q.GetRequestedSchema().GetFields()["properties"].GetStructValue().GetFields() {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// An admin call missing an elicitable field: the field first, then the
// confirmation showing the completed arguments, then the side effect once,
// with the gathered arguments and the key derived from the workflow id.
func TestFieldsThenAdminThenTheSideEffectOnce(t *testing.T) {
	h := newHarness(t)
	var o0, o1, o2 outcome
	h.round(0, 0, digest, nil, &o0)
	h.round(time.Minute, 1, digest, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}, &o1)
	h.round(2*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "cleanup"})}, &o2)
	h.run(purgeInput(t))

	if q := question(t, o0, 1, "r1.fields"); !slices.Equal(properties(q), []string{"agent_id"}) || !strings.Contains(q.GetMessage(), "Agent id") {
		t.Errorf("round 1 asks %v: %q", properties(q), q.GetMessage())
	}
	q := question(t, o1, 2, "r2.admin")
	if !slices.Equal(properties(q), []string{"confirm", "reason"}) || !strings.Contains(q.GetMessage(), `{"agent_id":"agent-9"}`) {
		t.Errorf("round 2 asks %v: %q; want confirm and reason, showing the arguments", properties(q), q.GetMessage())
	}
	if env := envelopeOf(t, o2); env.Status != "ok" {
		t.Errorf("final envelope = %+v", env)
	}
	if len(h.invokes) != 1 {
		t.Fatalf("side effect ran %d times, want once", len(h.invokes))
	}
	in := h.invokes[0]
	if want := `{"agent_id":"agent-9","confirm":true,"reason":"cleanup"}`; in.GetArguments() != want || !in.GetAudit() ||
		in.GetIdempotencyKey() != "call:testing_purge:0123456789abcdef0123456789abcdef" || in.GetCaller().GetSubject() != "alice" {
		t.Errorf("invoke input = %v; want the gathered arguments %s, audit, the derived key, alice", in, want)
	}
	var res callsv1.RoundResult
	if err := h.env.GetWorkflowResult(&res); err != nil || res.GetEnvelope() != o2.result.GetEnvelope() {
		t.Errorf("workflow result = %v, %v; want the final envelope", &res, err)
	}
	if want := []string{"waiting", "succeeded"}; !slices.Equal(h.statuses, want) {
		t.Errorf("statuses = %v, want %v", h.statuses, want)
	}
}

// A missing answer, a blank reason and an answer of the wrong type are asked
// again, each as a new round that says why and asks only what is still
// missing; nothing runs until the answers are complete.
func TestIncompleteAnswersAreAskedAgain(t *testing.T) {
	h := newHarness(t)
	in := purgeInput(t)
	in.Arguments = `{"agent_id":"agent-9"}`
	var o [5]outcome
	h.round(0, 0, digest, nil, &o[0])
	h.round(1*time.Minute, 1, digest, map[string]*callsv1.Answer{"r0.admin": accept(t, map[string]any{"confirm": true, "reason": "x"})}, &o[1])
	h.round(2*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "   "})}, &o[2])
	h.round(3*time.Minute, 3, digest, map[string]*callsv1.Answer{"r3.admin": accept(t, map[string]any{"reason": 42})}, &o[3])
	h.round(4*time.Minute, 4, digest, map[string]*callsv1.Answer{"r4.admin": accept(t, map[string]any{"reason": "ok"})}, &o[4])
	h.run(in)

	question(t, o[0], 1, "r1.admin")
	if q := question(t, o[1], 2, "r2.admin"); !strings.HasPrefix(q.GetMessage(), "No answer was given.") || !slices.Equal(properties(q), []string{"confirm", "reason"}) {
		t.Errorf("re-asked question = %v %q, want both inputs and that no answer was given", properties(q), q.GetMessage())
	}
	q := question(t, o[2], 3, "r3.admin")
	if !strings.HasPrefix(q.GetMessage(), "Still needed: Reason.") || !slices.Equal(properties(q), []string{"reason"}) {
		t.Errorf("re-asked question = %v %q, want the blank reason alone (the confirmation is kept)", properties(q), q.GetMessage())
	}
	if !strings.Contains(q.GetMessage(), `Arguments: {"agent_id":"agent-9"}`) {
		t.Errorf("confirmation shows %q, want the arguments without the admin inputs", q.GetMessage())
	}
	if q := question(t, o[3], 4, "r4.admin"); !strings.HasPrefix(q.GetMessage(), "That answer does not fit:") || !strings.Contains(q.GetMessage(), "reason") {
		t.Errorf("re-asked question = %q, want the schema violation of reason", q.GetMessage())
	}
	if env := envelopeOf(t, o[4]); env.Status != "ok" || len(h.invokes) != 1 {
		t.Errorf("final = %+v after %d invocations, want ok after one", env, len(h.invokes))
	}
	if want := `{"agent_id":"agent-9","confirm":true,"reason":"ok"}`; h.invokes[0].GetArguments() != want {
		t.Errorf("invoked with %s, want %s", h.invokes[0].GetArguments(), want)
	}
}

// Declining, cancelling, or answering confirm: false end the call with a
// declined envelope, and nothing runs.
func TestDeclineEndsTheCallWithoutTheSideEffect(t *testing.T) {
	for name, answer := range map[string]*callsv1.Answer{
		"decline":       {Action: callsv1.Action_ACTION_DECLINE},
		"cancel":        {Action: callsv1.Action_ACTION_CANCEL},
		"confirm false": accept(t, map[string]any{"confirm": false, "reason": "no"}),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			in := purgeInput(t)
			in.Arguments = `{"agent_id":"agent-9"}`
			var o0, o1 outcome
			h.round(0, 0, digest, nil, &o0)
			h.round(time.Minute, 1, digest, map[string]*callsv1.Answer{"r1.admin": answer}, &o1)
			h.run(in)
			env := envelopeOf(t, o1)
			if env.Status != "error" || env.DomainCode != toolcall.CodeDeclined || env.ErrorType != "DeclinedError" || !strings.Contains(env.Message, "nothing was done") {
				t.Errorf("envelope = %+v, want declined saying nothing was done", env)
			}
			if len(h.invokes) != 0 {
				t.Errorf("side effect ran %d times after %s", len(h.invokes), name)
			}
			if got := h.statuses[len(h.statuses)-1]; got != calls.StatusDeclined {
				t.Errorf("final status = %s, want declined", got)
			}
		})
	}
}

// The validator refuses a stale round, a repeated round and a round for
// other arguments; the call carries on unaffected.
func TestValidatorRefusesStaleRepeatedAndForeignRounds(t *testing.T) {
	h := newHarness(t)
	var o0, o1, stale, repeated, foreign, final outcome
	ok := map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})}
	h.round(0, 0, digest, nil, &o0)
	h.round(time.Minute, 1, "sha256:other", ok, &foreign)
	h.round(2*time.Minute, 1, digest, ok, &o1)
	h.round(3*time.Minute, 1, digest, ok, &repeated)
	h.round(4*time.Minute, 0, digest, nil, &stale)
	h.round(5*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "r"})}, &final)
	h.run(purgeInput(t))

	for name, o := range map[string]outcome{"other arguments": foreign, "repeated round": repeated, "stale round": stale} {
		if o.rejected == nil || o.result != nil {
			t.Errorf("%s: rejected = %v, result = %v; want refused by the validator", name, o.rejected, o.result)
		}
	}
	question(t, o1, 2, "r2.admin")
	if env := envelopeOf(t, final); env.Status != "ok" || len(h.invokes) != 1 {
		t.Errorf("final = %+v after %d invocations", env, len(h.invokes))
	}
}

// Round 2's question depends on round 1's answer: the preview of the
// gathered arguments, first three runs shown.
func TestPreviewConfirmationShowsWhatTheAnswersWouldDo(t *testing.T) {
	h := newHarness(t)
	var o0, o1, o2 outcome
	h.round(0, 0, digest, nil, &o0)
	h.round(time.Minute, 1, digest, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"every": "2h", "channel": "CHANNEL_LOG"})}, &o1)
	h.round(2*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.confirm": accept(t, map[string]any{"confirm": true})}, &o2)
	h.run(remindInput(t))

	if q := question(t, o0, 1, "r1.fields"); !slices.Equal(properties(q), []string{"channel", "every"}) {
		t.Errorf("round 1 asks %v", properties(q))
	}
	q := question(t, o1, 2, "r2.confirm")
	want := "next runs: 2030-01-01T11:00:00Z, 2030-01-01T13:00:00Z, 2030-01-01T15:00:00Z\n"
	if !strings.Contains(q.GetMessage(), want) || strings.Contains(q.GetMessage(), "17:00") {
		t.Errorf("confirmation = %q, want the first three runs %q", q.GetMessage(), want)
	}
	if len(h.previews) != 1 || h.previews[0].GetArguments() != `{"channel":"CHANNEL_LOG","every":"2h","text":"stand up"}` {
		t.Errorf("previews = %v, want one with the gathered arguments", h.previews)
	}
	if env := envelopeOf(t, o2); env.Status != "ok" || len(h.invokes) != 1 || h.invokes[0].GetAudit() {
		t.Errorf("final = %+v, invokes %v; want one unaudited invocation", env, h.invokes)
	}
}

// A preview that refuses the answers (a domain rule the form cannot
// express) asks for them again, saying why.
func TestRefusedPreviewAsksTheFieldsAgain(t *testing.T) {
	h := newHarness(t)
	h.preview = func(in *callsv1.InvokeInput) string {
		if strings.Contains(in.GetArguments(), `"1m"`) {
			return `{"status":"error","tool":"testing_remind_preview","error_type":"ArgumentValidationError","domain_code":"invalid_argument","message":"every: 1m is too often; the minimum is 5m0s"}`
		}
		return `{"status":"ok","data":{"next_runs":["2030-01-01T11:00:00Z"]}}`
	}
	var o [4]outcome
	h.round(0, 0, digest, nil, &o[0])
	h.round(time.Minute, 1, digest, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"every": "1m", "channel": "CHANNEL_LOG"})}, &o[1])
	h.round(2*time.Minute, 2, digest, map[string]*callsv1.Answer{"r2.fields": accept(t, map[string]any{"every": "10m", "channel": "CHANNEL_LOG"})}, &o[2])
	h.round(3*time.Minute, 3, digest, map[string]*callsv1.Answer{"r3.confirm": accept(t, map[string]any{"confirm": true})}, &o[3])
	h.run(remindInput(t))

	if q := question(t, o[1], 2, "r2.fields"); !strings.HasPrefix(q.GetMessage(), "every: 1m is too often") || !slices.Equal(properties(q), []string{"channel", "every"}) {
		t.Errorf("re-asked fields = %v: %q", properties(q), q.GetMessage())
	}
	question(t, o[2], 3, "r3.confirm")
	if env := envelopeOf(t, o[3]); env.Status != "ok" || len(h.invokes) != 1 || !strings.Contains(h.invokes[0].GetArguments(), `"10m"`) {
		t.Errorf("final = %+v, invokes %v", env, h.invokes)
	}
}

// Nobody answers: after the round timeout the workflow fails as abandoned,
// with the status an operator filters on, and nothing runs.
func TestUnansweredCallIsAbandoned(t *testing.T) {
	h := newHarness(t)
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.run(purgeInput(t))
	question(t, o0, 1, "r1.fields")
	err := h.env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != calls.ErrTypeAbandoned || !strings.Contains(appErr.Error(), "no answer within 10m0s") {
		t.Fatalf("workflow error = %v, want an %s application error", err, calls.ErrTypeAbandoned)
	}
	if want := []string{"waiting", "abandoned"}; !slices.Equal(h.statuses, want) || len(h.invokes) != 0 {
		t.Errorf("statuses = %v, invokes %d; want %v and none", h.statuses, len(h.invokes), want)
	}
}

// A call that keeps getting incomplete answers ends after MaxRounds.
func TestRoundsAreBounded(t *testing.T) {
	h := newHarness(t)
	in := purgeInput(t)
	in.MaxRounds = 3
	var o [4]outcome
	h.round(0, 0, digest, nil, &o[0])
	for r := int32(1); r <= 3; r++ {
		h.round(time.Duration(r)*time.Minute, r, digest, map[string]*callsv1.Answer{}, &o[r])
	}
	h.run(in)
	env := envelopeOf(t, o[3])
	if env.DomainCode != toolcall.CodeInvalidArgument || !strings.Contains(env.Message, "3 rounds") || len(h.invokes) != 0 {
		t.Errorf("after 3 unanswered rounds: %+v, %d invocations", env, len(h.invokes))
	}
}

// A failed service call is the call's result; the activity's own failure
// (a service unreachable through every retry) becomes unavailable.
func TestServiceOutcomeIsTheResult(t *testing.T) {
	h := newHarness(t)
	h.invoke = func(*callsv1.InvokeInput) string {
		return `{"status":"error","tool":"testing_purge","error_type":"NotFoundError","domain_code":"not_found","message":"agent agent-9 not found"}`
	}
	env := h.purgeAtOnce()
	if diff := cmp.Diff(toolcall.Envelope{Status: "error", Tool: "testing_purge", ErrorType: "NotFoundError", DomainCode: "not_found", Message: "agent agent-9 not found"}, env, cmpopts.IgnoreUnexported(toolcall.Envelope{})); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
	if h.statuses[len(h.statuses)-1] != calls.StatusFailed {
		t.Errorf("statuses = %v, want failed last", h.statuses)
	}
}

// A service unreachable through every attempt ends the call with the last
// attempt's envelope: a fixed message and the error id its cause is logged
// under, nothing of the dial error.
func TestUnreachableServiceEndsWithTheLastAttemptsEnvelope(t *testing.T) {
	logs := &logtest.Buffer{}
	acts, err := calls.NewActivities(calls.Config{
		Contracts: []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().Get(0)},
		Services:  map[string]string{testingv1connect.TestingServiceName: "http://127.0.0.1:1"},
		Mesh:      servertest.MeshSigner(),
		Log:       logging.New(logs, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.invokeActivity = acts.Invoke
	env := h.purgeAtOnce()
	if env.DomainCode != toolcall.CodeUnavailable || env.ErrorID == "" || env.Message != rpcerror.WithID(rpcerror.MessageUnreachable, env.ErrorID) {
		t.Fatalf("envelope %+v, want unavailable with the fixed message and an error id", env)
	}
	var logged bool
	for _, e := range logs.Events("tool.error") {
		logged = logged || (e["error_id"] == env.ErrorID && strings.Contains(fmt.Sprint(e["error"]), "127.0.0.1:1"))
	}
	if !logged || len(h.invokes) < 2 {
		t.Errorf("no tool.error event holds the dial error under %s, or the call was not retried (%d attempts)", env.ErrorID, len(h.invokes))
	}
}

// An activity that fails on its own (here, a panic) ends the call as
// unavailable with a fixed message: nothing of the failure's text.
func TestFailedActivityShowsNoText(t *testing.T) {
	h := newHarness(t)
	h.invokeActivity = func(context.Context, *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
		panic("index out of range [3] with length 3 in /src/toolmesh/workers/calls/activities.go")
	}
	env := h.purgeAtOnce()
	if env.DomainCode != toolcall.CodeUnavailable || env.Message != rpcerror.MessageUnreachable {
		t.Errorf("envelope %+v, want unavailable with %q only", env, rpcerror.MessageUnreachable)
	}
}

// An operator who cancels the workflow ends the call: nothing runs, and its
// status says so.
func TestCancelledCall(t *testing.T) {
	h := newHarness(t)
	var o0 outcome
	h.round(0, 0, digest, nil, &o0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	h.run(purgeInput(t))
	var canceled *temporal.CanceledError
	if err := h.env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Errorf("workflow error = %v, want cancelled", err)
	}
	if want := []string{"waiting", "cancelled"}; !slices.Equal(h.statuses, want) || len(h.invokes) != 0 {
		t.Errorf("statuses = %v, invokes %d; want %v and none", h.statuses, len(h.invokes), want)
	}
}

// visitInput is a call its service refused pending a visit, from a client
// that can be sent to a page.
func visitInput() *callsv1.ElicitedCallInput {
	return &callsv1.ElicitedCallInput{
		Tool: "testing_link", Caller: &callsv1.Caller{Subject: "alice", Agent: "agent-1"}, Arguments: `{}`, ArgumentsDigest: digest,
		Url: true, IdempotencyKey: "mcp-visit", RoundTimeout: durationpb.New(10 * time.Minute),
		Visit: &toolv1.VisitRequired{Url: "https://mesh.example/link", Message: "Link your account.", VisitId: "visit-agent-1"},
	}
}

// A call that ends while the visit it asked for is not done — declined,
// cancelled by the user, abandoned, or its workflow cancelled — tells the
// service, once, under the call's key; a call whose service then answered
// does not.
func TestEndedVisitIsToldToTheService(t *testing.T) {
	answer := func(a callsv1.Action) map[string]*callsv1.Answer {
		return map[string]*callsv1.Answer{"r1.visit": {Action: a}}
	}
	for name, end := range map[string]func(h *harness){
		"declined":           func(h *harness) { h.round(time.Minute, 1, digest, answer(callsv1.Action_ACTION_DECLINE), &outcome{}) },
		"cancelled":          func(h *harness) { h.round(time.Minute, 1, digest, answer(callsv1.Action_ACTION_CANCEL), &outcome{}) },
		"abandoned":          func(*harness) {},
		"workflow cancelled": func(h *harness) { h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			var o0 outcome
			h.round(0, 0, digest, nil, &o0)
			end(h)
			h.run(visitInput())
			if q := question(t, o0, 1, "r1.visit"); q.GetUrl() != "https://mesh.example/link" {
				t.Fatalf("round 1 asked %v, want the visit", q)
			}
			if len(h.endVisits) != 1 || h.endVisits[0].GetVisitId() != "visit-agent-1" || h.endVisits[0].GetIdempotencyKey() != "mcp-visit" ||
				h.endVisits[0].GetTool() != "testing_link" || h.endVisits[0].GetCaller().GetAgent() != "agent-1" {
				t.Errorf("the service was told %v, want the one visit ended, under the call's key", h.endVisits)
			}
			if len(h.invokes) != 0 {
				t.Errorf("the service was called %d times", len(h.invokes))
			}
		})
	}
	t.Run("done", func(t *testing.T) {
		h := newHarness(t)
		var o0, o1 outcome
		h.round(0, 0, digest, nil, &o0)
		h.round(time.Minute, 1, digest, answer(callsv1.Action_ACTION_ACCEPT), &o1)
		h.run(visitInput())
		if env := envelopeOf(t, o1); env.Status != "ok" {
			t.Fatalf("the call after the visit = %+v", env)
		}
		if len(h.endVisits) != 0 || len(h.invokes) != 1 || h.invokes[0].GetIdempotencyKey() != "mcp-visit" {
			t.Errorf("told %v, called %d times; want the call made once under its key, no visit ended", h.endVisits, len(h.invokes))
		}
	})
}
