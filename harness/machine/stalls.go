// Package machine measures what the machine did to a run's processes, from
// outside them and whatever their language or runtime: how long the kernel
// kept each one from running although it could run (the run-queue wait of
// its threads, /proc/PID/task/TID/schedstat), how long it sat stopped
// (state T), and how loaded the machine was meanwhile (Pressure: the
// kernel's CPU pressure, else the load average against the CPUs).
//
// A stall measured here is the machine's doing only where no fault of the
// run was injected: the checker's MachineStalls rule decides, from a run's
// history, its lease and these measurements, whether a stall that no fault
// made explains a lost update.
package machine

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Interval is one sample interval of one process, on the run's clock
// (From, To), and how long in it the machine kept the process from running:
// the longest run-queue wait of any one of its threads in the interval (a
// thread that waits for a CPU holds up whatever it was running: a holder's
// section, its lease renewal), or the whole interval when the process was
// stopped at both of its ends. For the process that samples (the suite's
// own, whose clients are goroutines beside the sampler's), it is how late
// the sampler woke: what held it up held them up.
type Interval struct {
	From, To time.Duration
	Stalled  time.Duration
	Stopped  bool
}

// Every is how often Watch samples: short beside a lease (the shortest the
// suite runs is 200 ms), long beside a sample's cost (a few reads of /proc
// per thread).
const Every = 25 * time.Millisecond

// Stalls samples the processes it watches until Stop. Its methods are safe
// for concurrent use.
var self = os.Getpid()

type Stalls struct {
	clock func() time.Duration
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	procs map[int]*proc
}

type proc struct {
	tasks   map[string]uint64 // thread id: its run-queue wait so far, ns
	at      time.Duration
	stopped bool
	gone    bool
	iv      []Interval
}

// Watch samples pids every Every on clock (a history.Recorder's Now, so
// that the intervals fall on the sections' clock) until Stop. Where /proc
// has no schedstat (not Linux, or a kernel without it), the processes
// record no interval: nothing is explained by the machine.
func Watch(clock func() time.Duration, pids ...int) *Stalls {
	s := &Stalls{clock: clock, stop: make(chan struct{}), done: make(chan struct{}), procs: map[int]*proc{}}
	for _, pid := range pids {
		if _, ok := s.procs[pid]; !ok && pid > 0 {
			s.procs[pid] = &proc{}
		}
	}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(Every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

// Stop takes a last sample and ends the sampling.
func (s *Stalls) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// Intervals returns pid's intervals so far, in order.
func (s *Stalls) Intervals(pid int) []Interval {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[pid]; p != nil {
		return append([]Interval(nil), p.iv...)
	}
	return nil
}

func (s *Stalls) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, p := range s.procs {
		if p.gone {
			continue
		}
		now := s.clock()
		if pid == self {
			// This process: the sampler is one of its goroutines, and the
			// clients it runs are others, on the same runtime and threads:
			// how late the sampler woke is how long they could not run
			// (the kernel's wait of one thread among many would be any
			// goroutine's, or none's).
			if p.tasks != nil && now > p.at {
				p.iv = append(p.iv, Interval{From: p.at, To: now, Stalled: max(now-p.at-Every, 0)})
			}
			p.tasks, p.at = map[string]uint64{}, now
			continue
		}
		tasks, stopped, ok := read(pid)
		if !ok {
			p.gone = true
			continue
		}
		if p.tasks != nil && now > p.at {
			iv := Interval{From: p.at, To: now, Stopped: stopped && p.stopped}
			if iv.Stopped {
				iv.Stalled = now - p.at
			} else {
				for tid, w := range tasks {
					d := w
					if last, seen := p.tasks[tid]; seen {
						d = w - min(last, w)
					}
					iv.Stalled = max(iv.Stalled, min(time.Duration(d), now-p.at))
				}
			}
			p.iv = append(p.iv, iv)
		}
		p.tasks, p.at, p.stopped = tasks, now, stopped
	}
}

// read returns the run-queue wait of each of pid's threads (ns, the second
// field of schedstat) and whether the process is stopped (state T or t).
func read(pid int) (map[string]uint64, bool, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	st, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return nil, false, false
	}
	i := strings.LastIndexByte(string(st), ')')
	f := strings.Fields(string(st[i+1:]))
	stopped := len(f) > 0 && (f[0] == "T" || f[0] == "t")
	ents, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return nil, false, false
	}
	tasks := make(map[string]uint64, len(ents))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "task", e.Name(), "schedstat"))
		if err != nil {
			continue // a thread that ended
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if w, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				tasks[e.Name()] = w
			}
		}
	}
	if len(tasks) == 0 {
		return nil, false, false // no schedstat here
	}
	return tasks, stopped, true
}

// Stalled is how long, within [from, to), the intervals say the machine
// kept their process from running, skipping every interval for which skip
// (if not nil) reports true (one that a fault of the run overlaps). An
// interval partly inside counts its share.
func Stalled(iv []Interval, from, to time.Duration, skip func(from, to time.Duration) bool) time.Duration {
	var sum time.Duration
	for _, v := range iv {
		lo, hi := max(v.From, from), min(v.To, to)
		if hi <= lo || v.Stalled == 0 || skip != nil && skip(v.From, v.To) {
			continue
		}
		sum += time.Duration(float64(v.Stalled) * float64(hi-lo) / float64(v.To-v.From))
	}
	return sum
}

// Largest is the longest stretch of intervals in which the process was
// mostly kept from running (each interval stalled for at least half its
// length), not skipped: how much they stalled it together, and when the
// stretch began. Zero when there is none.
func Largest(iv []Interval, skip func(from, to time.Duration) bool) (stalled, at time.Duration) {
	var run, start time.Duration
	for _, v := range iv {
		if v.To <= v.From || 2*v.Stalled < v.To-v.From || skip != nil && skip(v.From, v.To) {
			run = 0
			continue
		}
		if run == 0 {
			start = v.From
		}
		run += v.Stalled
		if run > stalled {
			stalled, at = run, start
		}
	}
	return stalled, at
}
