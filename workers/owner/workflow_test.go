package owner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	owner "github.com/toolmesh/toolmesh/workers/owner"
)

// start is when every test workflow starts (the test clock).
var start = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

// wfEnv is one ask workflow under the Temporal test suite, with the
// activities mocked and what they and the workflow did recorded.
type wfEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu       sync.Mutex
	notified []*ownerv1.AskWorkflowInput
	recorded []*ownerv1.RecordAskOutcomeRequest
	statuses []string // ToolmeshStatus upserts
}

func newWfEnv(t *testing.T) *wfEnv {
	t.Helper()
	env := &wfEnv{TestWorkflowEnvironment: workflowtest.NewEnv()}
	env.SetStartTime(start)
	owner.Register(env, &owner.Activities{})
	env.OnActivity(owner.ActivityNotifyOwner, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *ownerv1.AskWorkflowInput) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.notified = append(env.notified, in)
			return nil
		})
	env.OnActivity(owner.ActivityRecordOutcome, mock.Anything, mock.Anything).Return(
		func(_ context.Context, req *ownerv1.RecordAskOutcomeRequest) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.recorded = append(env.recorded, req)
			return nil
		})
	workflowtest.OnStatus(env.TestWorkflowEnvironment, func(status string) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.statuses = append(env.statuses, status)
	})
	return env
}

func askInput(options ...string) *ownerv1.AskWorkflowInput {
	return &ownerv1.AskWorkflowInput{
		AskId:      "ask_01jd8xw0000000000000000000",
		AgentId:    "agent-a",
		Subject:    "agent-a",
		Question:   "Deploy to production?",
		Options:    options,
		Context:    "all checks are green",
		ExpireTime: timestamppb.New(start.Add(time.Hour)),
		Tool:       "owner_ask",
	}
}

