package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
)

// consoleShot is where a console test's screenshot goes: docs/images with
// -update (docs/console.md shows them), else the test's own directory.
func consoleShot(t *testing.T, name string) string {
	if *updateDocs {
		return filepath.Join("..", "..", "docs", "images", name)
	}
	return filepath.Join(t.TempDir(), name)
}

// consoleMesh is one `toolmesh up` the console's browser tests share: its
// console, an MCP session of its development agent, and a browser.
type consoleMesh struct {
	up      *upMesh
	url     string
	agent   *mcp.ClientSession
	browser *browsertest.Browser
	// gh is the fake GitHub the mesh's github and connections services
	// reach (per_agent).
	gh *githubtest.Fake
}

// tab opens the console's inbox in a new tab and marks the page, so that
// a test can tell a reload (which wipes the mark) from a live update.
func (c *consoleMesh) tab(t *testing.T) *browsertest.Tab {
	t.Helper()
	tab := c.browser.Tab(t)
	if err := tab.Do(30*time.Second,
		chromedp.Navigate(c.url),
		chromedp.WaitVisible(chromedp.CSS("#inbox-count")),
		chromedp.Evaluate[chromedp.Void](`window.stayed = true`),
	); err != nil {
		t.Fatal(err)
	}
	return tab
}

// checkAccessible runs axe-core on the page the tab shows: no serious or
// critical violation. The figures are logged (docs/console.md has them).
func checkAccessible(t *testing.T, tab *browsertest.Tab, page string) {
	t.Helper()
	res := tab.Axe(t)
	t.Logf("axe-core on %s: %d rules passed, %d violations (%d serious or critical), %d undecided",
		page, res.Passes, len(res.Violations), len(res.Serious()), res.Incomplete)
	for _, v := range res.Serious() {
		t.Errorf("%s: %s", page, v)
	}
}

// stayed reports whether the tab still shows the page tab loaded.
func stayed(t *testing.T, tab *browsertest.Tab) bool {
	t.Helper()
	ok, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[bool](`window.stayed === true`))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestConsole drives the console in a real headless Chromium against the
// processes `toolmesh up` starts (schedules may run every second).
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary, a Temporal dev server and Chromium")
	}
	bin, temporal := meshBinaries(t)
	gh := githubtest.Start(t, "Iv1.console", "cs_console")
	m := startUp(t, bin, temporal, append(consoleGitHubEnv(gh), "TOOLMESH_SCHEDULES_MIN_INTERVAL=1s")...)
	c := &consoleMesh{up: m, url: m.Link(t, linkConsole), agent: mcpSessionTo(t, m.Link(t, linkMCP)), browser: browsertest.Start(t), gh: gh}
	t.Run("an ask is answered from the inbox", func(t *testing.T) { testConsoleAnswersAnAsk(t, c) })
	t.Run("schedules are approved and denied", func(t *testing.T) { testConsoleDecidesSchedules(t, c) })
	t.Run("a workflow run is approved from the inbox", func(t *testing.T) { testConsoleApprovesARun(t, c) })
	t.Run("credits are granted", func(t *testing.T) { testConsoleGrantsCredits(t, c) })
	t.Run("the operator's pages", func(t *testing.T) { testConsoleOperatorPages(t, c) })
	t.Run("the owner links a token for an agent", func(t *testing.T) { testConsoleLinksAToken(t, c) })
	t.Run("people sign in with the issuer", func(t *testing.T) { testConsoleSignIn(t, bin, c) })
	// Last: it tampers with the audit trail.
	t.Run("the audit page shows a cut tail", func(t *testing.T) { testConsoleShowsACutTail(t, c) })
}

