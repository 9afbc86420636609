package browsertest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
)

// Violation is one accessibility rule a page breaks, as axe-core reports
// it.
type Violation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	// Nodes are the CSS selectors of the elements that break it.
	Nodes []string `json:"nodes"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s (%s): %s at %s", v.ID, v.Impact, v.Help, strings.Join(v.Nodes, ", "))
}

// AxeResult is what axe-core found on one page.
type AxeResult struct {
	// Violations are every rule the page breaks; Passes and Incomplete
	// count the rules it passes and those axe could not decide.
	Violations []Violation `json:"violations"`
	Passes     int         `json:"passes"`
	Incomplete int         `json:"incomplete"`
}

// Serious are the violations of serious or critical impact.
func (r AxeResult) Serious() []Violation {
	var out []Violation
	for _, v := range r.Violations {
		if v.Impact == "serious" || v.Impact == "critical" {
			out = append(out, v)
		}
	}
	return out
}

// axeSource is axe-core's script, pinned in axe/package-lock.json and
// installed from the npm registry once per lock file (nodetest.Install).
func axeSource(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("browsertest: cannot find its own source directory")
	}
	dir := nodetest.Install(tb, filepath.Join(filepath.Dir(file), "axe"))
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// Axe checks the page the tab shows with axe-core against the WCAG 2.x A
// and AA rules and best practices. The script is evaluated through the
// DevTools protocol, which a page's Content-Security-Policy does not
// restrict, and changes nothing on the page.
func (t *Tab) Axe(tb testing.TB) AxeResult {
	tb.Helper()
	src := axeSource(tb)
	if err := t.Do(30*time.Second, chromedp.Evaluate[chromedp.Void](src)); err != nil {
		tb.Fatalf("load axe-core: %v", err)
	}
	res, err := Run(t, 60*time.Second, chromedp.Evaluate[AxeResult](`axe.run(document, {
		runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]},
		resultTypes: ["violations"]
	}).then(r => ({
		violations: r.violations.map(v => ({id: v.id, impact: v.impact || "", help: v.help,
			nodes: v.nodes.map(n => n.target.join(" "))})),
		passes: r.passes.length, incomplete: r.incomplete.length
	}))`, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.Fatalf("run axe-core: %v", err)
	}
	return res
}
