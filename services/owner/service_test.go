package owner_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
)

// env is one owner service under test.
type env struct {
	svc  *owner.Service
	c    ownerv1connect.OwnerServiceClient
	srv  *servertest.Server
	wf   *fakeEngine
	logs *logtest.Buffer
}

// start serves the owner service on SQLite with fake workflows, and a
// Connect client of it.
func start(t *testing.T, cfg owner.Config) *env {
	t.Helper()
	ctx := context.Background()
	st, err := ownerstore.Open(ctx, sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	wf := newFakeEngine()
	if cfg.Engine == nil {
		cfg.Engine = wf
	}
	logs := &logtest.Buffer{}
	cfg.Log = logging.New(logs, slog.LevelDebug)
	svc, err := owner.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc.Registration())
	return &env{svc: svc, c: ownerv1connect.NewOwnerServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...), srv: srv, wf: wf, logs: logs}
}

// eachProtocol runs fn against a fresh service once over Connect and once
// over gRPC.
func eachProtocol(t *testing.T, cfg owner.Config, fn func(t *testing.T, e *env)) {
	var e *env
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		e = start(t, cfg)
		return e.srv
	}, ownerv1connect.NewOwnerServiceClient, func(t *testing.T, c ownerv1connect.OwnerServiceClient) {
		e.c = c
		fn(t, e)
	})
}

// Callers.
func agentA() context.Context { return servertest.As(context.Background(), "agent-a") }
func agentB() context.Context { return servertest.As(context.Background(), "agent-b") }
func theOwner() context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "alice", Agent: "local", Roles: []string{mesh.RoleOwner}}})
}
func theWorker() context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "toolmesh-worker-owner", Agent: "toolmesh-worker-owner", Roles: []string{mesh.RoleService}}})
}

// wantCode checks that the call what failed with want.
func wantCode(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	if got := servertest.Code(t, err); got != want {
		t.Errorf("%s: code %v (err %v), want %v", what, got, err, want)
	}
}

func waitNone() *int32 { var z int32; return &z }

func TestAskIsAnsweredWhileTheCallWaits(t *testing.T) {
	eachProtocol(t, owner.Config{}, func(t *testing.T, e *env) {
		ctx := servertest.WithIdempotencyKey(agentA(), "call-1")
		id := owner.AskID("agent-a", "call-1", time.Now())
		type result struct {
			res *ownerv1.AskResponse
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Deploy to production?", Options: []string{"yes", "no"}, Context: "all tests pass"})
			done <- result{res, err}
		}()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in, err := e.wf.waitStarted(sctx, owner.WorkflowID("agent-a", id))
		if err != nil {
			t.Fatal(err)
		}
		if in.GetQuestion() != "Deploy to production?" || in.GetTool() != "owner_ask" || in.GetAgentId() != "agent-a" ||
			!cmp.Equal(in.GetOptions(), []string{"yes", "no"}) || in.GetExpireTime() == nil {
			t.Errorf("workflow input = %v", in)
		}
		ans, err := e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "yes"})
		if err != nil {
			t.Fatalf("Answer: %v", err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("Ask: %v", r.err)
		}
		got := r.res.GetAsk()
		if got.GetAskId() != id || got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED || got.GetAnswer() != "yes" ||
			got.GetAnsweredBy() != "alice" || got.GetWorkflowId() != "ask/agent-a/"+id || got.GetResolveTime() == nil {
			t.Errorf("Ask returned %v, want ask %s answered yes by alice", got, id)
		}
		if diff := cmp.Diff(ans.GetAsk(), got, protocmp.Transform(), protocmp.IgnoreFields(&ownerv1.Ask{}, "resolve_time")); diff != "" {
			t.Errorf("Ask and Answer disagree (-answer +ask):\n%s", diff)
		}
		stored, err := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: id})
		if err != nil || stored.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED {
			t.Errorf("GetAsk after the answer = %v, %v; want it answered", stored, err)
		}

		// The same call again (a retry) asks nothing new: it returns the
		// answered ask at once.
		again, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Deploy to production?", Options: []string{"yes", "no"}, Context: "all tests pass"})
		if err != nil || again.GetAsk().GetAskId() != id || again.GetAsk().GetAnswer() != "yes" {
			t.Errorf("retried Ask = %v, %v; want ask %s with its answer", again, err, id)
		}
		if n := e.wf.startCount(); n != 1 {
			t.Errorf("%d workflow starts, want 1", n)
		}
	})
}