// testConsoleOperatorPages: the agents page lists the development agent
// with its reputation; the audit page verifies the trail the decisions
// above wrote and lists their records.
func testConsoleOperatorPages(t *testing.T, c *consoleMesh) {
	tab := c.browser.Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/agents"), chromedp.WaitVisible(chromedp.CSS("#agent-local .score"))); err != nil {
		t.Fatalf("the agents page: %v", err)
	}
	checkAccessible(t, tab, "the agents page")
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/audit?tool=schedules_approve"), chromedp.WaitVisible(chromedp.CSS("#verify-result"))); err != nil {
		t.Fatalf("the audit page: %v", err)
	}
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Title   string `json:"title"`
		Records string `json:"records"`
	}](`({title: document.querySelector("#verify-title").textContent, records: document.querySelector("tbody").textContent})`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "The trail verifies" || !strings.Contains(got.Records, "the triage task is wanted daily") {
		t.Errorf("the audit page shows %+v, want an intact trail with the approval's reason", got)
	}
	// The checkpoint log: the audit service signed at its start.
	if note, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[string](`document.querySelector("#checkpoints tbody tr pre").textContent`)); err != nil ||
		!strings.HasPrefix(note, "toolmesh-audit/") {
		t.Errorf("the audit page's checkpoint log shows the note %q (%v), want a signed checkpoint", note, err)
	}
	if err := tab.Screenshot(consoleShot(t, "console-audit.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "the audit page")
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/mesh"), chromedp.WaitVisible(chromedp.CSS("#proc-console .state"))); err != nil {
		t.Fatalf("the mesh page: %v", err)
	}
	if st, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS("#proc-edge .state"))); err != nil || st != "ready" {
		t.Errorf("the mesh page says the edge is %q (%v), want ready", st, err)
	}
	checkAccessible(t, tab, "the mesh page")
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/invocations?status=INVOCATION_STATUS_WORKING"),
		chromedp.WaitVisible(chromedp.CSS("#invocations-count"))); err != nil {
		t.Fatalf("the invocations page: %v", err)
	}
	checkAccessible(t, tab, "the remote invocations page")
	if p := tab.Problems(); len(p) > 0 {
		t.Errorf("the console's pages reported problems: %q", p)
	}
}

