// Package clock names the time source that services, stores and checks
// are given, so that tests can fix or step the time they see.
package clock

import "time"

// Clock returns the current time: time.Now in the running mesh, a fixed
// or stepped time in tests. A nil Clock in a Config means time.Now.
type Clock func() time.Time
