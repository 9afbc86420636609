//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/supervise"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
)

// Fault kinds of a chaos schedule.
const (
	faultKill   = "kill"     // SIGKILL; up restarts the process
	faultFreeze = "freeze"   // SIGSTOP, then SIGCONT after a hold
	faultDB     = "db-crash" // PostgreSQL stopped as a crash would, started again a second later
)

// Targets that are not processes up runs under their own name.
const (
	targetTemporal = "temporal-server" // the dev server under `toolmesh temporal-dev`
	targetDB       = "postgres"        // the PostgreSQL cluster of a -chaos.postgres run
)

// chaosEvent is one moment of a chaos schedule: one or more faults at once.
type chaosEvent struct {
	at     time.Duration // from the start of the workload
	faults []plannedFault
}

type plannedFault struct {
	kind, target string
	hold         time.Duration // a freeze's length
}

// planChaos draws the fault schedule of a run from seed alone: the same
// seed, targets, duration and rate give the same schedule. rate is faults
// per minute (events of one to three faults each); the first and last 5 s
// are left quiet so that the workload starts and drains.
func planChaos(seed uint64, targets []string, duration time.Duration, rate float64) []chaosEvent {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	span := duration - 10*time.Second
	n := int(rate * duration.Minutes())
	if span <= 0 || n == 0 {
		return nil
	}
	events := make([]chaosEvent, 0, n)
	for range n {
		ev := chaosEvent{at: 5*time.Second + time.Duration(rng.Int64N(int64(span)))}
		size := 1
		switch r := rng.Float64(); {
		case r < 0.1:
			size = 3
		case r < 0.35:
			size = 2
		}
		picked := map[string]bool{}
		for len(ev.faults) < size {
			target := targets[rng.IntN(len(targets))]
			if picked[target] {
				continue
			}
			picked[target] = true
			f := plannedFault{target: target, kind: faultKill}
			switch {
			case target == targetDB:
				f.kind = faultDB
			case rng.IntN(3) == 0:
				f.kind, f.hold = faultFreeze, time.Second+time.Duration(rng.Int64N(int64(5*time.Second)))
			}
			ev.faults = append(ev.faults, f)
		}
		events = append(events, ev)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	return events
}

// chaosTargets are the processes of m a schedule may hit, in a fixed
// order: every process up runs, the Temporal dev server in place of its
// wrapper, and the database when the run has one of its own.
func chaosTargets(procs []supervise.Status, withDB bool) []string {
	var out []string
	for _, p := range procs {
		if p.Name == "temporal" {
			out = append(out, targetTemporal)
		} else {
			out = append(out, p.Name)
		}
	}
	if withDB {
		out = append(out, targetDB)
	}
	slices.Sort(out)
	return out
}

// injector carries out a schedule on a mesh and logs each fault: when it
// was sent, when it landed, and when the process served again.
type injector struct {
	m  *mesh
	pg *pgtest.Cluster // nil unless the run has a database of its own

	mu     sync.Mutex
	busy   map[string]bool // targets frozen or down right now
	log    []chaoslog.Fault
	wg     sync.WaitGroup
	missed int // faults not injected: the target was still down from the last one
}

// run injects the schedule from start on, in the test's goroutine; it
// returns once the last event is injected (recoveries may still go on:
// wait).
func (in *injector) run(t *testing.T, start time.Time, events []chaosEvent) {
	for _, ev := range events {
		time.Sleep(time.Until(start.Add(ev.at)))
		for _, f := range ev.faults {
			in.inject(t, f)
		}
	}
}

func (in *injector) inject(t *testing.T, f plannedFault) {
	in.mu.Lock()
	if in.busy[f.target] {
		in.missed++
		in.mu.Unlock()
		t.Logf("chaos: %s of %s skipped: still down from the fault before", f.kind, f.target)
		return
	}
	in.busy[f.target] = true
	in.mu.Unlock()
	if f.kind == faultDB {
		in.wg.Go(func() { in.crashDB(t) })
		return
	}
	var pid int
	if f.target == targetTemporal {
		pid = in.m.temporalServerPID(t)
	} else {
		pid = in.m.process(t, f.target).PID
	}
	if pid == 0 {
		in.done(f.target, chaoslog.Fault{Kind: f.kind, Target: f.target, Sent: time.Now(), Landed: time.Now(), Note: "not running"})
		return
	}
	name := f.target
	if f.target == targetTemporal {
		name = "temporal"
	}
	switch f.kind {
	case faultKill:
		landed := signalPID(t, f.target, pid, syscall.SIGKILL)
		in.wg.Go(func() {
			ended := in.readyAfter(name, landed.sent)
			in.done(f.target, chaoslog.Fault{Kind: f.kind, Target: f.target, Sent: landed.sent, Landed: landed.landed, Ended: ended})
		})
	case faultFreeze:
		frozen := signalPID(t, f.target, pid, syscall.SIGSTOP)
		in.wg.Go(func() {
			time.Sleep(f.hold)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			in.done(f.target, chaoslog.Fault{Kind: f.kind, Target: f.target, Sent: frozen.sent, Landed: frozen.landed, Ended: time.Now(),
				Note: fmt.Sprintf("held %s", f.hold.Round(time.Millisecond))})
		})
	}
}

// crashDB stops the run's PostgreSQL as a crash would and starts it again
// a second later.
func (in *injector) crashDB(t *testing.T) {
	f := chaoslog.Fault{Kind: faultDB, Target: targetDB, Sent: time.Now()}
	if err := in.pg.StopImmediate(); err != nil {
		t.Errorf("chaos: stop PostgreSQL: %v", err)
	}
	f.Landed = time.Now()
	time.Sleep(time.Second)
	if err := in.pg.Restart(); err != nil {
		t.Errorf("chaos: restart PostgreSQL: %v", err)
	}
	f.Ended = time.Now()
	in.done(targetDB, f)
}

// readyAfter waits until up reports name ready since after sent, and
// returns when it became ready; zero when not within two minutes.
func (in *injector) readyAfter(name string, sent time.Time) time.Time {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		procs, err := in.m.statuses()
		if err == nil {
			for _, p := range procs {
				if p.Name == name && p.State == supervise.StateReady && p.Since.After(sent) {
					return p.Since
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Time{}
}

func (in *injector) done(target string, f chaoslog.Fault) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.busy, target)
	in.log = append(in.log, f)
}

// faults returns the fault log, in the order the faults were sent.
func (in *injector) faults() []chaoslog.Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := slices.Clone(in.log)
	slices.SortFunc(out, func(a, b chaoslog.Fault) int { return a.Sent.Compare(b.Sent) })
	return out
}

// TestChaosScheduleReplays: a seed alone decides a chaos run's schedule —
// the same seed gives the same faults at the same moments, another seed
// others — and every fault hits one of the targets.
func TestChaosScheduleReplays(t *testing.T) {
	targets := []string{"edge", "postgres", "tasks", "temporal-server", "worker-calls"}
	a, b := planChaos(42, targets, 5*time.Minute, 6), planChaos(42, targets, 5*time.Minute, 6)
	if len(a) != 30 || !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 planned %d events, then %d others: %v\n%v", len(a), len(b), a, b)
	}
	if other := planChaos(43, targets, 5*time.Minute, 6); reflect.DeepEqual(a, other) {
		t.Error("seeds 42 and 43 planned the same schedule")
	}
	several := 0
	for _, ev := range a {
		if ev.at < 5*time.Second || ev.at > 5*time.Minute-5*time.Second {
			t.Errorf("an event at %s, outside the run's quiet start and end", ev.at)
		}
		if len(ev.faults) > 1 {
			several++
		}
		for _, f := range ev.faults {
			if !slices.Contains(targets, f.target) || (f.target == targetDB) != (f.kind == faultDB) {
				t.Errorf("fault %+v: not a target, or a database fault of a process", f)
			}
		}
	}
	if several == 0 {
		t.Error("no event of several faults at once in 30")
	}
}