// testConsoleAnswersAnAsk: an agent asks the owner through the edge; the
// ask appears in the inbox without a reload; the owner clicks an option;
// the agent's waiting call returns that answer, once, and the ask records
// who answered.
func testConsoleAnswersAnAsk(t *testing.T, c *consoleMesh) {
	tab := c.tab(t)
	const question = "Deploy release 1.4 to production tonight?"
	type result struct {
		env envelope
		err error
	}
	answered := make(chan result, 2)
	go func() {
		env, err := tryCallTool(c.agent, &mcp.CallToolParams{Name: "owner_ask", Arguments: map[string]any{
			"question": question, "options": []string{"Ship it", "Hold"},
			"context": "The release notes are in the tracker; the on-call engineer is around until midnight.", "wait_seconds": 60,
		}})
		answered <- result{env, err}
	}()

	// It appears without a reload.
	if err := tab.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#inbox-list li .question`))); err != nil {
		t.Fatalf("the ask did not appear in the inbox: %v", err)
	}
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Question string `json:"question"`
		Agent    string `json:"agent"`
		Options  string `json:"options"`
	}](`({question: document.querySelector("#inbox-list li .question").textContent,
		agent: document.querySelector("#inbox-list li .agent").textContent,
		options: Array.from(document.querySelectorAll("#inbox-list li button.option")).map(b => b.value).join("|")})`))
	if err != nil {
		t.Fatal(err)
	}
	if !stayed(t, tab) {
		t.Error("the page was reloaded to show the ask")
	}
	if got.Question != question || got.Agent != "local" || got.Options != "Ship it|Hold" {
		t.Errorf("the inbox shows %+v, want the question, agent local and options Ship it|Hold", got)
	}
	if err := tab.Screenshot(consoleShot(t, "console-inbox.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "the inbox with an ask")

	// The owner clicks an option; the agent's call returns that answer.
	if err := tab.Do(30*time.Second,
		chromedp.Click(chromedp.CSS(`#inbox-list li button.option[value="Ship it"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	); err != nil {
		t.Fatalf("answer from the console: %v", err)
	}
	var r result
	select {
	case r = <-answered:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent's owner_ask did not return within 60s of the answer")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	var d askData
	okData(t, r.env, &d)
	if d.Ask.Status != "ASK_STATUS_ANSWERED" || d.Ask.Answer != "Ship it" || d.Ask.AnsweredBy != "local" {
		t.Fatalf("the agent got %+v, want answered Ship it by local", d.Ask)
	}
	select {
	case r := <-answered:
		t.Fatalf("the agent's call returned twice: %+v", r)
	default:
	}
	if again := getAsk(t, c.agent, d.Ask.AskID); again.Ask.Answer != "Ship it" || again.Ask.AnsweredBy != "local" {
		t.Errorf("the ask records %+v, want Ship it answered by local", again.Ask)
	}
	flash, err := browsertest.Run(tab, 10*time.Second, chromedp.Text(chromedp.CSS(`p.flash`)))
	if err != nil || !strings.Contains(flash, "Ship it") || !strings.Contains(flash, question) {
		t.Errorf("after the answer the page says %q (%v), want the question and its answer", flash, err)
	}
	if n, _ := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#inbox-list li").length`)); n != 0 {
		t.Errorf("the inbox still lists %d asks after the answer", n)
	}
	if p := tab.Problems(); len(p) > 0 {
		t.Errorf("the console's pages reported problems: %q", p)
	}
}

// testConsoleApprovesARun: an agent's workflow run suspends on its
// approval node; the approval's ask appears in the inbox naming the run;
// the owner approves it there; the run completes, and the runs page draws
// its graph with every node completed, each node's output and the link to
// its workflow in the Temporal UI.
func testConsoleApprovesARun(t *testing.T, c *consoleMesh) {
	tab := c.tab(t)
	id := createWorkflow(t, c.agent, map[string]any{"name": "publish-report", "description": "Ask the owner, then open the publishing task.",
		"definition": map[string]any{"nodes": []any{
			map[string]any{"id": "start", "start": map[string]any{"next": "approve"}},
			map[string]any{"id": "approve", "title": "The owner approves", "approval": map[string]any{"question": "Publish the weekly report?", "next": "publish"}},
			map[string]any{"id": "publish", "title": "Open the publishing task",
				"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "Publish the weekly report"}, "next": "done"}},
			map[string]any{"id": "done", "end": map[string]any{}},
		}}})
	var started runData
	okData(t, callTool(t, c.agent, "workflows_run", map[string]any{"workflow_id": id, "wait_seconds": 0}), &started)
	runID := started.Run.RunID

	// The approval's ask appears without a reload, naming its run.
	link := fmt.Sprintf(`#inbox-list li .run a[href="/runs/%s"]`, runID)
	if err := tab.Do(60*time.Second, chromedp.WaitVisible(chromedp.CSS(link))); err != nil {
		t.Fatalf("the run's approval did not appear in the inbox naming run %s: %v", runID, err)
	}
	askID, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).closest("li").id`, link)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Do(30*time.Second,
		chromedp.Click(chromedp.CSS(`#`+askID+` button.option[value="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	); err != nil {
		t.Fatalf("approve from the inbox: %v", err)
	}
	done := awaitRun(t, c.agent, runID, "completed", func(d runData) bool {
		return d.Run.Status != "RUN_STATUS_RUNNING" && d.Run.Status != "RUN_STATUS_SUSPENDED"
	})
	if done.Run.Status != "RUN_STATUS_COMPLETED" {
		t.Fatalf("the approved run is %s: %+v", done.Run.Status, done.Run.Error)
	}

	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/runs/"+runID), chromedp.WaitVisible(chromedp.CSS("#graph"))); err != nil {
		t.Fatalf("the run's page: %v", err)
	}
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Status   string   `json:"status"`
		Nodes    []string `json:"nodes"`
		Answer   string   `json:"answer"`
		Task     string   `json:"task"`
		Temporal string   `json:"temporal"`
	}](`({status: document.querySelector("#run-status").textContent,
		nodes: Array.from(document.querySelectorAll("#graph g.node")).map(g => g.id + "=" + g.querySelector(".node-status").textContent),
		answer: document.querySelector("#row-approve pre").textContent,
		task: document.querySelector("#row-publish pre").textContent,
		temporal: document.querySelector("#temporal-link").href})`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node-start=completed", "node-approve=completed", "node-publish=completed", "node-done=completed"}
	if got.Status != "completed" || strings.Join(got.Nodes, " ") != strings.Join(want, " ") ||
		!strings.Contains(got.Answer, `"answered_by": "local"`) || !strings.Contains(got.Task, "Publish the weekly report") ||
		!strings.Contains(got.Temporal, "/namespaces/default/workflows?query=WorkflowId%3D%22"+strings.ReplaceAll(done.Run.TemporalWorkflowID, "/", "%2F")+"%22") {
		t.Errorf("the run's page shows %+v, want it completed, every node completed with its output, and the Temporal UI link", got)
	}
	if err := tab.Screenshot(consoleShot(t, "console-run.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "a run's page")
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/runs"), chromedp.WaitVisible(chromedp.CSS("#"+runID))); err != nil {
		t.Fatalf("the runs page: %v", err)
	}
	checkAccessible(t, tab, "the runs page")
	if p := tab.Problems(); len(p) > 0 {
		t.Errorf("the console's pages reported problems: %q", p)
	}
}

// scheduleData is the data of the schedules tools' results.
type scheduleData struct {
	Schedule struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		Decision struct {
			DecidedBy string `json:"decided_by"`
			Note      string `json:"note"`
		} `json:"decision"`
	} `json:"schedule"`
}

