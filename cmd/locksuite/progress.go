package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/locksuite/locksuite/harness/report"
)

// progress shows on stderr what a run is doing while its specs run: the
// scenario run that has been going longest, its elapsed and planned time,
// how many more are running beside it, and the violations so far. On a
// terminal it rewrites one line in place; otherwise it prints a plain line
// every `every`. Lost updates are known when a run ends; while it runs, its
// overlapping critical sections show the lock failing.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	total int // scenario runs planned

	mu       sync.Mutex
	began    time.Time // the whole run
	done     int       // rows reported (and written to the outputs before)
	broken   int
	lost     int64
	findings int
	running  map[string]*running // by report.Progress.Run
	width    int                 // of the line on the terminal

	stop chan struct{}
	wg   sync.WaitGroup
}

// running is a scenario run in progress, as its last report says.
type running struct {
	name     string // backend, fencing and scenario
	start    time.Time
	planned  time.Duration
	sections int
	overlaps int
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// newProgress starts a progress display on w for total scenario runs: in
// place, updated every 250ms, if tty; else a line every `every`.
func newProgress(w io.Writer, tty bool, every time.Duration, total int) *progress {
	p := &progress{w: w, tty: tty, every: every, total: total, began: time.Now(), stop: make(chan struct{}), running: map[string]*running{}}
	if tty {
		p.every = 250 * time.Millisecond
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.print()
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// update takes a scenario run's progress; name is its backend and fencing
// mode.
func (p *progress) update(name string, r report.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := r.Run
	if key == "" {
		key = name + " " + r.Scenario
	}
	st := p.running[key]
	if r.Done {
		delete(p.running, key)
		return
	}
	if st == nil {
		st = &running{name: name + " " + r.Scenario, start: time.Now().Add(-r.Elapsed)}
		p.running[key] = st
	}
	st.planned, st.sections, st.overlaps = r.Planned, r.Sections, r.Overlaps
}

// end counts a result.
func (p *progress) end(r report.Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if r.Verdict == report.Broken {
		p.broken++
		p.lost += max(r.Lost, 0)
	}
	if r.Finding() {
		p.findings++
	}
}

func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "locksuite: [%d/%d] ", min(p.done+1, p.total), p.total)
	// The run going longest, and how many besides.
	var cur *running
	for _, st := range p.running {
		if cur == nil || st.start.Before(cur.start) || st.start.Equal(cur.start) && st.name < cur.name {
			cur = st
		}
	}
	if cur != nil {
		fmt.Fprintf(&b, "%s %v of %v, %d sections, %d overlapping", cur.name, time.Since(cur.start).Round(100*time.Millisecond),
			cur.planned.Round(100*time.Millisecond), cur.sections, cur.overlaps)
		if n := len(p.running); n > 1 {
			fmt.Fprintf(&b, " (and %d more running)", n-1)
		}
	} else {
		b.WriteString("starting")
	}
	fmt.Fprintf(&b, "; %v in all; violations so far: %d broken runs, %d lost updates, %d unexpected",
		time.Since(p.began).Round(time.Second), p.broken, p.lost, p.findings)
	return b.String()
}

func (p *progress) print() {
	l := p.line()
	if !p.tty {
		fmt.Fprintln(p.w, l)
		return
	}
	// One line, rewritten in place; padded over a longer previous one.
	pad := max(p.width-len(l), 0)
	p.width = len(l)
	fmt.Fprintf(p.w, "\r%s%s", l, strings.Repeat(" ", pad))
}

// close stops the display and, on a terminal, clears its line.
func (p *progress) close() {
	close(p.stop)
	p.wg.Wait()
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	}
}
