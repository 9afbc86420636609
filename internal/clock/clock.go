// Package clock names the time source that services, stores and checks
// are given, so that tests can fix or step the time they see.
package clock

import (
	"sync"
	"time"
)

// Clock returns the current time: time.Now in the running mesh, a fixed
// or stepped time in tests. A nil Clock in a Config means time.Now.
type Clock func() time.Time

// Stepping is a Clock for tests that must tell readings apart: the first
// reading is start, and each one after it is step later than the one
// before. Safe for concurrent use.
func Stepping(start time.Time, step time.Duration) Clock {
	var (
		mu   sync.Mutex
		next = start
	)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := next
		next = next.Add(step)
		return now
	}
}