func TestAskReturnsPendingWhenTheWaitRunsOut(t *testing.T) {
	eachProtocol(t, owner.Config{DefaultWait: 30 * time.Second}, func(t *testing.T, e *env) {
		ctx := servertest.WithIdempotencyKey(agentA(), "k")
		res, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Which region?", WaitSeconds: waitNone(), TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		a := res.GetAsk()
		if a.GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING || a.GetAnswer() != "" {
			t.Fatalf("Ask with wait 0 = %v, want pending", a)
		}
		if d := a.GetExpireTime().AsTime().Sub(a.GetCreateTime().AsTime()); d != 10*time.Minute {
			t.Errorf("expires %s after creation, want the 600 s timeout", d)
		}
		// A retry while pending waits on the same ask and starts no second
		// workflow (starting is idempotent by id).
		retry, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Which region?", WaitSeconds: waitNone(), TimeoutSeconds: 600})
		if err != nil || retry.GetAsk().GetAskId() != a.GetAskId() {
			t.Fatalf("retry = %v, %v; want the same ask", retry, err)
		}

		// The call's deadline bounds the wait: with no wait in the request
		// (the service waits 30 s by default) and 1 s left, the answer is
		// "pending" before the deadline, not a deadline error.
		dctx, cancel := context.WithTimeout(servertest.WithIdempotencyKey(agentA(), "k2"), 1500*time.Millisecond)
		defer cancel()
		began := time.Now()
		res, err = e.c.Ask(dctx, &ownerv1.AskRequest{Question: "Which zone?"})
		if err != nil || res.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
			t.Fatalf("Ask with a 1.5 s deadline = %v, %v; want pending", res, err)
		}
		if took := time.Since(began); took > 1400*time.Millisecond || took < 700*time.Millisecond {
			t.Errorf("Ask returned after %s, want about 1 s (the deadline less a reply margin)", took)
		}

		// The owner answers later; the agent reads it.
		if _, err := e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: a.GetAskId(), Answer: "eu-west"}); err != nil {
			t.Fatal(err)
		}
		got, err := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: a.GetAskId()})
		if err != nil || got.GetAsk().GetAnswer() != "eu-west" || got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED {
			t.Errorf("GetAsk = %v, %v; want the answer eu-west", got, err)
		}
	})
}

func TestIdempotencyKeyRule(t *testing.T) {
	eachProtocol(t, owner.Config{DefaultWait: 10 * time.Millisecond}, func(t *testing.T, e *env) {
		calls := 0
		servertest.KeyRule(t, agentA(), "k1", func(ctx context.Context, variant int) (string, error) {
			// How long a call waits for the answer is not part of the ask:
			// the calls alternate between the default wait and none.
			req := &ownerv1.AskRequest{Question: fmt.Sprintf("Question %d?", variant)}
			if calls++; calls%2 == 0 {
				req.WaitSeconds = waitNone()
			}
			res, err := e.c.Ask(ctx, req)
			return res.GetAsk().GetAskId(), err
		})
		mine, err := e.c.ListAsks(agentA(), &ownerv1.ListAsksRequest{})
		if err != nil || mine.GetPage().GetTotal() != 1 || mine.GetAsks()[0].GetQuestion() != "Question 0?" {
			t.Errorf("agent-a's asks = %v, %v; want the one first asked", mine, err)
		}
	})
}

