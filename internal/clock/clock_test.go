package clock_test

import (
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/clock"
)

func TestSteppingReadsApart(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := clock.Stepping(t0, time.Millisecond)
	for i := range 3 {
		if got, want := c(), t0.Add(time.Duration(i)*time.Millisecond); !got.Equal(want) {
			t.Errorf("reading %d = %v, want %v", i, got, want)
		}
	}
}
