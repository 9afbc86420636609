package ids

import (
	"regexp"
	"testing"
	"time"
)

func TestNewHasPrefixAndFormat(t *testing.T) {
	re := regexp.MustCompile(`^tsk_[0-9a-z]{26}$`)
	for range 100 {
		if id := New("tsk"); !re.MatchString(id) {
			t.Fatalf("New(tsk) = %q, want match %s", id, re)
		}
	}
}

func TestIDsSortByTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := NewAt("x", t0)
	b := NewAt("x", t0.Add(time.Millisecond))
	if !(a < b) {
		t.Fatalf("id at t0 %q does not sort before id at t0+1ms %q", a, b)
	}
	if NewAt("x", t0) == NewAt("x", t0) {
		t.Fatal("two ids at the same instant are equal")
	}
}

func TestDeriveIsStable(t *testing.T) {
	// Pinned: ids derived by earlier releases must not change (a retry
	// after an upgrade must find what its first attempt made).
	if got, want := Derive("ask", "owner.ask", "agent-a", "call-1"), "ask_2p09txsed5xaan3e41dkxx1te3"; got != want {
		t.Errorf("Derive = %s, want %s", got, want)
	}
	if Derive("inv", "x", "a", "bc") == Derive("inv", "x", "ab", "c") {
		t.Error("parts are not kept apart")
	}
}