func TestOnlyTheOwnerAnswersAndOnlyWithAnOption(t *testing.T) {
	eachProtocol(t, owner.Config{}, func(t *testing.T, e *env) {
		res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "Merge?", Options: []string{"merge", "wait"}, WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetAsk().GetAskId()
		_, err = e.c.Answer(agentA(), &ownerv1.AnswerRequest{AskId: id, Answer: "merge"})
		wantCode(t, "an agent answering its own ask", err, connect.CodePermissionDenied)
		_, err = e.c.Answer(agentB(), &ownerv1.AnswerRequest{AskId: id, Answer: "merge"})
		wantCode(t, "another agent answering", err, connect.CodePermissionDenied)

		_, err = e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "maybe"})
		wantCode(t, "an answer that is not an option", err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "one of the options") {
			t.Errorf("invalid answer error %q does not say why", err)
		}
		got, _ := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: id})
		if got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_PENDING {
			t.Errorf("after a refused answer the ask is %v, want still pending", got.GetAsk().GetStatus())
		}
		_, err = e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "  "})
		if vs := servertest.Violations(t, err); !slices.Equal(vs["answer"], []string{"string.non_blank"}) {
			t.Errorf("a blank answer: violations %v, want answer: string.non_blank", vs)
		}

		if _, err := e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "wait"}); err != nil {
			t.Fatalf("owner's valid answer: %v", err)
		}
		_, err = e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: id, Answer: "merge"})
		wantCode(t, "answering an answered ask", err, connect.CodeFailedPrecondition)
		if err != nil && !strings.Contains(err.Error(), "answered") {
			t.Errorf("conflict %q does not say the ask was answered", err)
		}
		_, err = e.c.Answer(theOwner(), &ownerv1.AnswerRequest{AskId: "ask_00000000000000000000000000", Answer: "x"})
		wantCode(t, "answering an unknown ask", err, connect.CodeNotFound)
	})
}

func TestAnAskOfAWorkflowRunNamesTheRun(t *testing.T) {
	e := start(t, owner.Config{})
	const run = "run_01hzy3d5q8w9x7v6t5s4r3p2n1"
	res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "Deploy?", Options: []string{"approve", "reject"}, Run: run, WaitSeconds: waitNone()})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetAsk().GetRun(); got != run {
		t.Errorf("Ask returned run %q, want %q", got, run)
	}
	got, err := e.c.GetAsk(theOwner(), &ownerv1.GetAskRequest{AskId: res.GetAsk().GetAskId()})
	if err != nil || got.GetAsk().GetRun() != run {
		t.Errorf("owner's GetAsk = %v, %v; want run %s", got, err, run)
	}
	list, err := e.c.ListAsks(theOwner(), &ownerv1.ListAsksRequest{Status: ownerv1.AskStatus_ASK_STATUS_PENDING})
	if err != nil || len(list.GetAsks()) != 1 || list.GetAsks()[0].GetRun() != run {
		t.Errorf("owner's ListAsks = %v, %v; want the ask with run %s", list, err, run)
	}
}

func TestAgentsSeeTheirOwnAsksTheOwnerSeesAll(t *testing.T) {
	eachProtocol(t, owner.Config{}, func(t *testing.T, e *env) {
		ask := func(ctx context.Context, q string) string {
			t.Helper()
			res, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: q, WaitSeconds: waitNone()})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetAsk().GetAskId()
		}
		a1, a2, b1 := ask(agentA(), "a1"), ask(agentA(), "a2"), ask(agentB(), "b1")

		_, err := e.c.GetAsk(agentB(), &ownerv1.GetAskRequest{AskId: a1})
		wantCode(t, "agent-b reading agent-a's ask", err, connect.CodeNotFound)
		if got, err := e.c.GetAsk(theOwner(), &ownerv1.GetAskRequest{AskId: a1}); err != nil || got.GetAsk().GetAgentId() != "agent-a" {
			t.Errorf("owner reading agent-a's ask = %v, %v", got, err)
		}
		ids := func(res *ownerv1.ListAsksResponse) []string {
			var out []string
			for _, a := range res.GetAsks() {
				out = append(out, a.GetAskId())
			}
			return out
		}
		mine, err := e.c.ListAsks(agentA(), &ownerv1.ListAsksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{a2, a1}, ids(mine)); diff != "" || mine.GetPage().GetTotal() != 2 {
			t.Errorf("agent-a's list (-want +got):\n%s", diff)
		}
		_, err = e.c.ListAsks(agentA(), &ownerv1.ListAsksRequest{AgentId: "agent-b"})
		wantCode(t, "agent-a listing agent-b's asks", err, connect.CodePermissionDenied)
		all, err := e.c.ListAsks(theOwner(), &ownerv1.ListAsksRequest{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{b1, a2}, ids(all)); diff != "" || all.GetPage().GetTotal() != 3 || all.GetPage().GetNextOffset() != 2 {
			t.Errorf("owner's first page (-want +got), page %v:\n%s", all.GetPage(), diff)
		}
		onlyB, err := e.c.ListAsks(theOwner(), &ownerv1.ListAsksRequest{AgentId: "agent-b", Status: ownerv1.AskStatus_ASK_STATUS_PENDING})
		if err != nil || !cmp.Equal(ids(onlyB), []string{b1}) {
			t.Errorf("owner's list of agent-b's pending asks = %v, %v", ids(onlyB), err)
		}

		// Cancelling: only the asking agent (or the owner); the outcome is
		// visible at once.
		_, err = e.c.CancelAsk(agentB(), &ownerv1.CancelAskRequest{AskId: a1})
		wantCode(t, "agent-b cancelling agent-a's ask", err, connect.CodeNotFound)
		res, err := e.c.CancelAsk(agentA(), &ownerv1.CancelAskRequest{AskId: a1})
		if err != nil || res.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_CANCELLED {
			t.Errorf("CancelAsk = %v, %v; want cancelled", res, err)
		}
		if got, _ := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: a1}); got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_CANCELLED {
			t.Errorf("GetAsk after cancel = %v, want cancelled", got.GetAsk())
		}
		if res, err := e.c.CancelAsk(agentA(), &ownerv1.CancelAskRequest{AskId: a1}); err != nil || res.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_CANCELLED {
			t.Errorf("cancelling again = %v, %v; want the cancelled ask unchanged", res, err)
		}
	})
}