func (e *wfEnv) result(t *testing.T) *ownerv1.AskOutcome {
	t.Helper()
	if !e.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var out ownerv1.AskOutcome
	if err := e.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func (e *wfEnv) status(t *testing.T) owner.State {
	t.Helper()
	v, err := e.QueryWorkflow("status")
	if err != nil {
		t.Fatalf("status query: %v", err)
	}
	var out owner.State
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// update sends the answer update and returns how it ended.
type updateResult struct {
	accepted bool
	rejected error
	state    owner.State
	err      error
}

func (e *wfEnv) answer(t *testing.T, id, answer string) *updateResult {
	r := &updateResult{}
	e.UpdateWorkflow("answer", id, &testsuite.TestUpdateCallback{
		OnAccept: func() { r.accepted = true },
		OnReject: func(err error) { r.rejected = err },
		OnComplete: func(v any, err error) {
			r.err = err
			switch v := v.(type) {
			case converter.EncodedValue:
				if err == nil {
					if gerr := v.Get(&r.state); gerr != nil {
						t.Errorf("decode update result: %v", gerr)
					}
				}
			case owner.State:
				r.state = v
			}
		},
	}, &ownerv1.AnswerUpdate{Answer: answer, AnsweredBy: "alice"})
	return r
}

func TestAskAnsweredByUpdate(t *testing.T) {
	env := newWfEnv(t)
	var waiting owner.State
	var upd *updateResult
	env.RegisterDelayedCallback(func() {
		waiting = env.status(t)
		upd = env.answer(t, "u1", "yes")
	}, 10*time.Minute)
	env.ExecuteWorkflow("owner.ask", askInput("yes", "no"))

	expires := start.Add(time.Hour).Format(time.RFC3339Nano)
	if waiting != (owner.State{AskID: askInput().GetAskId(), Status: owner.StatusWaiting, ExpireTime: expires}) {
		t.Errorf("status before the answer = %+v, want waiting", waiting)
	}
	want := owner.State{AskID: askInput().GetAskId(), Status: owner.StatusAnswered, Answer: "yes", AnsweredBy: "alice", ExpireTime: expires}
	if !upd.accepted || upd.rejected != nil || upd.err != nil || upd.state != want {
		t.Errorf("answer update = %+v, want accepted with the answer", upd)
	}
	got := env.result(t)
	if got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED || got.GetAnswer() != "yes" || got.GetAnsweredBy() != "alice" ||
		!got.GetResolveTime().AsTime().Equal(start.Add(10*time.Minute)) {
		t.Errorf("result = %v, want answered yes by alice 10 minutes in", got)
	}
	if len(env.notified) != 1 || env.notified[0].GetQuestion() != "Deploy to production?" {
		t.Errorf("owner notified %d times (%v), want once with the question", len(env.notified), env.notified)
	}
	if len(env.recorded) != 1 || env.recorded[0].GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED || env.recorded[0].GetAnswer() != "yes" {
		t.Errorf("recorded outcomes %v, want the answer once", env.recorded)
	}
	if len(env.statuses) != 1 || env.statuses[0] != owner.StatusAnswered {
		t.Errorf("ToolmeshStatus upserts %q, want [answered]", env.statuses)
	}
}

// extend sends the extend update and returns how it ended.
func (e *wfEnv) extend(t *testing.T, id string, expire time.Time) *updateResult {
	r := &updateResult{}
	e.UpdateWorkflow("extend", id, &testsuite.TestUpdateCallback{
		OnAccept: func() { r.accepted = true },
		OnReject: func(err error) { r.rejected = err },
		OnComplete: func(v any, err error) {
			r.err = err
			if s, ok := v.(owner.State); ok {
				r.state = s
			}
		},
	}, &ownerv1.ExtendUpdate{ExpireTime: timestamppb.New(expire), Reason: "the owner is away", RequestedBy: "agent-a", CallId: "owner-extend/k1",
		Request: &ownerv1.ExtendAskRequest{AskId: askInput().GetAskId(), ExtendSeconds: 7200, Reason: "the owner is away"}})
	return r
}

func TestAskExtendedExpiresLaterAndIsAudited(t *testing.T) {
	env := newWfEnv(t)
	var audited []*ownerv1.ExtendUpdate
	env.OnActivity(owner.ActivityRecordExtension, mock.Anything, mock.Anything).Return(
		func(_ context.Context, up *ownerv1.ExtendUpdate) error {
			audited = append(audited, up)
			return nil
		})
	var earlier, later *updateResult
	var after owner.State
	env.RegisterDelayedCallback(func() {
		earlier = env.extend(t, "x0", start.Add(30*time.Minute))
		later = env.extend(t, "x1", start.Add(3*time.Hour))
	}, 10*time.Minute)
	env.RegisterDelayedCallback(func() { after = env.status(t) }, 2*time.Hour)
	env.ExecuteWorkflow("owner.ask", askInput())

	if earlier.accepted || earlier.rejected == nil {
		t.Errorf("an extension to before the expiry = %+v, want rejected", earlier)
	}
	if !later.accepted || later.err != nil || later.state.ExpireTime != start.Add(3*time.Hour).Format(time.RFC3339Nano) {
		t.Errorf("extension = %+v, want accepted with the new expire time", later)
	}
	if after.Status != owner.StatusWaiting {
		t.Errorf("two hours in (past the first expiry) the ask is %+v, want still waiting", after)
	}
	got := env.result(t)
	if got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED || !got.GetResolveTime().AsTime().Equal(start.Add(3*time.Hour)) {
		t.Errorf("result = %v, want expired at the extended time", got)
	}
	if len(audited) != 1 || audited[0].GetCallId() != "owner-extend/k1" || audited[0].GetRequest().GetExtendSeconds() != 7200 {
		t.Errorf("audited extensions %v, want the accepted one, once", audited)
	}
}

func TestAskExpires(t *testing.T) {
	env := newWfEnv(t)
	env.ExecuteWorkflow("owner.ask", askInput())
	got := env.result(t)
	if got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED || got.GetAnswer() != "" ||
		!got.GetResolveTime().AsTime().Equal(start.Add(time.Hour)) {
		t.Errorf("result = %v, want expired at the expire time", got)
	}
	if len(env.recorded) != 1 || env.recorded[0].GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED {
		t.Errorf("recorded %v, want expired", env.recorded)
	}
	if len(env.statuses) != 1 || env.statuses[0] != owner.StatusExpired {
		t.Errorf("ToolmeshStatus upserts %q, want [expired]", env.statuses)
	}
}

func TestAskAlreadyPastItsExpiryEndsAtOnce(t *testing.T) {
	env := newWfEnv(t)
	in := askInput()
	in.ExpireTime = timestamppb.New(start.Add(-time.Minute))
	env.ExecuteWorkflow("owner.ask", in)
	if got := env.result(t); got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED {
		t.Errorf("result = %v, want expired", got)
	}
}

func TestInvalidAnswerIsRejectedAndChangesNothing(t *testing.T) {
	env := newWfEnv(t)
	var wrong, blank, right, late *updateResult
	var after owner.State
	env.RegisterDelayedCallback(func() {
		wrong = env.answer(t, "u-wrong", "maybe")
		blank = env.answer(t, "u-blank", "  ")
		after = env.status(t)
	}, 5*time.Minute)
	env.RegisterDelayedCallback(func() {
		right = env.answer(t, "u-right", "no")
		late = env.answer(t, "u-late", "yes")
	}, 20*time.Minute)
	env.ExecuteWorkflow("owner.ask", askInput("yes", "no"))

	for name, r := range map[string]*updateResult{"not an option": wrong, "blank": blank} {
		var app *temporal.ApplicationError
		if r.accepted || !errors.As(r.rejected, &app) || app.Type() != ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER.String() {
			t.Errorf("%s answer: %+v, want rejected as %s", name, r, ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER)
		}
	}
	if after.Status != owner.StatusWaiting {
		t.Errorf("after rejected answers the ask is %+v, want still waiting", after)
	}
	if !right.accepted || right.state.Answer != "no" {
		t.Errorf("valid answer: %+v", right)
	}
	// Once answered, the ask takes no other answer.
	var app *temporal.ApplicationError
	if late.accepted || !errors.As(late.rejected, &app) || app.Type() != ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING.String() {
		t.Errorf("a second answer: %+v, want rejected as %s", late, ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING)
	}
	if got := env.result(t); got.GetAnswer() != "no" {
		t.Errorf("result = %v, want the valid answer", got)
	}
}

func TestAskAnsweredBySignal(t *testing.T) {
	env := newWfEnv(t)
	var afterBad owner.State
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow("answer", &ownerv1.AnswerSignal{Answer: "perhaps"}) // not an option: ignored
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		afterBad = env.status(t)
		env.SignalWorkflow("answer", &ownerv1.AnswerSignal{Answer: "no"})
	}, 2*time.Minute)
	env.ExecuteWorkflow("owner.ask", askInput("yes", "no"))

	if afterBad.Status != owner.StatusWaiting {
		t.Errorf("after an invalid signal the ask is %+v, want still waiting", afterBad)
	}
	got := env.result(t)
	if got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED || got.GetAnswer() != "no" || got.GetAnsweredBy() != owner.AnsweredByTemporal {
		t.Errorf("result = %v, want answered no by %q", got, owner.AnsweredByTemporal)
	}
}

