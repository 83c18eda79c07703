// Package worker runs clients as separate OS processes, so that a fault can
// stop a whole process (SIGSTOP), renewal goroutines included, as a GC pause
// or a VM stall does.
//
// A worker is the current binary run again (the CLI, or a user's own go test
// binary) with LOCKSUITE_WORKER set to a JSON Spec. The suite's entry points
// notice it, build the Locker and the Store from the same Config as the
// coordinator, and call Serve, which loops acquire → read → work → write →
// release until the Spec's deadline and reports every event on file
// descriptor 3, one JSON object a line. Every Spec.StallEvery-th critical
// section asks the coordinator before its write (a "stall" event) and
// waits on descriptor 4 until the coordinator answers: meanwhile the
// coordinator strikes the run's fault (faults.Stall stops the process, or
// lets only the waiting goroutine wait). An Acquire that fails (a session
// the service dropped while the worker was stopped) is asked again, up to
// three times in a row; any other error ends the worker with an "error"
// event.
package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/locksuite/locksuite/internal/wait"
)

// acquireRetries is how many failed Acquires in a row a worker asks again
// after; the next failure ends it with the error.
const acquireRetries = 3

// EnvVar carries a worker's Spec.
const EnvVar = "LOCKSUITE_WORKER"

// Spec is what the coordinator tells one worker.
type Spec struct {
	Target   string        `json:"target"` // which Config: see the suite
	ID       int           `json:"id"`
	Key      string        `json:"key"`
	Endpoint string        `json:"endpoint"`
	Lease    time.Duration `json:"lease"`
	Store    string        `json:"store"`
	Fenced   bool          `json:"fenced"`
	Work     time.Duration `json:"work"`
	Base     time.Duration `json:"base"` // history.Clock reading of time zero
	// Every StallEvery-th critical section asks the coordinator before its
	// write (a "stall" event) and waits for its answer. 0: never.
	StallEvery int `json:"stall_every"`
}

// FromEnv returns the Spec this process was started with, if it is a worker.
func FromEnv() (Spec, bool, error) {
	v := os.Getenv(EnvVar)
	if v == "" {
		return Spec{}, false, nil
	}
	s, err := parseSpec(v)
	return s, true, err
}

// parseSpec decodes a Spec from the value of EnvVar.
func parseSpec(v string) (Spec, error) {
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return Spec{}, fmt.Errorf("worker: bad %s: %w", EnvVar, err)
	}
	return s, nil
}

// Event is one line a worker reports.
type Event struct {
	Kind     string           `json:"kind"` // ready, read (holds the lock and has read), released, section, stall (waits for the coordinator before its write), done, error
	Client   int              `json:"client"`
	T        time.Duration    `json:"t"` // since Base
	Section  *history.Section `json:"section,omitempty"`
	Writes   int              `json:"writes,omitempty"`
	Rejected uint64           `json:"rejected,omitempty"`
	Err      string           `json:"err,omitempty"`
}

// Serve is the worker's side: it runs the loop of spec with l and s, reports
// on descriptor 3 and waits for the answers to its stalls on descriptor 4.
func Serve(spec Spec, l backends.Locker, s fencing.Store) error {
	out := os.NewFile(3, "events")
	acks := bufio.NewReader(os.NewFile(4, "acks"))
	if out == nil {
		return errors.New("worker: no events descriptor (3): a worker is started by the coordinator, not by hand")
	}
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		e.Client = spec.ID
		_ = enc.Encode(e)
	}
	rec := history.NewRecorderAt(spec.Base, func(sec history.Section) {
		emit(Event{Kind: "section", T: sec.End, Section: &sec})
	})
	// Ready; wait for the coordinator's "go <until>" so that every worker
	// starts together and the fault schedule counts from that moment.
	emit(Event{Kind: "ready", T: rec.Now()})
	line, err := acks.ReadString('\n')
	if err != nil {
		return fmt.Errorf("worker: no go from the coordinator: %w", err)
	}
	var until int64
	if _, err := fmt.Sscanf(line, "go %d", &until); err != nil {
		return fmt.Errorf("worker: bad go line %q: %w", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(until)-rec.Now())
	defer cancel()
	writes, n := 0, 0
	hooks := traffic.Hooks{
		Read:     func() { emit(Event{Kind: "read", T: rec.Now()}) },
		Released: func() { emit(Event{Kind: "released", T: rec.Now()}) },
		BeforeWrite: func(ctx context.Context) {
			if spec.StallEvery <= 0 || n%spec.StallEvery != 0 {
				return
			}
			emit(Event{Kind: "stall", T: rec.Now()})
			_, _ = acks.ReadString('\n') // returns once the coordinator's fault has healed
		},
	}
	failed := 0 // Acquires that failed in a row
	for ctx.Err() == nil {
		n++
		err := traffic.Increment(ctx, spec.ID, l, s, rec, spec.Work, hooks)
		var se *traffic.StepError
		switch {
		case err == nil:
			writes++
			failed = 0
			continue
		case errors.Is(err, fencing.ErrStale) || ctx.Err() != nil:
			continue
		case errors.As(err, &se) && se.Step == "acquire" && failed < acquireRetries:
			// No section entered, nothing written: a client whose session
			// the service dropped while it was stopped asks again, as an
			// application would.
			failed++
			fmt.Fprintf(os.Stderr, "worker %d: %v; asking again\n", spec.ID, err)
			_ = wait.For(ctx, 10*time.Millisecond)
			continue
		}
		emit(Event{Kind: "error", T: rec.Now(), Err: err.Error()})
		return err
	}
	emit(Event{Kind: "done", T: rec.Now(), Writes: writes, Rejected: s.Rejected()})
	return nil
}

