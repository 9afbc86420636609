package edge

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds how often one principal may call tools. The zero value
// means no limit.
type RateLimit struct {
	// PerSecond is the sustained rate of tool calls per principal.
	PerSecond float64
	// Burst is how many calls may come at once (default: PerSecond, at least 1).
	Burst int
}

// maxLimiters bounds the principals tracked at once; idle ones are dropped
// first when it is reached.
const maxLimiters = 10000

// limiters holds one token bucket per principal.
type limiters struct {
	cfg RateLimit
	mu  sync.Mutex
	m   map[string]*limiterEntry
}

type limiterEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func newLimiters(cfg RateLimit) *limiters {
	if cfg.PerSecond <= 0 {
		return nil
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.PerSecond)))
	}
	return &limiters{cfg: cfg, m: map[string]*limiterEntry{}}
}

// allow takes one call from key's bucket; when it is empty it returns false
// and how long until a call would be allowed.
func (l *limiters) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	e, ok := l.m[key]
	if !ok {
		if len(l.m) >= maxLimiters {
			l.evict(now)
		}
		e = &limiterEntry{lim: rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)}
		l.m[key] = e
	}
	e.seen = now
	l.mu.Unlock()
	r := e.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// evict drops buckets that have refilled (their principal has been idle), or
// the oldest half when none has.
func (l *limiters) evict(now time.Time) {
	full := time.Duration(float64(l.cfg.Burst)/l.cfg.PerSecond*float64(time.Second)) + time.Second
	for k, e := range l.m {
		if now.Sub(e.seen) > full {
			delete(l.m, k)
		}
	}
	if len(l.m) < maxLimiters {
		return
	}
	var cutoff time.Time
	n := 0
	for _, e := range l.m {
		if n == 0 || e.seen.Before(cutoff) {
			cutoff = e.seen
		}
		n++
	}
	half := now.Sub(cutoff) / 2
	for k, e := range l.m {
		if now.Sub(e.seen) >= half {
			delete(l.m, k)
		}
	}
}