func TestRecordAskOutcomeIsForTheWorker(t *testing.T) {
	eachProtocol(t, owner.Config{}, func(t *testing.T, e *env) {
		res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "Expire me", WaitSeconds: waitNone()})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetAsk().GetAskId()
		expired := &ownerv1.RecordAskOutcomeRequest{AskId: id, Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, ResolveTime: res.GetAsk().GetExpireTime()}
		_, err = e.c.RecordAskOutcome(agentA(), expired)
		wantCode(t, "an agent recording an outcome", err, connect.CodePermissionDenied)
		_, err = e.c.RecordAskOutcome(theOwner(), expired)
		wantCode(t, "the owner recording an outcome", err, connect.CodePermissionDenied)
		got, err := e.c.RecordAskOutcome(theWorker(), expired)
		if err != nil || got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED {
			t.Fatalf("worker's RecordAskOutcome = %v, %v", got, err)
		}
		late, err := e.c.RecordAskOutcome(theWorker(), &ownerv1.RecordAskOutcomeRequest{AskId: id, Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: "late", ResolveTime: res.GetAsk().GetExpireTime()})
		if err != nil || late.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED || late.GetAsk().GetAnswer() != "" {
			t.Errorf("a second outcome = %v, %v; want the first (expired) kept", late, err)
		}
		_, err = e.c.RecordAskOutcome(theWorker(), &ownerv1.RecordAskOutcomeRequest{AskId: id, Status: ownerv1.AskStatus_ASK_STATUS_PENDING, ResolveTime: res.GetAsk().GetExpireTime()})
		wantCode(t, "recording pending as an outcome", err, connect.CodeInvalidArgument)
		if len(e.logs.Events("owner.ask_ended")) != 1 {
			t.Errorf("owner.ask_ended logged %d times, want once", len(e.logs.Events("owner.ask_ended")))
		}
	})
}

func TestGetAskAsksTheWorkflowOfAPendingAsk(t *testing.T) {
	e := start(t, owner.Config{})
	res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "Still waiting?", WaitSeconds: waitNone()})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetAsk().GetAskId()
	// The workflow ended (its own record of it has not arrived): GetAsk
	// hears it from the workflow's status query and records it.
	e.wf.end(owner.WorkflowID("agent-a", id), ownerv1.AskStatus_ASK_STATUS_EXPIRED)
	got, err := e.c.GetAsk(agentA(), &ownerv1.GetAskRequest{AskId: id})
	if err != nil || got.GetAsk().GetStatus() != ownerv1.AskStatus_ASK_STATUS_EXPIRED || got.GetAsk().GetResolveTime() == nil {
		t.Fatalf("GetAsk = %v, %v; want expired", got, err)
	}
	list, err := e.c.ListAsks(agentA(), &ownerv1.ListAsksRequest{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED})
	if err != nil || list.GetPage().GetTotal() != 1 {
		t.Errorf("ListAsks(expired) = %v, %v; want the ask recorded as expired", list, err)
	}
}

