//go:build faults

package faults

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The soak's bound after warm-up, per process: RSS may grow by
// soakRSSGrowthMB and open descriptors by soakFDGrowth past their level at
// the end of the warm-up (the first fifth of the run) — room for caches
// and pools that settle late, none for a leak that grows with the calls.
const (
	soakRSSGrowthMB = 64
	soakFDGrowth    = 64
	soakSampleEvery = 10 * time.Second
)

// soakSample is one process's RSS (MB) and open descriptors at a moment.
type soakSample struct {
	at      time.Time
	rssMB   int
	fds     int
	running bool
}

// sampler samples every process of a mesh until stop is closed.
type sampler struct {
	mu      sync.Mutex
	samples map[string][]soakSample
}

func (s *sampler) run(m *mesh, stop <-chan struct{}) *sync.WaitGroup {
	s.samples = map[string][]soakSample{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			procs, err := m.statuses()
			if err == nil {
				now := time.Now()
				s.mu.Lock()
				for _, p := range procs {
					rss, fds, ok := procUsage(p.PID)
					s.samples[p.Name] = append(s.samples[p.Name], soakSample{at: now, rssMB: rss, fds: fds, running: ok})
				}
				s.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(soakSampleEvery):
			}
		}
	})
	return &wg
}

// procUsage reads a process's resident set (MB) and open descriptors.
func procUsage(pid int) (rssMB, fds int, ok bool) {
	if pid == 0 {
		return 0, 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, found := strings.CutPrefix(line, "VmRSS:"); found {
			kb, _ := strconv.Atoi(strings.Fields(v)[0])
			rssMB = kb / 1024
		}
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return rssMB, 0, false
	}
	return rssMB, len(entries), true
}

// check reports, per process, RSS and descriptors at the end of the
// warm-up and their peak after it, and fails t for growth past the bound.
func (s *sampler) check(t *testing.T, warmEnd time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var over []string
	for _, name := range slices.Sorted(maps.Keys(s.samples)) {
		var base *soakSample // the last sample of the warm-up
		peakRSS, peakFDs := 0, 0
		for i, smp := range s.samples[name] {
			switch {
			case !smp.running:
			case smp.at.Before(warmEnd) || base == nil:
				base = &s.samples[name][i]
			default:
				peakRSS, peakFDs = max(peakRSS, smp.rssMB), max(peakFDs, smp.fds)
			}
		}
		if base == nil {
			continue
		}
		t.Logf("soak: %-22s RSS %4d MB after warm-up, peak %4d MB; fds %4d, peak %4d", name, base.rssMB, peakRSS, base.fds, peakFDs)
		if peakRSS > base.rssMB+soakRSSGrowthMB || peakFDs > base.fds+soakFDGrowth {
			over = append(over, fmt.Sprintf("%s (RSS %d→%d MB, fds %d→%d)", name, base.rssMB, peakRSS, base.fds, peakFDs))
		}
	}
	figure(t, fmt.Sprintf("processes growing past the bound after warm-up (RSS +%d MB, fds +%d)", soakRSSGrowthMB, soakFDGrowth),
		fmt.Sprintf("%d %v", len(over), over), "0", len(over) == 0)
}
