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
// warm-up, their level at the end of the run (the median of the last
// fifth's samples) and their peak after the warm-up, and fails t when the
// level at the end grew past the bound. A leak grows with the calls and
// stays; a burst of slow calls on a loaded machine (connections held
// while they wait) is a peak that goes away again, and is only reported.
func (s *sampler) check(t *testing.T, warmEnd, tailStart time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var over []string
	for _, name := range slices.Sorted(maps.Keys(s.samples)) {
		var base *soakSample // the last sample of the warm-up
		peakRSS, peakFDs := 0, 0
		var tailRSS, tailFDs []int
		for i, smp := range s.samples[name] {
			switch {
			case !smp.running:
			case smp.at.Before(warmEnd) || base == nil:
				base = &s.samples[name][i]
			default:
				peakRSS, peakFDs = max(peakRSS, smp.rssMB), max(peakFDs, smp.fds)
				if !smp.at.Before(tailStart) {
					tailRSS, tailFDs = append(tailRSS, smp.rssMB), append(tailFDs, smp.fds)
				}
			}
		}
		if base == nil || len(tailRSS) == 0 {
			continue
		}
		endRSS, endFDs := median(tailRSS), median(tailFDs)
		t.Logf("soak: %-22s RSS %4d MB after warm-up, %4d at the end, peak %4d; fds %4d, %4d, peak %4d", name, base.rssMB, endRSS, peakRSS, base.fds, endFDs, peakFDs)
		if endRSS > base.rssMB+soakRSSGrowthMB || endFDs > base.fds+soakFDGrowth {
			over = append(over, fmt.Sprintf("%s (RSS %d→%d MB, fds %d→%d)", name, base.rssMB, endRSS, base.fds, endFDs))
		}
	}
	figure(t, fmt.Sprintf("processes grown past the bound at the end (RSS +%d MB, fds +%d over the warm-up's level)", soakRSSGrowthMB, soakFDGrowth),
		fmt.Sprintf("%d %v", len(over), over), "0", len(over) == 0)
}

func median(v []int) int {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
