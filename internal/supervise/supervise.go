// Package supervise keeps a set of long-running child processes up: it
// starts them in order, restarts one that exits unexpectedly after a
// backoff — once the processes it needs are ready again — and gives up,
// naming the process and its last failure, only when a process keeps
// failing within a window. It is the supervisor of `toolmesh up`; it knows
// nothing about the mesh.
//
// Every process restarts on its own: the others keep running while one is
// down. What a process needs before it can start at all (Process.Needs) is
// waited for before each restart; everything else it talks to is its own
// business (it answers "unavailable" for what it cannot do).
package supervise

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// State is where a process is in its life.
type State string

// The states of a process.
const (
	// StatePending: not started yet.
	StatePending State = "pending"
	// StateStarting: started, not ready yet.
	StateStarting State = "starting"
	// StateReady: running and ready.
	StateReady State = "ready"
	// StateBackoff: exited unexpectedly; restarts after a delay.
	StateBackoff State = "backoff"
	// StateWaiting: about to restart, waiting for the processes it needs.
	StateWaiting State = "waiting"
	// StateStopping: asked to stop.
	StateStopping State = "stopping"
	// StateStopped: stopped (or gave up).
	StateStopped State = "stopped"
)

// Process is one child to keep running.
type Process struct {
	// Name is unique among the processes.
	Name string
	// Group names processes that stop together; groups stop in the
	// reverse order of their first process.
	Group string
	// Command builds the command of one run; it is called for every
	// (re)start, since an exec.Cmd runs once.
	Command func() *exec.Cmd
	// Ready is one readiness check (nil: ready once started); it is
	// retried every ProbeInterval until it returns nil or ReadyTimeout
	// passes.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds the wait for Ready (default 30s).
	ReadyTimeout time.Duration
	// Needs are processes that must be ready before this one restarts
	// (it cannot start without them). Each comes earlier in the list.
	Needs []string
}

// Policy says how the supervisor restarts and when it gives up.
type Policy struct {
	// Backoff is the delay before the first restart within Window; each
	// further failure within Window doubles it, up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Limit and Window: a process that fails more than Limit times within
	// Window makes the supervisor give up and stop everything. A failure
	// is an unexpected exit, or a restart that does not become ready.
	Limit  int
	Window time.Duration
	// StopTimeout is how long a process has to exit after SIGTERM before
	// it is killed.
	StopTimeout time.Duration
	// ProbeInterval is the pause between readiness checks.
	ProbeInterval time.Duration
}

// Defaults of Policy.
const (
	DefaultBackoff       = 250 * time.Millisecond
	DefaultMaxBackoff    = 8 * time.Second
	DefaultLimit         = 5
	DefaultWindow        = time.Minute
	DefaultStopTimeout   = 20 * time.Second
	DefaultProbeInterval = 100 * time.Millisecond
	defaultReadyTimeout  = 30 * time.Second
)

func (p Policy) withDefaults() Policy {
	if p.Backoff <= 0 {
		p.Backoff = DefaultBackoff
	}
	if p.MaxBackoff < p.Backoff {
		p.MaxBackoff = max(DefaultMaxBackoff, p.Backoff)
	}
	if p.Limit <= 0 {
		p.Limit = DefaultLimit
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.StopTimeout <= 0 {
		p.StopTimeout = DefaultStopTimeout
	}
	if p.ProbeInterval <= 0 {
		p.ProbeInterval = DefaultProbeInterval
	}
	return p
}

// Status is a snapshot of one process.
type Status struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	State State  `json:"state"`
	// PID of the running process (0 when none runs).
	PID int `json:"pid,omitempty"`
	// Since is when the process entered State.
	Since time.Time `json:"since"`
	// Restarts counts the restarts since the supervisor started.
	Restarts int `json:"restarts"`
	// RecentFailures counts the failures within the policy's window.
	RecentFailures int `json:"recent_failures"`
	// LastFailure says how the process last failed ("exit status 1",
	// "signal: killed", "not ready after 30s"); empty when it never did.
	LastFailure string `json:"last_failure,omitempty"`
	// WaitingFor lists the needed processes that are not ready (state
	// waiting).
	WaitingFor []string `json:"waiting_for,omitempty"`
}

// GaveUpError says which process kept failing, and how.
type GaveUpError struct {
	Process  string
	Failures int
	Window   time.Duration
	Last     string
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("%s keeps failing: %d failures within %s, the last: %s", e.Process, e.Failures, e.Window, e.Last)
}

// Supervisor runs the processes.
type Supervisor struct {
	policy Policy
	log    *slog.Logger
	procs  []*proc
	byName map[string]*proc

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change
	gaveUp  *GaveUpError
}

