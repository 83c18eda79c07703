package suite

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cpuMeter measures how much of the machine's CPU went unused lately: the
// share of idle time (idle and iowait in /proc/stat) of all CPUs between
// its last two samples, times the CPUs (1.5: one and a half CPUs idle).
// Where /proc/stat cannot be read (not Linux), it reports nothing, and the
// scheduler keeps to its fixed bound.
type cpuMeter struct {
	mu         sync.Mutex
	last       cpuTimes
	sampled    bool
	idle       float64
	ok         bool
	cpus       int
	read       func() (cpuTimes, bool) // /proc/stat's first line, or a test's
	sampleTime time.Duration
}

// cpuTimes are /proc/stat's cumulative "cpu" counters, in clock ticks.
type cpuTimes struct{ idle, total uint64 }

func newCPUMeter() *cpuMeter {
	return &cpuMeter{read: readProcStat, cpus: runtime.NumCPU(), sampleTime: time.Second}
}

// readProcStat reads the machine's "cpu" line of /proc/stat.
func readProcStat() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, s := range f[1:min(len(f), 9)] { // guest and guest_nice are in user and nice already
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		t.total += n
		if i == 3 || i == 4 { // idle, iowait
			t.idle += n
		}
	}
	return t, true
}

// sample reads the counters now: the idle CPUs since the previous sample.
func (m *cpuMeter) sample() {
	t, ok := m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok {
		m.ok = false
		return
	}
	if m.sampled && t.total > m.last.total && t.idle >= m.last.idle {
		m.idle = float64(t.idle-m.last.idle) / float64(t.total-m.last.total) * float64(m.cpus)
		m.ok = true
	}
	m.last, m.sampled = t, true
}

// idleCPUs is the idle CPUs of the last sample, and whether there was one.
func (m *cpuMeter) idleCPUs() (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idle, m.ok
}
