//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// Each worker queue, then the Temporal dev server, killed with SIGKILL in
// the middle of owner asks (asked, then answered while the kills go on),
// elicited admin calls (credits_grant, confirmed over a second round) and
// a schedule running every two seconds: every accepted ask and call ends
// completed or recorded as failed, every side effect happens once per
// idempotency key, and the domains that do not need Temporal never fail.
func TestWorkersAndTemporalKilledMidWork(t *testing.T) {
	m := sharedMesh(t)
	run := fmt.Sprintf("b%d", time.Now().UnixNano()%1e9)
	plain := connectMCP(t, m.mcpURL, "", nil)
	asker := connectMCP(t, m.mcpURL, "", nil)
	confirming := connectMCP(t, m.mcpURL, "", &mcp.ClientOptions{ElicitationHandler: confirmAdmin})

	// The schedule: approved, it creates a task every two seconds.
	description := "fault suite schedule " + run
	var created schedulesv1.CreateResponse
	if err := protoData(callTool(plain, "schedules_create", map[string]any{
		"description": description, "interval_seconds": 2,
		"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": description}},
	}, run+"-schedule"), &created); err != nil {
		t.Fatal(err)
	}
	scheduleID := created.GetSchedule().GetId()
	if o := callTool(plain, "schedules_approve", map[string]any{"schedule_id": scheduleID, "confirm": true, "reason": "fault suite"}, run+"-approve"); !o.ok() {
		t.Fatalf("approve the schedule: %s %s %v", o.code(), o.env.Message, o.err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Asks: one every 300ms, each retried with its key until accepted;
	// each answered half a second later, retried until delivered.
	var asksMu sync.Mutex
	accepted, answered := map[string]bool{}, map[string]bool{}
	var askAttempts, answerAttempts int
	wg.Go(func() {
		every(300*time.Millisecond, stop, func(i int) {
			key := fmt.Sprintf("%s-ask-%d", run, i)
			var ask ownerv1.AskResponse
			if !retry(func() bool {
				asksMu.Lock()
				askAttempts++
				asksMu.Unlock()
				return protoData(callTool(asker, "owner_ask", map[string]any{"question": "proceed with " + key + "?", "wait_seconds": 0, "timeout_seconds": 3600}, key), &ask) == nil
			}) {
				return // never accepted: the client was told to retry, and gave up
			}
			id := ask.GetAsk().GetAskId()
			asksMu.Lock()
			accepted[id] = true
			asksMu.Unlock()
			time.Sleep(500 * time.Millisecond)
			if retry(func() bool {
				asksMu.Lock()
				answerAttempts++
				asksMu.Unlock()
				o := callTool(asker, "owner_answer", map[string]any{"ask_id": id, "answer": "yes"}, key+"-answer")
				return o.ok() || o.code() == "conflict" // conflict: answered by an earlier attempt
			}) {
				asksMu.Lock()
				answered[id] = true
				asksMu.Unlock()
			}
		})
	})
	// Elicited grants: one every 400ms, each confirmed in a second round.
	// The dev agent's own wallet: the ledger is read as the wallet's agent,
	// and references are unique to this run.
	wallet := "local"
	var grants outcomes
	wg.Go(func() {
		every(400*time.Millisecond, stop, func(i int) {
			ref := fmt.Sprintf("%s-grant-%d", run, i)
			grants.add(callTool(confirming, "credits_grant", map[string]any{"wallet": wallet, "amount": "1", "reference": ref}, ref))
		})
	})
	// Domains that do not need Temporal.
	var others outcomes
	otherSessions := openSessions(t, m.mcpURL, 2)
	load := loadFor(2, 20*time.Millisecond, stop, func(w, n int) {
		if w == 0 {
			others.add(callTool(otherSessions[w], "tasks_list", map[string]any{"limit": 1}, ""))
		} else {
			key := fmt.Sprintf("%s-mem-%d", run, n)
			others.add(callTool(otherSessions[w], "memory_save", map[string]any{"key": key, "content": "no Temporal needed"}, key))
		}
	})

	time.Sleep(3 * time.Second)
	for _, w := range []string{"worker-owner", "worker-calls", "worker-schedules"} {
		killed := m.kill(t, w, syscall.SIGKILL)
		ready := readyAgain(t, m, w, killed, 30*time.Second)
		report(t, w+": seconds until ready again", ready.Sub(killed.sent).Seconds(), "<= 10", ready.Sub(killed.sent) <= 10*time.Second)
		time.Sleep(3 * time.Second)
	}
	killed := m.killTemporalServer(t)
	ready := readyAgain(t, m, "temporal", killed, 60*time.Second)
	report(t, "temporal: seconds until ready again", ready.Sub(killed.sent).Seconds(), "<= 30", ready.Sub(killed.sent) <= 30*time.Second)
	m.waitReady(t, time.Minute)
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	load.Wait()
	if o := callTool(plain, "schedules_pause", map[string]any{"schedule_id": scheduleID}, run+"-pause"); !o.ok() {
		t.Errorf("pause the schedule: %s %s %v", o.code(), o.env.Message, o.err)
	}

	// Asks: every accepted one ended answered.
	owner := ownerv1connect.NewOwnerServiceClient(h2c(), m.services["owner"], bearer(m.token(t, "local", "owner")))
	lostAsks := 0
	for id := range accepted {
		res, err := owner.GetAsk(context.Background(), &ownerv1.GetAskRequest{AskId: id})
		switch {
		case err != nil:
			lostAsks++
			t.Logf("ask %s: %v", id, err)
		case res.GetAsk().GetStatus() == ownerv1.AskStatus_ASK_STATUS_PENDING:
			lostAsks++
			t.Logf("ask %s still pending after its answer was delivered=%v", id, answered[id])
		}
	}
	figure(t, "asks accepted (attempts)", fmt.Sprintf("%d (%d)", len(accepted), askAttempts), "> 0", len(accepted) > 0)
	figure(t, "asks lost (accepted, not ended)", lostAsks, "0", lostAsks == 0)
	figure(t, "answers not delivered (attempts)", fmt.Sprintf("%d (%d)", len(accepted)-len(answered), answerAttempts), "0", len(answered) == len(accepted))

	// Elicited grants: one result each; one ledger entry per granted
	// reference, none twice.
	entries := ledgerEntries(t, m, wallet)
	var noResult, grantedOK, grantFailed, duplicates, missing, failedButApplied int
	codes := map[string]int{}
	for _, o := range grants.list() {
		codes[o.code()]++
		switch {
		case o.err != nil:
			noResult++
			t.Logf("grant %s: no tool result: %v", o.key, o.err)
		case o.ok():
			grantedOK++
			if entries[o.key] != 1 {
				missing++
			}
		default:
			grantFailed++
			// An unavailable answer is retryable and promises nothing
			// either way (TestElicitedRoundsThroughRestarts retries it);
			// any other failure means nothing was done.
			if o.code() != "unavailable" && entries[o.key] > 0 {
				failedButApplied++
				t.Logf("grant %s answered %s (%s) but was applied", o.key, o.code(), o.env.Message)
			}
		}
		if entries[o.key] > 1 {
			duplicates++
		}
	}
	figure(t, "elicited calls (ok / recorded failed)", fmt.Sprintf("%d (%d / %d) %v", len(grants.list()), grantedOK, grantFailed, codes), "> 0 ok", grantedOK > 0)
	figure(t, "elicited calls without exactly one tool result", noResult, "0", noResult == 0)
	figure(t, "side effects per idempotency key != 1 (ok calls)", missing+duplicates, "0", missing+duplicates == 0)
	figure(t, "failed calls whose side effect happened", failedButApplied, "0", failedButApplied == 0)

	// The schedule: every run that succeeded made exactly one task, and no
	// run is left running.
	schedules := schedulesv1connect.NewSchedulesServiceClient(h2c(), m.services["schedules"], bearer(m.token(t, "local")))
	var runs []*schedulesv1.Execution
	// A run whose worker was killed during its tool call gets its next
	// attempt when the lost one times out: the call activity's
	// start-to-close timeout (1 min, which bounds any --call-timeout),
	// plus its retry's backoff.
	eventually(t, 90*time.Second, "every run of the paused schedule ended", func() bool {
		res, err := schedules.Executions(context.Background(), &schedulesv1.ExecutionsRequest{ScheduleId: scheduleID, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		runs = res.GetExecutions()
		return !slices.ContainsFunc(runs, func(e *schedulesv1.Execution) bool {
			return e.GetStatus() == schedulesv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		})
	})
	tasksClient := tasksv1connect.NewTasksServiceClient(h2c(), m.services["tasks"], bearer(m.token(t, "local")))
	made := map[string]bool{}
	for offset := int32(0); ; offset += 200 {
		res, err := tasksClient.List(context.Background(), &tasksv1.ListRequest{Offset: offset, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range res.GetTasks() {
			if task.GetDescription() == description {
				made[task.GetId()] = true
			}
		}
		if len(res.GetTasks()) < 200 {
			break
		}
	}
	succeeded, failedRuns, missingTasks := 0, 0, 0
	for _, e := range runs {
		if e.GetStatus() != schedulesv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
			failedRuns++
			t.Logf("run %s: %s %s", e.GetRunId(), e.GetStatus(), e.GetDomainCode())
			continue
		}
		succeeded++
		var res tasksv1.CreateResponse
		if err := resultData(e, &res); err != nil || !made[res.GetTask().GetId()] {
			missingTasks++
			t.Logf("run %s succeeded, but its task %q is not there (%v)", e.GetRunId(), res.GetTask().GetId(), err)
		}
	}
	extra := len(made) - succeeded
	figure(t, "scheduled runs (succeeded / recorded failed)", fmt.Sprintf("%d / %d", succeeded, failedRuns), "> 0 succeeded", succeeded > 0)
	figure(t, "tasks created by the runs minus succeeded runs", extra, "0", extra == 0)
	figure(t, "succeeded runs whose task is missing", missingTasks, "0", missingTasks == 0)

	otherFailed := failures(t, others.list())
	figure(t, "calls to domains not needing Temporal (failed)", fmt.Sprintf("%d (%d)", len(others.list()), otherFailed), "0 failed", otherFailed == 0)
}

// ledgerEntries counts the ledger entries of wallet by reference.
func ledgerEntries(t *testing.T, m *mesh, wallet string) map[string]int {
	t.Helper()
	credits := creditsv1connect.NewCreditsServiceClient(h2c(), m.services["credits"], bearer(m.token(t, wallet)))
	entries := map[string]int{}
	for offset := int32(0); ; offset += 200 {
		res, err := credits.ListLedger(context.Background(), &creditsv1.ListLedgerRequest{Wallet: wallet, Offset: offset, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.GetEntries() {
			entries[e.GetReference()]++
		}
		if len(res.GetEntries()) < 200 {
			return entries
		}
	}
}

// readyAgain waits until up reports name ready since after the kill — a
// new process, as the old one was ready since before the signal was sent —
// and returns when it became ready. Not within the bound is a failure: up
// did not bring it back without a person.
func readyAgain(t *testing.T, m *mesh, name string, killed fault, within time.Duration) time.Time {
	t.Helper()
	var since time.Time
	eventually(t, within, name+" restarted", func() bool {
		p := m.process(t, name)
		since = p.Since
		return p.State == "ready" && p.Since.After(killed.sent)
	})
	return since
}

// confirmAdmin answers the edge's question for an admin call's missing
// inputs: confirmed, with a reason, after a moment's thought (so that kills
// land between the rounds).
func confirmAdmin(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	time.Sleep(300 * time.Millisecond)
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "reason": "fault suite"}}, nil
}

// resultData decodes the data of a run's ok result envelope.
func resultData(e *schedulesv1.Execution, m proto.Message) error {
	data, err := json.Marshal(e.GetResult().AsMap()["data"])
	if err != nil {
		return err
	}
	return protojson.Unmarshal(data, m)
}

// retry calls try until it succeeds, for at most a minute, backing off.
func retry(try func() bool) bool {
	deadline := time.Now().Add(time.Minute)
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		if try() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
}

// Temporal unreachable (its server frozen with SIGSTOP for 20s: connections
// stay open and nothing answers, as in a network partition): the owner and
// schedules calls that need it answer unavailable within the edge's call
// deadline, their calls that do not need it and every other domain keep
// working, and once Temporal answers again the same asks, retried with the
// same idempotency keys, are accepted.
func TestTemporalUnreachable(t *testing.T) {
	m := sharedMesh(t)
	run := fmt.Sprintf("u%d", time.Now().UnixNano()%1e9)
	var others outcomes
	stop := make(chan struct{})
	sessions := openSessions(t, m.mcpURL, 3)
	load := loadFor(3, 50*time.Millisecond, stop, func(w, n int) {
		switch w {
		case 0:
			others.add(callTool(sessions[w], "owner_list_channels", map[string]any{}, ""))
		case 1:
			others.add(callTool(sessions[w], "schedules_list", map[string]any{"limit": 1}, ""))
		default:
			others.add(callTool(sessions[w], "tasks_list", map[string]any{"limit": 1}, ""))
		}
	})
	time.Sleep(time.Second)
	pid := m.temporalServerPID(t)
	frozen := signalPID(t, "the Temporal dev server", pid, syscall.SIGSTOP)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer thaw()

	asker := connectMCP(t, m.mcpURL, "", nil)
	var asks outcomes
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			key := fmt.Sprintf("%s-ask-%d", run, i)
			asks.add(callTool(asker, "owner_ask", map[string]any{"question": "while Temporal is away " + key, "wait_seconds": 0}, key))
		})
	}
	wg.Go(func() {
		asks.add(callTool(asker, "schedules_create", map[string]any{"description": run, "interval_seconds": 3600,
			"action": map[string]any{"tool": "tasks_list", "arguments": map[string]any{}}}, run+"-schedule"))
	})
	wg.Wait()
	unavailable := 0
	var slowest time.Duration
	for _, o := range asks.list() {
		if o.code() == "unavailable" {
			unavailable++
		} else {
			t.Logf("%s while Temporal was frozen: %s %s %v", o.tool, o.code(), o.env.Message, o.err)
		}
		slowest = max(slowest, o.end.Sub(o.start))
	}
	if wait := 20*time.Second - time.Since(frozen.landed); wait > 0 {
		time.Sleep(wait)
	}
	thaw()
	back := time.Now()
	accepted := 0
	for i := range 3 {
		key := fmt.Sprintf("%s-ask-%d", run, i)
		if retry(func() bool {
			return callTool(asker, "owner_ask", map[string]any{"question": "while Temporal is away " + key, "wait_seconds": 0}, key).ok()
		}) {
			accepted++
		}
	}
	took := time.Since(back)
	close(stop)
	load.Wait()
	failed := failures(t, others.list())
	figure(t, "calls needing Temporal answered unavailable while it was unreachable", fmt.Sprintf("%d of %d", unavailable, len(asks.list())), "all", unavailable == len(asks.list()))
	report(t, "slowest of those answers (all before Temporal answered again)", ms(slowest), "<= 15s (the edge's call deadline)", slowest <= 15*time.Second)
	figure(t, "owner, schedules and tasks calls not needing Temporal (failed)", fmt.Sprintf("%d (%d)", len(others.list()), failed), "0 failed", failed == 0)
	figure(t, "asks retried with the same keys, accepted after Temporal answered again (seconds)", fmt.Sprintf("%d of 3 (%.1f s)", accepted, took.Seconds()), "3 of 3", accepted == 3)
}
