package toolcall

import "time"

// ActivityRetry is how a tool call that runs as a Temporal activity (the
// side effect of an elicited call, in the calls worker) is tried: each
// attempt may take the call's timeout plus a margin to report, and a call
// whose service was unreachable is tried again, a bounded number of times.
// The worker runs the activity by it, and the edge, which waits for the
// call's outcome, asks it how long that may take (Budget): one policy, read
// by both.
type ActivityRetry struct {
	// Attempt bounds one attempt: the call timeout and attemptMargin.
	Attempt time.Duration
	// Attempts is how many attempts are made at most.
	Attempts int32
	// Interval is the wait before the second attempt, multiplied by
	// Backoff before each further one.
	Interval time.Duration
	Backoff  float64
}

// attemptMargin is an attempt's time beyond its service call: decoding,
// the audit record, reporting the result.
const attemptMargin = 5 * time.Second

// RetryOf is the retry policy of a tool call whose service call is bounded
// by timeout.
func RetryOf(timeout time.Duration) ActivityRetry {
	return ActivityRetry{Attempt: timeout + attemptMargin, Attempts: 3, Interval: 200 * time.Millisecond, Backoff: 2}
}

// Budget is the longest all attempts take together.
func (r ActivityRetry) Budget() time.Duration { return time.Duration(r.Attempts) * r.Attempt }
