package services

import (
	"context"
	"fmt"
	"sync"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// Crashing makes a service's suite.Servers a suite.Crasher: it crashes the
// servers Start started WithCrash, one crash at a time in an Env and never
// while Close stops them (servers.Crasher's rule).
type Crashing struct {
	C servers.Crasher
	// Cannot, if not empty, is why the service cannot crash at all;
	// NoPower why it cannot lose power.
	Cannot, NoPower string
	Mu              *sync.Mutex // the Env's
}

// Unsupportedf is an error wrapping errors.ErrUnsupported whose text is
// the reason alone.
func Unsupportedf(format string, args ...any) error { return NoClock(fmt.Sprintf(format, args...)) }

// CanCrash says why the service cannot crash (or lose power), if it
// cannot.
func (c *Crashing) CanCrash(powerLoss bool) error {
	switch {
	case c == nil:
		return Unsupportedf("the harness cannot crash this service")
	case c.Cannot != "":
		return Unsupportedf("%s", c.Cannot)
	case powerLoss && c.NoPower != "":
		return Unsupportedf("%s", c.NoPower)
	}
	return nil
}

// Crash crashes the service (servers.Crasher.Crash) and reports it as
// suite.CrashReport.
func (c *Crashing) Crash(ctx context.Context, powerLoss bool) (suite.CrashReport, error) {
	if err := c.CanCrash(powerLoss); err != nil {
		return suite.CrashReport{}, err
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	r, err := c.C.Crash(ctx, powerLoss)
	return suite.CrashReport{PowerLoss: r.PowerLoss, Killed: r.Killed, Serving: r.Serving,
		DroppedBytes: r.Dropped.Bytes, DroppedFiles: r.Dropped.Files}, err
}

// Sync syncs the service's data directories (servers.Crasher.Sync).
func (c *Crashing) Sync() error {
	if c.CanCrash(false) != nil {
		return nil
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.C.Sync()
}

// Crashable is a suite.Servers of this package's or an entry's, told how
// it crashes (by suite/local, which started it).
type Crashable interface {
	suite.Servers
	SetCrashing(*Crashing)
}

func (s *ServerMembers) SetCrashing(c *Crashing) { s.Crashing = c }

func (s *ClusterServers) SetCrashing(c *Crashing) { s.Crashing = c }

var (
	_ suite.Crasher = (*ServerMembers)(nil)
	_ suite.Crasher = (*ClusterServers)(nil)
	_ suite.Crasher = (*AsyncServers)(nil)
	_ Crashable     = (*ServerMembers)(nil)
	_ Crashable     = (*ClusterServers)(nil)
	_ Crashable     = (*AsyncServers)(nil)
)