func TestAskCancelled(t *testing.T) {
	env := newWfEnv(t)
	env.RegisterDelayedCallback(env.CancelWorkflow, 3*time.Minute)
	env.ExecuteWorkflow("owner.ask", askInput())
	if !env.IsWorkflowCompleted() {
		t.Fatal("not completed")
	}
	if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
		t.Errorf("workflow error = %v, want cancelled", err)
	}
	if len(env.recorded) != 1 || env.recorded[0].GetStatus() != ownerv1.AskStatus_ASK_STATUS_CANCELLED {
		t.Errorf("recorded %v, want cancelled (recorded although the workflow was cancelled)", env.recorded)
	}
	if len(env.statuses) != 1 || env.statuses[0] != owner.StatusCancelled {
		t.Errorf("ToolmeshStatus upserts %q, want [cancelled]", env.statuses)
	}
}

func TestAskSurvivesAFailedNotification(t *testing.T) {
	env := workflowtest.NewEnv()
	owner.Register(env, &owner.Activities{})
	env.OnActivity(owner.ActivityNotifyOwner, mock.Anything, mock.Anything).Return(
		temporal.NewNonRetryableApplicationError("no channel", "OwnerServiceRefused", nil))
	env.OnActivity(owner.ActivityRecordOutcome, mock.Anything, mock.Anything).Return(nil)
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow("answer", &ownerv1.AnswerSignal{Answer: "fine", AnsweredBy: "bob"})
	}, time.Minute)
	in := askInput()
	in.ExpireTime = timestamppb.New(time.Now().Add(time.Hour))
	env.ExecuteWorkflow("owner.ask", in)
	var out ownerv1.AskOutcome
	if err := env.GetWorkflowResult(&out); err != nil || out.GetAnswer() != "fine" || out.GetAnsweredBy() != "bob" {
		t.Errorf("result = %v, %v; want answered although the owner could not be notified", &out, err)
	}
}