type proc struct {
	Process
	// Guarded by Supervisor.mu.
	state      State
	since      time.Time
	cmd        *exec.Cmd
	dead       chan struct{} // closed once the current run has exited
	exit       string        // how the current run ended, set before dead closes
	ranFor     time.Duration // how long the current run ran, likewise
	restarts   int
	failures   []time.Time
	last       string
	waitingFor []string
}

// New checks the processes and returns their supervisor; nothing starts
// before Run.
func New(procs []Process, policy Policy, log *slog.Logger) (*Supervisor, error) {
	s := &Supervisor{policy: policy.withDefaults(), log: log, byName: map[string]*proc{}, changed: make(chan struct{})}
	now := time.Now()
	for _, p := range procs {
		if p.Name == "" || p.Command == nil {
			return nil, fmt.Errorf("supervise: process %q needs a name and a command", p.Name)
		}
		if _, dup := s.byName[p.Name]; dup {
			return nil, fmt.Errorf("supervise: process %s twice", p.Name)
		}
		for _, n := range p.Needs {
			if _, ok := s.byName[n]; !ok {
				return nil, fmt.Errorf("supervise: %s needs %s, which does not come before it", p.Name, n)
			}
		}
		if p.ReadyTimeout <= 0 {
			p.ReadyTimeout = defaultReadyTimeout
		}
		pr := &proc{Process: p, state: StatePending, since: now}
		s.procs = append(s.procs, pr)
		s.byName[p.Name] = pr
	}
	return s, nil
}

// Run starts the processes in order, each once the one before is ready,
// and calls up (when not nil) once all are. A process that fails to start
// then stops what started and fails Run: a mesh that cannot come up once is
// misconfigured, and retrying would hide why. From then on Run keeps every
// process running until ctx ends (it returns nil) or a process keeps
// failing (it returns a *GaveUpError). Either way it stops every process,
// in the reverse order of their groups, before it returns.
func (s *Supervisor) Run(ctx context.Context, up func()) error {
	for _, p := range s.procs {
		if err := s.launch(ctx, p); err != nil {
			s.stopAll()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s did not become ready: %w", p.Name, err)
		}
	}
	if up != nil {
		up()
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Go(func() { s.keep(sctx, cancel, p) })
	}
	<-sctx.Done()
	cancel()
	wg.Wait()
	s.stopAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gaveUp != nil {
		return s.gaveUp
	}
	return nil
}

// keep restarts p each time it exits, until ctx ends; it cancels the run
// (giveUp) when p keeps failing.
func (s *Supervisor) keep(ctx context.Context, giveUp context.CancelFunc, p *proc) {
	for {
		s.mu.Lock()
		dead, pid := p.dead, p.cmd.Process.Pid
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-dead:
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		why, ran := p.exit, p.ranFor
		s.mu.Unlock()
		s.log.Warn("process.exited", "process", p.Name, "pid", pid, "exit", why, "ran_for", ran.Round(time.Millisecond).String())
		for {
			delay, stop := s.failed(p, why)
			if stop {
				giveUp()
				return
			}
			s.setState(p, StateBackoff)
			if !sleep(ctx, delay) || !s.waitNeeds(ctx, p) {
				return
			}
			s.mu.Lock()
			p.restarts++
			n := p.restarts
			s.mu.Unlock()
			s.log.Info("process.restarting", "process", p.Name, "restart", n, "after", delay.String())
			err := s.launch(ctx, p)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			why = err.Error()
		}
	}
}

// failed records a failure of p and returns the delay before its restart,
// or stop when it has failed more than the policy allows within the window.
func (s *Supervisor) failed(p *proc, why string) (delay time.Duration, stop bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	p.failures = append(slices.DeleteFunc(p.failures, func(t time.Time) bool { return now.Sub(t) >= s.policy.Window }), now)
	p.last = why
	n := len(p.failures)
	if n > s.policy.Limit {
		if s.gaveUp == nil {
			s.gaveUp = &GaveUpError{Process: p.Name, Failures: n, Window: s.policy.Window, Last: why}
			s.log.Error("supervise.gave_up", "process", p.Name, "failures", n, "window", s.policy.Window.String(), "last", why)
		}
		return 0, true
	}
	delay = s.policy.Backoff
	for i := 1; i < n && delay < s.policy.MaxBackoff; i++ {
		delay *= 2
	}
	return min(delay, s.policy.MaxBackoff), false
}