// Proc is the coordinator's handle on one worker process.
type Proc struct {
	ID     int
	cmd    *exec.Cmd
	events *os.File // read end
	acks   *os.File // write end
	log    string
	done   chan struct{}
	err    error
}

// Start runs argv as worker spec.ID with env added to this process's
// environment, its output in logPath. Events are read with Events.
func Start(spec Spec, argv, env []string, logPath string) (*Proc, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	evR, evW, ackR, ackW, err := spawn.Pipes()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...), EnvVar+"="+string(b))
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.ExtraFiles = []*os.File{evW, ackR}
	// Its own process group (a signal to the group reaches any helper it
	// forks) and death with the coordinator.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil { // from the spawning thread: see internal/spawn
		evR.Close()
		evW.Close()
		ackR.Close()
		ackW.Close()
		return nil, fmt.Errorf("worker %d: start %s: %w", spec.ID, argv[0], err)
	}
	evW.Close()
	ackR.Close()
	p := &Proc{ID: spec.ID, cmd: cmd, events: evR, acks: ackW, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the worker's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Events decodes the worker's events into ch until it closes its descriptor;
// then it closes nothing (several workers share ch) and returns.
func (p *Proc) Events(ch chan<- Event) error { return DecodeEvents(p.events, p.ID, ch) }

// eventKinds are the kinds a worker reports (Event.Kind): a new kind must
// be added here, or DecodeEvents refuses it.
var eventKinds = map[string]bool{"ready": true, "read": true, "released": true, "section": true, "stall": true, "done": true, "error": true}

// DecodeEvents reads worker id's events from r, one JSON object each, into
// ch until r ends (nil) or holds something that is not a valid event (an
// error naming the worker). Each event is checked before it is sent: a
// known kind, a Section with "section" events only, and a valid one
// (history.Section.Valid). Client fields are set to id, whatever the
// worker wrote.
func DecodeEvents(r io.Reader, id int, ch chan<- Event) error {
	dec := json.NewDecoder(r)
	for {
		var e Event
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("worker %d: bad event: %w", id, err)
		}
		if !eventKinds[e.Kind] {
			return fmt.Errorf("worker %d: bad event: unknown kind %q", id, e.Kind)
		}
		if (e.Kind == "section") != (e.Section != nil) {
			return fmt.Errorf("worker %d: bad event: a %q event with section %v", id, e.Kind, e.Section != nil)
		}
		e.Client = id
		if e.Section != nil {
			if err := e.Section.Valid(); err != nil {
				return fmt.Errorf("worker %d: bad event: %w", id, err)
			}
			e.Section.Client = id
		}
		ch <- e
	}
}

// Go starts a ready worker: it begins sections until until (since Base).
func (p *Proc) Go(until time.Duration) { _, _ = fmt.Fprintf(p.acks, "go %d\n", int64(until)) }

// Ack answers a worker waiting after a "stall" event: it goes on to its
// write.
func (p *Proc) Ack() { _, _ = p.acks.Write([]byte("ok\n")) }

// Stop stops the worker's process group (faults.Group).
func (p *Proc) Stop() error { return faults.Group(p.Pid()).Stop() }

// Cont continues the worker's process group.
func (p *Proc) Cont() error { return faults.Group(p.Pid()).Cont() }

// End continues the worker (it may be stopped), waits up to grace for it to
// exit, then kills it. It returns once the process is gone.
func (p *Proc) End(grace time.Duration) {
	_ = p.Cont()
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = faults.Group(p.Pid()).Kill()
		<-p.done
	}
	p.events.Close()
	p.acks.Close()
}

// Done is closed when the worker has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Log returns the tail of the worker's output, for error messages.
func (p *Proc) Log() string { return spawn.LogTail(p.log, 1500) }
