//go:build faults

package faults

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// The chaos run's flags (make chaos sets them; without -chaos.duration
// TestChaos is skipped, so make faults does not run it).
var (
	chaosDuration = flag.Duration("chaos.duration", 0, "how long the chaos workload runs (make chaos: 5m; 0 skips TestChaos)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "the seed of the fault schedule (0: drawn from the clock and printed)")
	chaosRate     = flag.Float64("chaos.rate", 6, "fault events per minute")
	chaosPostgres = flag.Bool("chaos.postgres", false, "every domain on PostgreSQL (a cluster of the run's own, crashed among the faults)")
	chaosSoak     = flag.Bool("chaos.soak", false, "no faults: sample each process's RSS and open descriptors, and bound their growth after the warm-up")
)

// domainsWithDB are the domains whose service keeps a database: on a
// -chaos.postgres run each gets a database of its own.
var domainsWithDB = []string{"agents", "audit", "credits", "memory", "messages", "owner", "projects", "remoteagents", "schedules", "tasks", "workflows"}

// TestChaos starts a mesh of its own as make run does, drives a mixed
// workload through the edge — reads and writes in every domain, keyed
// grants (elicited) and spends, messages with dedup, owner asks and
// workflow approvals answered by a simulated owner, a schedule firing,
// workflow runs, A2A messages (some followed over streams that resume
// after cuts) answered by a simulated agent — while a seeded schedule kills and freezes its processes
// (several at once), then drains and runs `toolmesh check` over the
// databases with the workload's log of acknowledged writes. Every answer
// is ok or a documented retryable error; every invariant holds.
func TestChaos(t *testing.T) {
	if *chaosDuration == 0 {
		t.Skip("the chaos run: make chaos (go test -tags faults -run TestChaos ./faults -args -chaos.duration 5m)")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	engine := "sqlite"
	if *chaosPostgres {
		engine = "postgres"
	}
	t.Logf("chaos: seed %d, %s, %s, %.1f fault events a minute (replay: -chaos.seed %d)", seed, engine, *chaosDuration, *chaosRate, seed)
	fmt.Printf("chaos seed: %d\n", seed)

	var env []string
	var pg *pgtest.Cluster
	if *chaosPostgres {
		pg = pgtest.StartWith(t, pgtest.Options{Durable: true})
		for _, d := range domainsWithDB {
			env = append(env, "TOOLMESH_"+strings.ToUpper(d)+"_DSN="+pg.NewDatabase(t))
		}
	}
	offset, err := porttest.Offset(append(porttest.Range(meshPortsLow, meshPortsHigh), temporalUIPort)...)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(suite.dir, "chaos")
	m, err := startMesh(dir, offset, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	m.waitReady(t, 2*time.Minute)

	in := &injector{m: m, pg: pg, busy: map[string]bool{}}
	fleet := fleetClient()
	w := &chaosWorkload{m: m, tag: fmt.Sprintf("c%d", seed%1e9), agent: "local", classes: map[string]int{}, codes: map[string]int{},
		plain:      connectMCPWith(t, m.mcpURL, "", nil, fleet),
		eliciting:  connectMCPWith(t, m.mcpURL, "", &mcp.ClientOptions{ElicitationHandler: confirmAdmin}, fleet),
		credits:    creditsv1connect.NewCreditsServiceClient(h2c(), m.services["credits"], bearer(m.token(t, "local"))),
		a2aPending: map[string]a2aWait{}}
	if w.a2a, err = a2aClient(t.Context(), m.a2aURL, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.a2a.Destroy() })
	w.frontDown = func(front string, start, end time.Time) bool {
		for _, f := range in.faults() {
			// In effect from the signal until the process served again, and a
			// second after: the client's connection pool still held the
			// dead process's connections.
			if f.Target == front && start.Before(f.Ended.Add(time.Second)) && end.After(f.Sent) {
				return true
			}
		}
		in.mu.Lock()
		down := in.busy[front]
		in.mu.Unlock()
		return down
	}
	if w.console, err = newConsoleOwner(m.consoleURL); err != nil {
		t.Fatal(err)
	}

	// What the workload needs first: the agent's workflow, and a schedule
	// that creates a task every 2 s once approved.
	var created workflowsv1.CreateResponse
	if err := protoData(callTool(w.plain, "workflows_create", faultWorkflow("chaos-"+w.tag), w.tag+"-workflow"), &created); err != nil {
		t.Fatal(err)
	}
	w.workflow = created.GetWorkflow().GetWorkflowId()
	scheduleKey := w.tag + "-schedule"
	var scheduleID string
	{
		o := callTool(w.plain, "schedules_create", map[string]any{"description": "chaos " + w.tag, "interval_seconds": 2,
			"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "chaos schedule " + w.tag}}}, scheduleKey)
		var res struct {
			Schedule struct {
				ID string `json:"id"`
			} `json:"schedule"`
		}
		if !o.ok() || json.Unmarshal(o.env.Data, &res) != nil {
			t.Fatalf("schedules_create: %s %s %v", o.code(), o.env.Message, o.err)
		}
		scheduleID = res.Schedule.ID
		if o := callTool(w.plain, "schedules_approve", map[string]any{"schedule_id": scheduleID, "confirm": true, "reason": "chaos"}, w.tag+"-approve"); !o.ok() {
			t.Fatalf("approve the schedule: %s %s %v", o.code(), o.env.Message, o.err)
		}
	}

	// A webhook subscriber to the asks' events, whose receiver is down for
	// a stretch of the run (a quarter in, for a third of it, at most a
	// minute).
	out := min(time.Minute, *chaosDuration/3)
	subscriber := startEventsSubscriber(t, m.mcpURL, fleet, time.Now().Add(*chaosDuration/4), time.Now().Add(*chaosDuration/4+out), chaosEventNames...)

	targets := chaosTargets(m.status(t), *chaosPostgres)
	var events []chaosEvent
	if !*chaosSoak {
		events = planChaos(seed, targets, *chaosDuration, *chaosRate)
	}
	t.Logf("chaos: %d fault events over %s, targets %v", len(events), *chaosDuration, targets)

	start := time.Now()
	stop := make(chan struct{})
	var soak sampler
	sampling := &sync.WaitGroup{}
	if *chaosSoak {
		sampling = soak.run(m, stop)
	}
	var wg sync.WaitGroup
	loops := []struct {
		period time.Duration
		fn     func(int)
	}{
		{150 * time.Millisecond, w.tasks},
		{200 * time.Millisecond, w.memory},
		{300 * time.Millisecond, w.messages},
		{500 * time.Millisecond, w.grants},
		{700 * time.Millisecond, w.spends},
		{time.Second, w.asks},
		{time.Second, w.a2aSend},
		{3 * time.Second, w.runs},
		{2 * time.Second, w.views},
	}
	for _, l := range loops {
		wg.Go(func() { every(l.period, stop, l.fn) })
	}
	ownerStop := make(chan struct{})
	var ownerWG sync.WaitGroup
	ownerWG.Go(func() {
		// The owner answers from the console and from an MCP client in turn.
		every(time.Second, ownerStop, func(n int) {
			if n%2 == 0 {
				w.consoleAnswers()
			} else {
				w.owner()
			}
			w.a2aAgent()
		})
	})
	in.run(t, start, events)
	time.Sleep(time.Until(start.Add(*chaosDuration)))
	close(stop)
	wg.Wait()
	in.wg.Wait()
	sampling.Wait()
	workloadEnded := time.Now()
	m.waitReady(t, 2*time.Minute)
	if o := callTool(w.plain, "schedules_pause", map[string]any{"schedule_id": scheduleID}, w.tag+"-pause"); !o.ok() {
		t.Errorf("pause the schedule: %s %s %v", o.code(), o.env.Message, o.err)
	}
	// Drain: the owner answers until no ask is pending and every run of
	// the workload has ended, the agent until every A2A message has its
	// answer; every followed A2A stream then ends.
	eventually(t, 3*time.Minute, "every ask answered, every run ended and every A2A message answered", func() bool {
		return w.owner() == 0 && w.runsEnded(t) && w.a2aAgent() == 0
	})
	close(ownerStop)
	ownerWG.Wait()
	w.a2aStreams.Wait()
	drained := time.Since(workloadEnded)

	subscriber.check(t, m.mcpURL, fleet)

	// The books.
	faults := in.faults()
	ackPath, faultPath := filepath.Join(dir, "acked.jsonl"), filepath.Join(dir, "faults.jsonl")
	w.mu.Lock()
	acked := slices.Clone(w.acked)
	w.mu.Unlock()
	if err := chaoslog.Write(ackPath, acked); err != nil {
		t.Fatal(err)
	}
	if err := chaoslog.Write(faultPath, faults); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) ([]byte, error) {
		cmd := exec.Command(suite.bin, append([]string{"check", "--data", m.data, "--acked", ackPath, "--faults", faultPath}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		return out, err
	}
	text, checkErr := check()
	t.Logf("toolmesh check:\n%s", text)
	raw, _ := check("--json")
	var res struct {
		Checks []struct {
			Invariant  string
			Items      int
			Violations int
			Skipped    bool
		}
	}
	_ = json.Unmarshal(raw, &res)
	held, checked, items := 0, 0, 0
	for _, c := range res.Checks {
		if !c.Skipped {
			checked++
			items += c.Items
			if c.Violations == 0 {
				held++
			}
		}
	}

	// The figures (docs/faults.md, the chaos table).
	byKind, byTarget := map[string]int{}, map[string]int{}
	var recovery []float64
	for _, f := range faults {
		byKind[f.Kind]++
		byTarget[f.Target]++
		if f.Kind != faultFreeze && !f.Ended.IsZero() {
			recovery = append(recovery, f.Ended.Sub(f.Sent).Seconds())
		}
	}
	slices.Sort(recovery)
	// The slowest recoveries, with what else was down when they began.
	slowest := slices.DeleteFunc(slices.Clone(faults), func(f chaoslog.Fault) bool { return f.Kind == faultFreeze || f.Ended.IsZero() })
	slices.SortFunc(slowest, func(a, b chaoslog.Fault) int { return cmp.Compare(b.Ended.Sub(b.Sent), a.Ended.Sub(a.Sent)) })
	for _, f := range slowest[:min(3, len(slowest))] {
		var beside []string
		for _, g := range faults {
			if g != f && g.Sent.Before(f.Ended) && (g.Ended.IsZero() || g.Ended.After(f.Sent)) {
				beside = append(beside, g.Kind+" "+g.Target)
			}
		}
		t.Logf("slow recovery: %s %s at %s took %.2f s; down or frozen meanwhile: %v", f.Kind, f.Target, f.Sent.Sub(start).Round(time.Second), f.Ended.Sub(f.Sent).Seconds(), beside)
	}
	notRecovered := 0
	for _, f := range faults {
		if f.Ended.IsZero() && f.Note == "" {
			notRecovered++
		}
	}
	w.mu.Lock()
	classes, codes, calls, violations := maps.Clone(w.classes), maps.Clone(w.codes), len(w.calls), slices.Clone(w.violations)
	w.mu.Unlock()
	for _, o := range violations {
		t.Logf("violation: %s key %q answered %s: %s %v", o.tool, o.key, o.code(), o.env.Message, o.err)
	}
	figure(t, "seed (engine, duration, rate)", fmt.Sprintf("%d (%s, %s, %.0f/min)", seed, engine, *chaosDuration, *chaosRate), "any", true)
	if *chaosSoak {
		soak.check(t, start.Add(*chaosDuration/5), start.Add(*chaosDuration*4/5))
	} else {
		figure(t, "faults injected by kind (skipped: target still down)", fmt.Sprintf("%v (%d) in %d events", byKind, in.missed, len(events)), "> 0", len(faults) > 0)
		figure(t, "faults by target", fmt.Sprint(byTarget), "any", true)
	}
	figure(t, "killed processes not ready again within 2 min", notRecovered, "0", notRecovered == 0)
	if len(recovery) > 0 {
		p50, p99 := percentile(recovery, 50), percentile(recovery, 99)
		report(t, "seconds to recover after a kill or database crash (p50 / p99 / max)", fmt.Sprintf("%.2f / %.2f / %.2f", p50, p99, recovery[len(recovery)-1]), "p99 <= 10", p99 <= 10)
	}
	figure(t, "calls attempted (ok / retryable / violation)", fmt.Sprintf("%d (%d / %d / %d)", calls, classes[answerOK], classes[answerRetryable], classes[answerViolation]),
		"0 violations", classes[answerViolation] == 0)
	report(t, "calls without an answer within the client's 60 s", classes[answerLate], "0", classes[answerLate] == 0)
	figure(t, "answers by code", fmt.Sprint(codes), "any", true)
	retryableBy := map[string]int{}
	for _, o := range w.calls {
		if c := o.code(); retryableCodes[c] || c == "transport" {
			retryableBy[o.tool+" "+c]++
		}
		if o.code() == "transport" && errors.Is(o.err, context.DeadlineExceeded) && !w.frontDown(o.frontName(), o.start, o.end) {
			t.Logf("late: %s key %q from %s, no answer in %s", o.tool, o.key, o.start.Sub(start).Round(time.Second), o.end.Sub(o.start).Round(time.Second))
		}
	}
	figure(t, "retryable answers by call", fmt.Sprint(retryableBy), "any", true)
	figure(t, "writes acknowledged", len(acked), "> 0", len(acked) > 0)
	a2aCalls := map[string]int{}
	for _, o := range w.calls {
		if strings.HasPrefix(o.tool, "a2a ") {
			a2aCalls[strings.TrimPrefix(o.tool, "a2a ")]++
		}
	}
	figure(t, "A2A calls by method (streams followed)", fmt.Sprintf("%v (%d)", a2aCalls, w.a2aFollowed.Load()), "> 0 sends", a2aCalls["SendMessage"] > 0)
	surfaces := map[string]int{}
	for _, o := range w.calls {
		if o.front == "console" || o.tool == "resources/read ask card" || o.tool == "connections_list" {
			surfaces[o.tool+" "+o.code()]++
		}
	}
	figure(t, "console forms and app host reads by outcome", fmt.Sprint(surfaces), "> 0 answers from the console", surfaces["console answer ok"] > 0)
	report(t, "seconds to drain after the workload (asks answered, runs ended)", drained.Seconds(), "<= 60", drained <= time.Minute)
	figure(t, "invariants checked / held (items checked)", fmt.Sprintf("%d / %d (%d)", checked, held, items), "all held", checkErr == nil && checked > 0 && held == checked)
	if checkErr != nil {
		t.Errorf("toolmesh check: %v", checkErr)
	}
}

// runsEnded reports whether every run the workload started has ended.
func (w *chaosWorkload) runsEnded(t *testing.T) bool {
	t.Helper()
	w.mu.Lock()
	var runs []string
	for _, a := range w.acked {
		if a.Domain == "workflows" {
			runs = append(runs, a.ID)
		}
	}
	w.mu.Unlock()
	for _, id := range runs {
		var res workflowsv1.GetRunResponse
		if protoData(callTool(w.plain, "workflows_get_run", map[string]any{"run_id": id}, ""), &res) != nil {
			return false
		}
		if s := res.GetRun().GetStatus(); s == workflowsv1.RunStatus_RUN_STATUS_RUNNING || s == workflowsv1.RunStatus_RUN_STATUS_SUSPENDED {
			return false
		}
	}
	return true
}
