package supervise

import (
	"log/slog"
	"testing"
	"time"
)

func TestBackoffDoublesWithinTheWindowUpToItsCap(t *testing.T) {
	s := &Supervisor{policy: Policy{Backoff: time.Second, MaxBackoff: 5 * time.Second, Limit: 6, Window: time.Hour}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	p := &proc{Process: Process{Name: "p"}}
	var got []time.Duration
	for range 6 {
		d, stop := s.failed(p, "exit status 1")
		if stop {
			t.Fatalf("gave up after %d failures, limit 6", len(got)+1)
		}
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if _, stop := s.failed(p, "exit status 1"); !stop {
		t.Error("a 7th failure within the window did not give up (limit 6)")
	}
	// Failures older than the window no longer count.
	p.failures = []time.Time{time.Now().Add(-2 * time.Hour)}
	if d, stop := s.failed(p, "x"); stop || d != time.Second {
		t.Errorf("after a quiet window: delay %v, stop %v; want 1s, false", d, stop)
	}
}
