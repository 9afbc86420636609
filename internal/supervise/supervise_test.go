package supervise_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/supervise"
)

// childEnv makes the test binary act as a supervised child: "die" exits 1
// after 50ms; any other mode creates the file in childReadyEnv once it
// handles SIGTERM, and runs until SIGTERM, then appends its mode to the
// file in childLogEnv.
const (
	childEnv      = "SUPERVISE_TEST_CHILD"
	childLogEnv   = "SUPERVISE_TEST_LOG"
	childReadyEnv = "SUPERVISE_TEST_READY"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "die":
		time.Sleep(50 * time.Millisecond)
		os.Exit(1)
	default:
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		if f, err := os.Create(os.Getenv(childReadyEnv)); err == nil {
			f.Close()
		}
		<-sig
		if path := os.Getenv(childLogEnv); path != "" {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				_, _ = f.WriteString(os.Getenv(childEnv) + "\n")
				f.Close()
			}
		}
		os.Exit(0)
	}
}

// child returns a process that runs this test binary in mode (see
// TestMain), appending to stopLog when it stops. It is ready once it
// handles SIGTERM (a "die" child at once).
func child(name, group, mode, stopLog string) supervise.Process {
	var ready string
	return supervise.Process{
		Name:  name,
		Group: group,
		Command: func() *exec.Cmd {
			f, err := os.CreateTemp("", "supervise-ready-")
			if err == nil {
				ready = f.Name()
				f.Close()
				os.Remove(ready)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+mode, childLogEnv+"="+stopLog, childReadyEnv+"="+ready)
			return cmd
		},
		Ready: func(context.Context) error {
			if mode == "die" {
				return nil
			}
			_, err := os.Stat(ready)
			return err
		},
	}
}

// fastPolicy restarts at once and gives up after 3 failures a minute.
var fastPolicy = supervise.Policy{Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Limit: 3, Window: time.Minute,
	StopTimeout: 5 * time.Second, ProbeInterval: 10 * time.Millisecond}

// running runs s until the test ends; it returns once every process is up,
// with the function that ends Run and one that waits for its result.
func running(t *testing.T, s *supervise.Supervisor) (cancel context.CancelFunc, result func(within time.Duration) (error, bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan struct{})
	var runErr error
	go func() {
		runErr = s.Run(ctx, func() { close(up) })
		close(done)
	}()
	result = func(within time.Duration) (error, bool) {
		select {
		case <-done:
			return runErr, true
		case <-time.After(within):
			return nil, false
		}
	}
	t.Cleanup(func() {
		cancel()
		if _, ok := result(10 * time.Second); !ok {
			t.Error("Run did not return after its context ended")
		}
	})
	select {
	case <-up:
	case <-done:
		t.Fatalf("Run ended before everything was up: %v", runErr)
	case <-time.After(10 * time.Second):
		t.Fatal("processes did not come up")
	}
	return cancel, result
}

func status(s *supervise.Supervisor, name string) supervise.Status {
	for _, st := range s.Status() {
		if st.Name == name {
			return st
		}
	}
	return supervise.Status{}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAProcessThatDiesIsRestartedAloneAndLogged(t *testing.T) {
	var logs logtest.Buffer
	s, err := supervise.New([]supervise.Process{
		child("a", "one", "serve", ""),
		child("b", "one", "serve", ""),
	}, fastPolicy, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	running(t, s)
	a, b := status(s, "a"), status(s, "b")
	if a.State != supervise.StateReady || a.PID == 0 {
		t.Fatalf("a after start: %+v", a)
	}
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a restarted", func() bool {
		st := status(s, "a")
		return st.State == supervise.StateReady && st.PID != 0 && st.PID != a.PID
	})
	got := status(s, "a")
	if got.Restarts != 1 || got.RecentFailures != 1 || got.LastFailure != "signal: killed" {
		t.Errorf("a after one kill: restarts %d, recent failures %d, last failure %q; want 1, 1, signal: killed", got.Restarts, got.RecentFailures, got.LastFailure)
	}
	if nb := status(s, "b"); nb.PID != b.PID || nb.Restarts != 0 {
		t.Errorf("b was touched when a died: before %+v, after %+v", b, nb)
	}
	exited := logs.Events("process.exited")
	if len(exited) != 1 || exited[0]["process"] != "a" || exited[0]["exit"] != "signal: killed" {
		t.Errorf("process.exited events: %v", exited)
	}
	if r := logs.Events("process.restarting"); len(r) != 1 || r[0]["process"] != "a" {
		t.Errorf("process.restarting events: %v", r)
	}
}

