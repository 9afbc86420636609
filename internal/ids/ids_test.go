package ids

import (
	"regexp"
	"slices"
	"sync"
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
	if c, d := NewAt("x", t0), NewAt("x", t0); c == d {
		t.Fatal("two ids at the same instant are equal")
	}
}

// TestIDsOfOneMillisecondSortInTheOrderMade: ids made in the same
// millisecond, from several goroutines, are distinct and sort in the order
// they were made; and the next one is not the last one plus one.
func TestIDsOfOneMillisecondSortInTheOrderMade(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	var made []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				mu.Lock()
				made = append(made, NewAt("x", at))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if !slices.IsSorted(made) {
		t.Error("ids of one millisecond do not sort in the order they were made")
	}
	if len(slices.Compact(slices.Clone(made))) != len(made) {
		t.Error("two ids of one millisecond are equal")
	}
	// A step of one would change only the last character of most ids.
	adjacent := 0
	for i := 1; i < len(made); i++ {
		if made[i][:len(made[i])-1] == made[i-1][:len(made[i-1])-1] {
			adjacent++
		}
	}
	if adjacent > len(made)/100 {
		t.Errorf("%d of %d ids differ from the one before only in their last character: the step is not random", adjacent, len(made))
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