// testConsoleDecidesSchedules: two schedules wait for approval; the inbox
// shows each spec in words and its next runs as the schedules contract's
// preview says; one approved from the console runs, the other denied
// never does.
func testConsoleDecidesSchedules(t *testing.T, c *consoleMesh) {
	tab := c.tab(t)
	create := func(desc string) string {
		var d scheduleData
		okData(t, callTool(t, c.agent, "schedules_create", map[string]any{
			"interval_seconds": 2, "description": desc,
			"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": desc}},
		}), &d)
		return d.Schedule.ID
	}
	approve, deny := create("Open the daily triage task"), create("Open a task every two seconds forever")
	for _, id := range []string{approve, deny} {
		if err := tab.Do(30*time.Second, chromedp.WaitVisible(chromedp.CSS("#"+id+" .summary"))); err != nil {
			t.Fatalf("schedule %s did not appear in the inbox: %v", id, err)
		}
	}
	if !stayed(t, tab) {
		t.Error("the page was reloaded to show the schedules")
	}
	var preview struct {
		Summary  string   `json:"summary"`
		RunTimes []string `json:"run_times"`
	}
	okData(t, callTool(t, c.agent, "schedules_preview", map[string]any{"interval_seconds": 2}), &preview)
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Summary string `json:"summary"`
		Runs    int    `json:"runs"`
		Args    string `json:"args"`
	}](fmt.Sprintf(`({summary: document.querySelector("#%s .summary").textContent,
		runs: document.querySelectorAll("#%s .runs li").length,
		args: document.querySelector("#%s .args").textContent})`, approve, approve, approve)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary != preview.Summary || got.Runs != 5 || !strings.Contains(got.Args, "Open the daily triage task") {
		t.Errorf("the inbox shows %+v, want the preview's %q, 5 next runs and the call's arguments", got, preview.Summary)
	}
	if err := tab.Screenshot(consoleShot(t, "console-schedules.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "the inbox with schedules to approve")

	decide := func(id, button, reason string) {
		t.Helper()
		if err := tab.Do(30*time.Second,
			chromedp.SendKeys(chromedp.CSS("#reason-"+id), reason),
			chromedp.Click(chromedp.CSS("#"+id+` input[name="confirm"]`)),
			chromedp.Click(chromedp.CSS("#"+id+" button."+button)),
			// The page after the decision no longer lists the schedule;
			// the flash of an earlier decision is on the page before it.
			chromedp.WaitNotPresent(chromedp.CSS("#"+id)),
			chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
		); err != nil {
			t.Fatalf("%s schedule %s from the console: %v", button, id, err)
		}
	}
	decide(approve, "approve", "the triage task is wanted daily")
	decide(deny, "deny", "far too often")
	// The denied schedule would have run by the time the approved one
	// runs an interval after the denial.
	wouldHaveRun := time.Now().Add(2 * time.Second)

	status := func(id string) scheduleData {
		var d scheduleData
		okData(t, callTool(t, c.agent, "schedules_get", map[string]any{"schedule_id": id}), &d)
		return d
	}
	if d := status(approve); d.Schedule.Status != "SCHEDULE_STATUS_ACTIVE" || d.Schedule.Decision.DecidedBy != "local" || d.Schedule.Decision.Note != "the triage task is wanted daily" {
		t.Errorf("the approved schedule is %+v", d.Schedule)
	}
	if d := status(deny); d.Schedule.Status != "SCHEDULE_STATUS_DENIED" || d.Schedule.Decision.Note != "far too often" {
		t.Errorf("the denied schedule is %+v", d.Schedule)
	}
	// The approved one runs; the denied one never does.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var runs struct {
			Executions []struct {
				Status        string    `json:"status"`
				ScheduledTime time.Time `json:"scheduled_time"`
			} `json:"executions"`
		}
		okData(t, callTool(t, c.agent, "schedules_executions", map[string]any{"schedule_id": approve}), &runs)
		if len(runs.Executions) > 0 && runs.Executions[0].Status == "EXECUTION_STATUS_SUCCEEDED" && runs.Executions[0].ScheduledTime.After(wouldHaveRun) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved schedule did not run within 60s: %+v", runs.Executions)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var denied struct {
		Executions []any `json:"executions"`
	}
	okData(t, callTool(t, c.agent, "schedules_executions", map[string]any{"schedule_id": deny}), &denied)
	if len(denied.Executions) != 0 {
		t.Errorf("the denied schedule ran %d times", len(denied.Executions))
	}
	if p := tab.Problems(); len(p) > 0 {
		t.Errorf("the console's pages reported problems: %q", p)
	}
	// Stop the approved schedule's runs for the tests after this one.
	callTool(t, c.agent, "schedules_delete", map[string]any{"schedule_id": approve})
}