func TestItGivesUpOnAProcessThatKeepsFailingAndStopsEverything(t *testing.T) {
	stopLog := filepath.Join(t.TempDir(), "stopped")
	var logs logtest.Buffer
	s, err := supervise.New([]supervise.Process{
		child("steady", "one", "steady", stopLog),
		child("flaky", "two", "die", ""),
	}, fastPolicy, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, result := running(t, s)
	runErr, ok := result(20 * time.Second)
	if !ok {
		t.Fatal("the supervisor did not give up on a process that exits every 50ms")
	}
	var gave *supervise.GaveUpError
	if !errors.As(runErr, &gave) {
		t.Fatalf("Run = %v, want a GaveUpError", runErr)
	}
	if gave.Process != "flaky" || gave.Failures != 4 || gave.Last != "exit status 1" {
		t.Errorf("gave up with %+v, want flaky after 4 failures, the last exit status 1", gave)
	}
	for _, want := range []string{"flaky keeps failing", "4 failures within 1m0s", "exit status 1"} {
		if !strings.Contains(runErr.Error(), want) {
			t.Errorf("error %q does not say %q", runErr, want)
		}
	}
	if b, _ := os.ReadFile(stopLog); string(b) != "steady\n" {
		t.Errorf("the steady process was not stopped gracefully when the supervisor gave up (it wrote %q)", b)
	}
	if len(logs.Events("supervise.gave_up")) != 1 {
		t.Errorf("want one supervise.gave_up event, got %v", logs.Events("supervise.gave_up"))
	}
}

func TestARestartWaitsForWhatTheProcessNeeds(t *testing.T) {
	var depReady atomic.Bool
	depReady.Store(true)
	dep := child("dep", "infra", "serve", "")
	dep.Ready = func(context.Context) error {
		if !depReady.Load() {
			return errors.New("not yet")
		}
		return nil
	}
	dep.ReadyTimeout = time.Minute
	user := child("user", "app", "serve", "")
	user.Needs = []string{"dep"}
	s, err := supervise.New([]supervise.Process{dep, user}, fastPolicy, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	running(t, s)
	depReady.Store(false)
	_ = syscall.Kill(status(s, "dep").PID, syscall.SIGKILL)
	_ = syscall.Kill(status(s, "user").PID, syscall.SIGKILL)
	eventually(t, "user waits for dep", func() bool {
		st := status(s, "user")
		return st.State == supervise.StateWaiting && slices.Equal(st.WaitingFor, []string{"dep"}) && st.PID == 0
	})
	eventually(t, "dep restarted (running, not ready)", func() bool { return status(s, "dep").State == supervise.StateStarting })
	if st := status(s, "user"); st.State != supervise.StateWaiting {
		t.Errorf("user started while dep was not ready: %+v", st)
	}
	depReady.Store(true)
	eventually(t, "user restarted once dep is ready", func() bool { return status(s, "user").State == supervise.StateReady })
}

func TestAProcessThatCannotStartStopsTheStartAndWhatStarted(t *testing.T) {
	stopLog := filepath.Join(t.TempDir(), "stopped")
	bad := child("bad", "two", "die", "")
	bad.Ready = func(context.Context) error { return errors.New("no answer") }
	bad.ReadyTimeout = time.Minute
	s, err := supervise.New([]supervise.Process{child("first", "one", "first", stopLog), bad}, fastPolicy, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background(), func() { t.Error("up was called although bad never became ready") })
	if err == nil || !strings.Contains(err.Error(), "bad did not become ready: exited before it was ready (exit status 1") {
		t.Errorf("Run = %v", err)
	}
	if b, _ := os.ReadFile(stopLog); string(b) != "first\n" {
		t.Errorf("first was not stopped (it wrote %q)", b)
	}
}

func TestProcessesStopInReverseGroupOrder(t *testing.T) {
	stopLog := filepath.Join(t.TempDir(), "stopped")
	s, err := supervise.New([]supervise.Process{
		child("infra", "infra", "infra", stopLog),
		child("service", "services", "service", stopLog),
		child("edge", "edge", "edge", stopLog),
	}, fastPolicy, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cancel, result := running(t, s)
	cancel()
	if err, ok := result(10 * time.Second); !ok || err != nil {
		t.Fatalf("Run after its context ended: %v (returned: %v)", err, ok)
	}
	if b, _ := os.ReadFile(stopLog); string(b) != "edge\nservice\ninfra\n" {
		t.Errorf("stop order %q, want edge, service, infra", b)
	}
	for _, st := range s.Status() {
		if st.State != supervise.StateStopped || st.PID != 0 {
			t.Errorf("%s after Run: %+v", st.Name, st)
		}
	}
}

func TestNewRefusesNeedsOutOfOrder(t *testing.T) {
	late := child("late", "", "serve", "")
	early := child("early", "", "serve", "")
	early.Needs = []string{"late"}
	if _, err := supervise.New([]supervise.Process{early, late}, supervise.Policy{}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("New accepted a process needing one that starts after it")
	}
}