// waitNeeds waits until every process p needs is ready; false when ctx
// ended first. A need the supervisor holds ready is probed again (its
// Ready) before p starts: a need killed together with p may not have been
// seen dead yet, and p must not start on it. A need that fails its probe
// is waited for like one that is not ready, probed again every
// ProbeInterval.
func (s *Supervisor) waitNeeds(ctx context.Context, p *proc) bool {
	for {
		s.mu.Lock()
		var missing []string
		var probe []*proc
		for _, n := range p.Needs {
			switch need := s.byName[n]; {
			case need.state != StateReady:
				missing = append(missing, n)
			case need.Ready != nil:
				probe = append(probe, need)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, need := range probe {
			if need.Ready(ctx) != nil {
				missing = append(missing, need.Name)
			}
		}
		s.mu.Lock()
		if len(missing) > 0 && !slices.Equal(missing, p.waitingFor) {
			s.log.Info("process.waiting", "process", p.Name, "for", missing)
		}
		p.waitingFor = missing
		if len(missing) > 0 && p.state != StateWaiting {
			s.setStateLocked(p, StateWaiting)
		}
		s.mu.Unlock()
		if len(missing) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-time.After(s.policy.ProbeInterval):
		}
	}
}

// launch starts one run of p and waits until it is ready. A run that dies
// or does not become ready in time is an error (and is killed).
func (s *Supervisor) launch(ctx context.Context, p *proc) error {
	cmd := p.Command()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	dead := make(chan struct{})
	s.mu.Lock()
	p.cmd, p.dead, p.exit = cmd, dead, ""
	s.setStateLocked(p, StateStarting)
	s.mu.Unlock()
	started := time.Now()
	go func() {
		err := cmd.Wait()
		why := "exit status 0"
		if err != nil {
			why = err.Error()
		}
		s.mu.Lock()
		p.exit, p.ranFor = why, time.Since(started)
		// Not ready any more: what needs it waits from now on.
		if p.state != StateStopping {
			s.setStateLocked(p, StateBackoff)
		}
		close(dead) // under the lock: a state read under it agrees with dead
		s.mu.Unlock()
	}()
	s.log.Info("process.started", "process", p.Name, "pid", cmd.Process.Pid)
	if err := s.waitReady(ctx, p, dead); err != nil {
		// When ctx ended, stopAll stops it gently with the rest.
		if ctx.Err() == nil && !isClosed(dead) {
			_ = cmd.Process.Kill()
			<-dead
		}
		return err
	}
	s.mu.Lock()
	if !isClosed(dead) {
		s.setStateLocked(p, StateReady)
	}
	s.mu.Unlock()
	s.log.Info("process.ready", "process", p.Name, "pid", cmd.Process.Pid)
	return nil
}

func (s *Supervisor) waitReady(ctx context.Context, p *proc, dead <-chan struct{}) error {
	if p.Ready == nil {
		return nil
	}
	deadline := time.Now().Add(p.ReadyTimeout)
	for {
		err := p.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-dead:
			s.mu.Lock()
			defer s.mu.Unlock()
			return fmt.Errorf("exited before it was ready (%s; see its log above)", p.exit)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", p.ReadyTimeout, err)
		}
		select {
		case <-dead:
		case <-ctx.Done():
		case <-time.After(s.policy.ProbeInterval):
		}
	}
}

// stopAll stops the running processes, one group at a time in reverse
// order, so that nothing loses what it uses while it shuts down.
func (s *Supervisor) stopAll() {
	var groups []string
	for _, p := range s.procs {
		if !slices.Contains(groups, p.Group) {
			groups = append(groups, p.Group)
		}
	}
	for _, g := range slices.Backward(groups) {
		var running []*proc
		s.mu.Lock()
		for _, p := range s.procs {
			if p.Group == g && p.cmd != nil && !isClosed(p.dead) {
				running = append(running, p)
				s.setStateLocked(p, StateStopping)
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		s.mu.Unlock()
		deadline := time.After(s.policy.StopTimeout)
		for _, p := range running {
			select {
			case <-p.dead:
			case <-deadline:
				s.log.Warn("process.stop_timeout", "process", p.Name, "after", s.policy.StopTimeout.String())
				_ = p.cmd.Process.Kill()
				<-p.dead
			}
		}
		s.mu.Lock()
		for _, p := range s.procs {
			if p.Group == g {
				s.setStateLocked(p, StateStopped)
			}
		}
		s.mu.Unlock()
	}
}

// Status returns a snapshot of every process, in start order.
func (s *Supervisor) Status() []Status {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.procs))
	for _, p := range s.procs {
		st := Status{Name: p.Name, Group: p.Group, State: p.state, Since: p.since, Restarts: p.restarts, LastFailure: p.last}
		if p.cmd != nil && !isClosed(p.dead) {
			st.PID = p.cmd.Process.Pid
		}
		for _, t := range p.failures {
			if now.Sub(t) < s.policy.Window {
				st.RecentFailures++
			}
		}
		if p.state == StateWaiting {
			st.WaitingFor = slices.Clone(p.waitingFor)
		}
		out = append(out, st)
	}
	return out
}

func (s *Supervisor) setState(p *proc, st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStateLocked(p, st)
}

func (s *Supervisor) setStateLocked(p *proc, st State) {
	if p.state == st {
		return
	}
	p.state, p.since = st, time.Now()
	close(s.changed)
	s.changed = make(chan struct{})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
