package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Crasher is an optional capability of a Service whose processes the
// harness can kill and start again on their own data (suite/local adapts
// harness/servers' Crasher, which this package cannot import).
type Crasher interface {
	// CanCrash returns nil when Crash(ctx, powerLoss) can strike this
	// service, or an error wrapping errors.ErrUnsupported whose text says
	// why not (a server embedded in the harness's process, a data
	// directory that is not on a filesystem that can lose power).
	CanCrash(powerLoss bool) error
	// Crash kills every server process of the service at once (SIGKILL),
	// with powerLoss discards what they wrote and did not sync, starts
	// them again on the same data and addresses, and returns once the
	// service serves again. Its error wraps errors.ErrUnsupported when the
	// service cannot crash so (CanCrash's reason).
	Crash(ctx context.Context, powerLoss bool) (CrashReport, error)
	// Sync writes what the service's processes wrote and did not sync,
	// as sync(1) would: a power loss after it loses only what they write
	// from then on, as when the service has run a while (an operating
	// system writes dirty pages back within half a minute). It does
	// nothing where power cannot be lost.
	Sync() error
}

// CrashReport is what a Crasher's Crash did.
type CrashReport struct {
	PowerLoss bool
	// Killed is when the processes were killed; Serving when the service
	// served again after the restart.
	Killed, Serving time.Time
	// DroppedBytes and DroppedFiles are what the power loss discarded:
	// the bytes written and not synced, and the files they were written
	// to (a cluster's prefixed with the member's name), sorted. Zero
	// without a power loss.
	DroppedBytes int64
	DroppedFiles []string
	_            struct{}
}

// Down is how long the service was down: Serving - Killed.
func (r CrashReport) Down() time.Duration { return r.Serving.Sub(r.Killed) }

// Dropped says what the power loss dropped: "81 B of 1 file
// (data/appendonly.aof.1.incr.aof)", naming at most three files, or
// "nothing".
func (r CrashReport) Dropped() string {
	if r.DroppedBytes == 0 && len(r.DroppedFiles) == 0 {
		return "nothing"
	}
	files := r.DroppedFiles
	more := ""
	if len(files) > 3 {
		files, more = files[:3], fmt.Sprintf(", and %d more", len(files)-3)
	}
	s := fmt.Sprintf("%d B of %d file", r.DroppedBytes, len(r.DroppedFiles))
	if len(r.DroppedFiles) != 1 {
		s += "s"
	}
	return s + " (" + strings.Join(files, ", ") + more + ")"
}

// Crash kills the lock service's every process and starts it again at
// once on the same data and addresses (Crasher), with PowerLoss after
// discarding what it had not synced: a single server's crash, or with
// Cluster every member of a cluster at once. Inject returns once the
// service serves again; there is nothing to heal. Its span runs from the
// kill to the moment the service served again, on Clock.
//
// It does not apply to a service without member processes or without
// Crasher, to one that cannot crash so (Crasher.CanCrash), nor, with
// Cluster, to a single server (a Service without Leaderer), or, without
// it, to a cluster: each is the other's scenario.
type Crash struct {
	Service   Service
	PowerLoss bool
	Cluster   bool
	Clock     func() time.Duration // the run's clock, for the span

	struck bool
	report CrashReport
	span   Span
}

// kind is the span's kind: "crash" or "power loss".
func (f *Crash) kind() string {
	if f.PowerLoss {
		return "power loss"
	}
	return "crash"
}

func (f *Crash) Applies(context.Context) error {
	if err := hasMembers(f.Service, "process to crash"); err != nil {
		return err
	}
	_, cluster := f.Service.(Leaderer)
	switch {
	case f.Cluster && !cluster:
		return NotApplicable("a single server, not a cluster: server-crash and power-loss crash it")
	case !f.Cluster && cluster:
		return NotApplicable("a cluster: cluster-crash and cluster-power-loss crash every member at once")
	}
	c, ok := f.Service.(Crasher)
	if !ok {
		return NotApplicable("Config.Servers cannot crash and restart the service (it does not implement suite.Crasher)")
	}
	if err := c.CanCrash(f.PowerLoss); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return NotApplicable(err.Error())
		}
		return err
	}
	return nil
}

func (f *Crash) Inject(ctx context.Context) (func() error, error) {
	if err := f.Applies(ctx); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range f.Service.Members() {
		names = append(names, m.Name())
	}
	r, err := f.Service.(Crasher).Crash(ctx, f.PowerLoss)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, NotApplicable(err.Error())
		}
		return nil, fmt.Errorf("%s of %s: %w", f.kind(), strings.Join(names, ", "), err)
	}
	now, at := time.Now(), f.Clock()
	on := func(t time.Time) time.Duration { return at - now.Sub(t) }
	what := f.kind() + " of " + strings.Join(names, ", ")
	if f.PowerLoss {
		what += ", dropped " + r.Dropped()
	}
	f.struck, f.report = true, r
	f.span = Span{Lane: ServiceLane, Kind: f.kind(), What: what, Start: on(r.Killed), End: on(r.Serving), Until: "serving again"}
	return nil, nil
}

func (f *Crash) Span() Span {
	if !f.struck {
		return Span{Lane: ServiceLane, Kind: f.kind(), What: f.kind(), Until: "serving again"}
	}
	return f.span
}

// Sync syncs the service (Crasher.Sync), so that the crash strikes only
// what the service writes from now on.
func (f *Crash) Sync() error {
	if c, ok := f.Service.(Crasher); ok {
		return c.Sync()
	}
	return nil
}

// Crashed is what the crash did, once it struck.
func (f *Crash) Crashed() (CrashReport, bool) { return f.report, f.struck }

var (
	_ Fault   = (*Crash)(nil)
	_ Crashed = (*Crash)(nil)
	_ Syncer  = (*Crash)(nil)
)