func TestAskContract(t *testing.T) {
	e := start(t, owner.Config{})
	many := make([]string, 21)
	for i := range many {
		many[i] = strings.Repeat("x", i+1)
	}
	for name, tc := range map[string]struct {
		req  *ownerv1.AskRequest
		want map[string][]string
	}{
		"no question":       {&ownerv1.AskRequest{}, map[string][]string{"question": {"required"}}},
		"blank question":    {&ownerv1.AskRequest{Question: " \n "}, map[string][]string{"question": {"string.non_blank"}}},
		"blank option":      {&ownerv1.AskRequest{Question: "q", Options: []string{"a", " "}}, map[string][]string{"options": {"string.non_blank"}}},
		"duplicate options": {&ownerv1.AskRequest{Question: "q", Options: []string{"a", "a"}}, map[string][]string{"options": {"repeated.unique"}}},
		"too many options":  {&ownerv1.AskRequest{Question: "q", Options: many}, map[string][]string{"options": {"repeated.max_items"}}},
		"empty option":      {&ownerv1.AskRequest{Question: "q", Options: []string{"a", ""}}, map[string][]string{"options": {"string.min_len", "string.non_blank"}}},
		"timeout too short": {&ownerv1.AskRequest{Question: "q", TimeoutSeconds: 5}, map[string][]string{"timeout_seconds": {"int32.gte_lte"}}},
		"timeout too long":  {&ownerv1.AskRequest{Question: "q", TimeoutSeconds: 604801}, map[string][]string{"timeout_seconds": {"int32.gte_lte"}}},
		"not a run":         {&ownerv1.AskRequest{Question: "q", Run: "wf_01hzy3d5q8w9x7v6t5s4r3p2n1"}, map[string][]string{"run": {"string.pattern"}}},
	} {
		_, err := e.c.Ask(agentA(), tc.req)
		got := servertest.Violations(t, err)
		for field, rules := range tc.want {
			for _, r := range rules {
				found := false
				for _, g := range got[field] {
					found = found || g == r
				}
				if !found {
					t.Errorf("%s: violations %v lack %s on %s", name, got, r, field)
				}
			}
		}
	}
	if n := e.wf.startCount(); n != 0 {
		t.Errorf("invalid asks started %d workflows", n)
	}
	_, err := e.c.Ask(context.Background(), &ownerv1.AskRequest{Question: "who am I?"})
	wantCode(t, "an ask without identity", err, connect.CodeUnauthenticated)
}

func TestAskThatCannotStartLeavesNothingBehind(t *testing.T) {
	e := start(t, owner.Config{})
	e.wf.failStarts(errors.New("temporal is down"))
	ctx := servertest.WithIdempotencyKey(agentA(), "retry-me")
	_, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Still there?", WaitSeconds: waitNone()})
	wantCode(t, "Ask while workflows cannot start", err, connect.CodeUnavailable)
	if err != nil && strings.Contains(err.Error(), "temporal is down") {
		t.Errorf("the error shows the internal cause: %v", err)
	}
	if res, _ := e.c.ListAsks(agentA(), &ownerv1.ListAsksRequest{}); res.GetPage().GetTotal() != 0 {
		t.Errorf("a failed ask left %d asks behind", res.GetPage().GetTotal())
	}
	e.wf.failStarts(nil)
	res, err := e.c.Ask(ctx, &ownerv1.AskRequest{Question: "Still there?", WaitSeconds: waitNone()})
	if err != nil || res.GetAsk().GetAskId() != owner.AskID("agent-a", "retry-me", time.Now()) {
		t.Errorf("the retry = %v, %v; want the ask made afresh under the same id", res, err)
	}
}

func TestAskOverREST(t *testing.T) {
	e := start(t, owner.Config{})
	res, err := e.c.Ask(agentA(), &ownerv1.AskRequest{Question: "REST?", WaitSeconds: waitNone()})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.srv.REST(t, servertest.Bearer("agent-a"), http.MethodGet, "/v1/owner/asks/"+res.GetAsk().GetAskId(), ""); code != http.StatusOK || !strings.Contains(body, `"ASK_STATUS_PENDING"`) {
		t.Errorf("GET /v1/owner/asks/{id} = %d %s", code, body)
	}
}
