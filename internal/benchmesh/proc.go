package benchmesh

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is the CPU time (user + system, all threads, living and exited)
// process pid has used, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// memStatus is a process's resident memory in KiB, from /proc/<pid>/status:
// rss is VmRSS (what ps shows as RSS), hwm VmHWM (its peak since it
// started), and rss is anon + file (+ shmem): anon its private memory (heap,
// stacks), file the pages of files it maps (the binary's code and data,
// clean and shared with every process that runs the same binary). pss is
// the proportional set size, from /proc/<pid>/smaps_rollup: each page
// shared by n processes counts for 1/n, so it is the process's share of
// the machine's memory (0 where the kernel has no smaps_rollup).
type memStatus struct{ rss, hwm, anon, file, pss int }

// memory reads pid's memory; pss only withPSS (else 0): the kernel walks
// the process's page tables to sum smaps_rollup, about 0.75 ms for the edge
// under load, holding its memory map's lock, where status costs 40 µs.
func memory(pid int, withPSS bool) (memStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	var m memStatus
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			m.rss = kb
		case "VmHWM":
			m.hwm = kb
		case "RssAnon":
			m.anon = kb
		case "RssFile":
			m.file = kb
		}
	}
	if !withPSS {
		return m, nil
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				m.pss, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				break
			}
		}
	}
	return m, nil
}

// loadAverage is the one-minute load average of the machine.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// children returns the processes whose parent is pid, with their command
// lines.
func children(pid int) (map[int][]string, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	out := map[int][]string{}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // it exited meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
		if err != nil {
			continue
		}
		out[child] = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return out, nil
}

// rssSampler records the highest VmRSS, RssAnon, RssFile and Pss (each on
// its own) of some processes, read every interval, until stopped.
type rssSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak map[int]memStatus
}

// sampleRSS keeps the peaks of pids' memory: status every interval, PSS
// every pssEvery samples, so that sampling takes little of the CPU and the
// memory map of the processes it measures.
func sampleRSS(pids []int, interval time.Duration, pssEvery int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{}), peak: map[int]memStatus{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 0; ; n++ {
			for _, pid := range pids {
				if m, err := memory(pid, n%pssEvery == 0); err == nil {
					s.mu.Lock()
					p := s.peak[pid]
					s.peak[pid] = memStatus{rss: max(p.rss, m.rss), anon: max(p.anon, m.anon), file: max(p.file, m.file), pss: max(p.pss, m.pss)}
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns each process's peaks in KiB (hwm
// unset).
func (s *rssSampler) Stop() map[int]memStatus {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
