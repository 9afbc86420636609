//go:build conformance

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

// The protocol versions the lane runs the suite's server scenarios at, and
// the name the table gives the tasks extension's scenarios, which run on
// the 2026-07-28 (stateless) protocol without a --spec-version.
const (
	versionSession   = "2025-11-25"
	versionStateless = "2026-07-28"
	versionExtension = "extension"
)

// extensionPrefixes pick the extension scenarios the lane runs, by name:
// the MCP Tasks extension's and the Skills extension's (SEP-2640, in no
// requirements list of the suite); the suite's other extensions are out of
// its scope.
var extensionPrefixes = []string{"tasks-", "sep-2640-"}

// runsExtension reports whether the lane runs the extension scenario name.
func runsExtension(name string) bool {
	return slices.ContainsFunc(extensionPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// scenarioTimeout bounds one scenario (the suite's own --timeout), and
// suiteTimeout one process of the suite.
const (
	scenarioTimeout = 60 * time.Second
	suiteTimeout    = 5 * time.Minute
)

// run is one scenario at one version.
type run struct{ scenario, version string }

// outcome is what the suite's checks of one run say.
type outcome struct {
	passed, failed, warnings int
	// failures are the ids and messages of the failed checks; failedIDs
	// their ids.
	failures  []string
	failedIDs []string
}

// TestConformance runs the suite against the mesh and compares every run
// with expected-failures.yaml.
func TestConformance(t *testing.T) {
	expected, err := readExpected(filepath.Join(suite.root, "conformance", "expected-failures.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := listRuns()
	if err != nil {
		t.Fatal(err)
	}
	if s := os.Getenv("SCENARIO"); s != "" {
		v := os.Getenv("VERSION")
		runs = slices.DeleteFunc(runs, func(r run) bool { return r.scenario != s || (v != "" && r.version != v) })
		if len(runs) == 0 {
			t.Fatalf("the suite has no server scenario %q at version %q", s, v)
		}
	}
	for _, e := range expected {
		if !slices.ContainsFunc(runs, func(r run) bool { return e.matches(r) }) && os.Getenv("SCENARIO") == "" {
			t.Errorf("expected-failures.yaml lists %s at %s, which the suite does not run", e.Scenario, e.versionText())
		}
	}

	m := startMesh(t, filepath.Join(suite.dir, "mesh"))
	results := filepath.Join(suite.work, "results")
	if err := os.RemoveAll(results); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	outcomes, err := runAll(m.mcpURL, runs, os.Getenv("SCENARIO") == "", results)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)

	var rows []row
	for _, r := range runs {
		o, ran := outcomes[r]
		e := findExpected(expected, r)
		rows = append(rows, judge(r, o, ran, e))
	}
	printTable(os.Stdout, rows, took, results)
	var failed []string
	for _, rw := range rows {
		if !rw.ok {
			failed = append(failed, rw.scenario+" at "+rw.version+" ("+rw.status+")")
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d runs failed (the table above says why): %s", len(failed), strings.Join(failed, ", "))
	}
}

// scenarioLine is one server scenario of `conformance list --server`:
// "  - tools-call-image [2025-06-18,2025-11-25,2026-07-28]".
var scenarioLine = regexp.MustCompile(`^\s+- (\S+) \[([^\]]+)\]$`)

// listRuns is every run of the lane, from the suite's own list: each server
// scenario at 2025-11-25 and 2026-07-28 when it applies there, and the
// tasks extension's scenarios.
func listRuns() ([]run, error) {
	out, err := exec.Command(suite.node, suite.bundle, "list", "--server").Output()
	if err != nil {
		return nil, fmt.Errorf("list the suite's server scenarios: %w", err)
	}
	var runs []run
	inServer := false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Server scenarios") {
			inServer = true
			continue
		}
		if !strings.HasPrefix(line, " ") {
			inServer = inServer && strings.TrimSpace(line) == ""
			continue
		}
		sm := scenarioLine.FindStringSubmatch(line)
		if !inServer || sm == nil {
			continue
		}
		versions := strings.Split(sm[2], ",")
		for _, v := range []string{versionSession, versionStateless} {
			if slices.Contains(versions, v) {
				runs = append(runs, run{sm[1], v})
			}
		}
		if slices.Contains(versions, versionExtension) && runsExtension(sm[1]) {
			runs = append(runs, run{sm[1], versionExtension})
		}
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("the suite listed no server scenarios:\n%s", out)
	}
	return runs, nil
}

// resultDir is a directory the suite writes one scenario's checks into:
// server-<scenario>-<ISO time with - for : and .>.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// runAll runs runs against url and reads their checks. In batches, one
// process of the suite runs every scenario a protocol version's
// requirements name (its start-up takes seconds): the 2026-07-28 set
// includes the tasks extension's scenarios. Any run the batches left out,
// and every run when batches is false, gets a process of its own.
func runAll(url string, runs []run, batches bool, results string) (map[run]outcome, error) {
	want := map[run]bool{}
	for _, r := range runs {
		want[r] = true
	}
	got := map[run]outcome{}
	if batches {
		for _, v := range []string{versionSession, versionStateless} {
			dir := filepath.Join(results, v)
			outs, err := runSuite(dir, "run the "+v+" requirements", "--url", url, "--requirements", v)
			if err != nil {
				return nil, err
			}
			for name, o := range outs {
				switch r := (run{name, v}); {
				case want[r]:
					got[r] = o
				case want[run{name, versionExtension}] && v == versionStateless:
					got[run{name, versionExtension}] = o
				}
			}
		}
	}
	for _, r := range runs {
		if _, ok := got[r]; ok {
			continue
		}
		args := []string{"--url", url, "--scenario", r.scenario}
		if r.version != versionExtension {
			args = append(args, "--spec-version", r.version)
		}
		dir := filepath.Join(results, r.version, r.scenario)
		outs, err := runSuite(dir, "run "+r.scenario+" at "+r.version, args...)
		if err != nil {
			return nil, err
		}
		if o, ok := outs[r.scenario]; ok {
			got[r] = o
		}
	}
	return got, nil
}

// runSuite runs the suite's server command with args, writing its results
// and its log (suite.log) into dir, and reads the checks of every scenario
// it ran.
func runSuite(dir, what string, args ...string) (map[string]outcome, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "suite.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args = append([]string{suite.bundle, "server", "-o", dir, "--timeout", fmt.Sprint(scenarioTimeout.Milliseconds())}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.node, args...)
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(logFile, &buf)
	cmd.Stderr = cmd.Stdout
	// Exit status 1 is a failed check, read below; anything else is the
	// suite's own trouble.
	if err := cmd.Run(); err != nil {
		if ee, isExit := err.(*exec.ExitError); !isExit || ee.ExitCode() != 1 {
			return nil, fmt.Errorf("%s: %v\n%s", what, err, tail(buf.String()))
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	got := map[string]outcome{}
	for _, e := range entries {
		sm := resultDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || sm == nil {
			continue
		}
		o, err := readChecks(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			return nil, err
		}
		got[sm[1]] = o
	}
	return got, nil
}

// check is one check record of the suite's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

func readChecks(path string) (outcome, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return outcome{}, err
	}
	var checks []check
	if err := json.Unmarshal(b, &checks); err != nil {
		return outcome{}, fmt.Errorf("%s: %w", path, err)
	}
	var o outcome
	for _, c := range checks {
		switch c.Status {
		case "SUCCESS":
			o.passed++
		case "FAILURE":
			o.failed++
			o.failures = append(o.failures, c.ID+": "+firstLine(c.ErrorMessage))
			o.failedIDs = append(o.failedIDs, c.ID)
		case "WARNING":
			o.warnings++
		}
	}
	return o, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// expectation is one entry of expected-failures.yaml: a scenario that may
// fail, at one version or (no version) at every version it runs at, and
// why. With checks, only those checks of the scenario may fail: a failure
// of any other check fails the lane.
type expectation struct {
	Scenario string   `yaml:"scenario"`
	Version  string   `yaml:"version"`
	Checks   []string `yaml:"checks"`
	Reason   string   `yaml:"reason"`
}

// unexpected are the failures of o that e does not list (every one, when e
// lists no checks: none).
func (e *expectation) unexpected(o outcome) []string {
	if len(e.Checks) == 0 {
		return nil
	}
	var out []string
	for i, id := range o.failedIDs {
		if !slices.Contains(e.Checks, id) {
			out = append(out, o.failures[i])
		}
	}
	return out
}

func (e expectation) matches(r run) bool {
	return e.Scenario == r.scenario && (e.Version == "" || e.Version == r.version)
}

func (e expectation) versionText() string {
	if e.Version == "" {
		return "every version"
	}
	return e.Version
}

func readExpected(path string) ([]expectation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []expectation
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&out); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, e := range out {
		if e.Scenario == "" || strings.TrimSpace(e.Reason) == "" {
			return nil, fmt.Errorf("%s: every entry needs a scenario and a reason: %+v", path, e)
		}
		switch e.Version {
		case "", versionSession, versionStateless, versionExtension:
		default:
			return nil, fmt.Errorf("%s: %s: version %q is none of %s, %s, %s", path, e.Scenario, e.Version, versionSession, versionStateless, versionExtension)
		}
	}
	return out, nil
}

func findExpected(expected []expectation, r run) *expectation {
	for i := range expected {
		if expected[i].matches(r) {
			return &expected[i]
		}
	}
	return nil
}

// row is one line of the table.
type row struct {
	scenario, version string
	o                 outcome
	status            string
	ok                bool
	why               string
}

// judge decides a run: it passes when no check failed and it is not listed
// as an expected failure; it is an expected failure when it failed and is
// listed; anything else fails the lane.
func judge(r run, o outcome, ran bool, e *expectation) row {
	rw := row{scenario: r.scenario, version: r.version, o: o}
	switch {
	case !ran:
		rw.status, rw.why = "NOT RUN", "the suite wrote no checks for it"
	case o.failed == 0 && e == nil:
		rw.status, rw.ok = "PASS", true
	case o.failed == 0:
		rw.status, rw.why = "STALE", "it passes, but expected-failures.yaml lists it: remove the entry"
	case e != nil && len(e.unexpected(o)) > 0:
		rw.status, rw.why = "FAIL", "checks expected-failures.yaml does not list: "+strings.Join(e.unexpected(o), "; ")
	case e != nil:
		rw.status, rw.ok = "EXPECTED FAILURE", true
		rw.why = e.Reason
	default:
		rw.status, rw.why = "FAIL", strings.Join(o.failures, "; ")
	}
	return rw
}

func printTable(w io.Writer, rows []row, took time.Duration, results string) {
	sort.SliceStable(rows, func(i, j int) bool { return versionOrder(rows[i].version) < versionOrder(rows[j].version) })
	fmt.Fprintf(w, "\nMCP conformance suite against the edge (%s; results in %s):\n\n", took.Round(time.Second), results)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tVERSION\tPASSED\tFAILED\tWARNINGS\tSTATUS\t")
	passed := map[string]int{}
	total := map[string]int{}
	for _, rw := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", rw.scenario, rw.version, rw.o.passed, rw.o.failed, rw.o.warnings, rw.status)
		total[rw.version]++
		if rw.status == "PASS" {
			passed[rw.version]++
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, v := range []string{versionSession, versionStateless, versionExtension} {
		if total[v] > 0 {
			fmt.Fprintf(w, "%s: %d of %d scenarios passed\n", v, passed[v], total[v])
		}
	}
	var notes []string
	for _, rw := range rows {
		if rw.status != "PASS" {
			notes = append(notes, fmt.Sprintf("  %s at %s (%s): %s", rw.scenario, rw.version, rw.status, rw.why))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNot passed:\n%s\n", strings.Join(notes, "\n"))
	}
}

func versionOrder(v string) int {
	switch v {
	case versionSession:
		return 0
	case versionStateless:
		return 1
	}
	return 2
}