// testConsoleGrantsCredits: a grant without a reason is refused by the
// pipeline, said in the form's words, and the form comes back as typed; with the reason it
// is applied once — the balance moves by the amount, the ledger has one
// entry — and the audit trail records it with the reason.
func testConsoleGrantsCredits(t *testing.T, c *consoleMesh) {
	var before struct {
		Balance json.Number `json:"balance"`
	}
	okData(t, callTool(t, c.agent, "credits_balance", map[string]any{"wallet": "local"}), &before)
	tab := c.browser.Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/credits"), chromedp.WaitVisible(chromedp.CSS("#grant-send"))); err != nil {
		t.Fatalf("the credits page: %v", err)
	}
	reference, err := browsertest.Run(tab, 10*time.Second, chromedp.Value(chromedp.CSS("#grant-reference")))
	if err != nil || !strings.HasPrefix(reference, "console-") {
		t.Fatalf("the grant form's reference is %q (%v)", reference, err)
	}
	if err := tab.Do(30*time.Second,
		chromedp.SendKeys(chromedp.CSS("#grant-wallet"), "local"),
		chromedp.SendKeys(chromedp.CSS("#grant-amount"), "250"),
		chromedp.SendKeys(chromedp.CSS("#grant-note"), "welcome credits"),
		chromedp.Click(chromedp.CSS(`#grant input[name="confirm"]`)),
		chromedp.Click(chromedp.CSS("#grant-send")),
		chromedp.WaitVisible(chromedp.CSS("#grant-error")),
	); err != nil {
		t.Fatalf("a grant without a reason: %v", err)
	}
	kept, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Error, Wallet, Amount, Reference, Note string
		Confirm                                bool
	}](`({Error: document.querySelector("#grant-error").textContent, Wallet: document.querySelector("#grant-wallet").value,
		Amount: document.querySelector("#grant-amount").value, Reference: document.querySelector("#grant-reference").value,
		Note: document.querySelector("#grant-note").value, Confirm: document.querySelector('#grant input[name="confirm"]').checked})`))
	if err != nil {
		t.Fatal(err)
	}
	if kept.Error != "Nothing was granted: Give a reason: it is recorded in the audit trail." || kept.Wallet != "local" || kept.Amount != "250" || kept.Reference != reference || kept.Note != "welcome credits" || !kept.Confirm {
		t.Errorf("the refused grant's page shows %+v, want the refusal asking for a reason and the form as typed", kept)
	}
	if err := tab.Screenshot(consoleShot(t, "console-credits.png")); err != nil {
		t.Fatal(err)
	}
	checkAccessible(t, tab, "the credits page with a refused grant")
	var same struct {
		Balance json.Number `json:"balance"`
	}
	okData(t, callTool(t, c.agent, "credits_balance", map[string]any{"wallet": "local"}), &same)
	if same.Balance != before.Balance {
		t.Fatalf("the refused grant moved the balance from %s to %s", before.Balance, same.Balance)
	}

	if err := tab.Do(30*time.Second,
		chromedp.SendKeys(chromedp.CSS("#grant-reason"), "welcome credits for the console test"),
		chromedp.Click(chromedp.CSS("#grant-send")),
		chromedp.WaitVisible(chromedp.CSS("#granted-balance")),
	); err != nil {
		t.Fatalf("a grant with a reason: %v", err)
	}
	b, _ := before.Balance.Int64()
	want := strconv.FormatInt(b+250, 10)
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Flash, Row string
		Entries    int
	}](fmt.Sprintf(`({Flash: document.querySelector("#granted-balance").textContent,
		Row: document.querySelector("#wallet-local .balance").textContent,
		Entries: Array.from(document.querySelectorAll("#ledger .reference")).filter(e => e.textContent === %q).length})`, reference)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Flash != want || !strings.HasPrefix(got.Row, want) || got.Entries != 1 {
		t.Errorf("after the grant the page shows %+v, want balance %s in the flash and the wallet's row, and one ledger entry", got, want)
	}
	var audit struct {
		Records []struct {
			Tool   string `json:"tool"`
			Reason string `json:"reason"`
		} `json:"records"`
	}
	okData(t, callTool(t, c.agent, "audit_list", map[string]any{"tool": "credits_grant"}), &audit)
	n := 0
	for _, r := range audit.Records {
		if r.Reason == "welcome credits for the console test" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the audit trail has %d credits_grant records with the reason, want 1: %+v", n, audit.Records)
	}
	for _, p := range tab.Problems() {
		if !strings.Contains(p, "status of 400") || !strings.Contains(p, "/credits/grant") {
			t.Errorf("the console's pages reported a problem: %q", p)
		}
	}
}

