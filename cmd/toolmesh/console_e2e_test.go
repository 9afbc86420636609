package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/browsertest"
)

// consoleShot is where a console test's screenshot goes: docs/images with
// -update (docs/console.md shows them), else the test's own directory.
func consoleShot(t *testing.T, name string) string {
	if *updateDocs {
		return filepath.Join("..", "..", "docs", "images", name)
	}
	return filepath.Join(t.TempDir(), name)
}

// TestConsoleInboxAnswersAnAgentsAsk: against the processes `toolmesh up`
// starts, an agent asks the owner through the edge; the ask appears in
// the console's inbox without a reload; the owner clicks an option; the
// agent's waiting call returns that answer, once, and the ask records who
// answered.
func TestConsoleInboxAnswersAnAgentsAsk(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the built binary, a Temporal dev server and Chromium")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	consoleURL := m.Link(t, linkConsole)
	agent := mcpSessionTo(t, m.Link(t, linkMCP))

	b := browsertest.Start(t)
	tab := b.Tab(t)
	if err := tab.Do(30*time.Second,
		chromedp.Navigate(consoleURL),
		chromedp.WaitVisible(chromedp.CSS("#inbox-count")),
		// A mark that a reload would wipe.
		chromedp.Evaluate[chromedp.Void](`window.stayed = true`),
	); err != nil {
		t.Fatal(err)
	}
	if n, err := browsertest.Run(tab, 10*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#inbox-list li").length`)); err != nil || n != 0 {
		t.Fatalf("a fresh mesh's inbox lists %d asks (%v), want none", n, err)
	}

	// The agent asks and waits for the answer.
	const question = "Deploy release 1.4 to production tonight?"
	type result struct {
		env envelope
		err error
	}
	answered := make(chan result, 2)
	go func() {
		env, err := tryCallTool(agent, &mcp.CallToolParams{Name: "owner_ask", Arguments: map[string]any{
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
		Stayed   bool   `json:"stayed"`
		Question string `json:"question"`
		Agent    string `json:"agent"`
		Options  string `json:"options"`
	}](`({stayed: window.stayed === true,
		question: document.querySelector("#inbox-list li .question").textContent,
		agent: document.querySelector("#inbox-list li .agent").textContent,
		options: Array.from(document.querySelectorAll("#inbox-list li button.option")).map(b => b.value).join("|")})`))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Stayed {
		t.Error("the page was reloaded to show the ask")
	}
	if got.Question != question || got.Agent != "local" || got.Options != "Ship it|Hold" {
		t.Errorf("the inbox shows %+v, want the question, agent local and options Ship it|Hold", got)
	}
	if err := tab.Screenshot(consoleShot(t, "console-inbox.png")); err != nil {
		t.Fatal(err)
	}

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
	if again := getAsk(t, agent, d.Ask.AskID); again.Ask.Answer != "Ship it" || again.Ask.AnsweredBy != "local" {
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