// testConsoleShowsACutTail: once a signed checkpoint covers the trail's
// last record, that record is cut off the audit store (its append-only
// trigger dropped, the head rewritten to the record before: the tamper a
// hash chain alone misses); the audit page then says the trail is broken,
// truncated at that record.
func testConsoleShowsACutTail(t *testing.T, c *consoleMesh) {
	var last int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		var v struct {
			Intact bool `json:"intact"`
			Head   struct {
				Seq json.Number `json:"seq"`
			} `json:"head"`
			Checkpoint struct {
				Seq json.Number `json:"seq"`
			} `json:"checkpoint"`
		}
		okData(t, callTool(t, c.agent, "audit_verify", map[string]any{}), &v)
		head, _ := v.Head.Seq.Int64()
		if cp, _ := v.Checkpoint.Seq.Int64(); v.Intact && head > 1 && cp == head {
			last = head
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no signed checkpoint covered the trail's head within 60s: %+v", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	db, err := sqldb.Open(t.Context(), filepath.Join(c.up.Data, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DROP TRIGGER audit_records_no_delete`,
		fmt.Sprintf(`DELETE FROM audit_records WHERE seq = %d`, last),
		fmt.Sprintf(`UPDATE audit_head SET seq = %d, hash = (SELECT hash FROM audit_records WHERE seq = %d) WHERE id = 1`, last-1, last-1),
	} {
		if _, err := db.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tab := c.browser.Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(strings.TrimSuffix(c.url, "/")+"/audit"), chromedp.WaitVisible(chromedp.CSS("#verify-result"))); err != nil {
		t.Fatalf("the audit page: %v", err)
	}
	got, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[struct {
		Title, Result string
	}](`({Title: document.querySelector("#verify-title").textContent, Result: document.querySelector("#verify-result").textContent})`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "The trail is broken" || !strings.Contains(got.Result, "First problem: truncated at record") || !strings.Contains(got.Result, fmt.Sprintf("record %d", last)) {
		t.Errorf("after the cut the audit page shows %+v, want the trail broken, truncated at record %d", got, last)
	}
	checkAccessible(t, tab, "the audit page of a cut trail")
	if p := tab.Problems(); len(p) > 0 {
		t.Errorf("the console's pages reported problems: %q", p)
	}
}
