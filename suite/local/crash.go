package local

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/locksuite/locksuite/harness/lazyfs"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// WithCrash makes Start start every server crashable, for the crash
// scenarios (suite.ServerCrash, suite.PowerLoss and their cluster forms):
// each server's data directory (each member's) on a filesystem that can
// lose what the server did not sync (harness/lazyfs, a FUSE filesystem:
// root and /dev/fuse; where it cannot be mounted, the servers start
// without it and the power-loss scenarios are skipped with the reason),
// etcd, NATS and kube-apiserver's etcd as processes of their own rather
// than inside this one, Consul as a server with its data in a directory
// rather than in -dev mode, and each service at the durability setting
// the crash scenarios measure: the servers' packaged defaults (Postgres's
// and MariaDB's commits flushed, ZooKeeper's forceSync=yes, etcd's fsync,
// kube-apiserver's etcd's too), Redis without persistence and NATS at its
// default sync interval, as without WithCrash, and each variant (Variants)
// at its own setting. Their Configs' Servers then implement suite.Crasher.
//
// Without it, the harness starts its usual servers, faster where fsync is
// off and embedded where it can be, and the crash scenarios are skipped:
// start a crash scenario's servers with it only, since it costs the other
// scenarios time (docs/crash.md gives the measurement), which is what the
// CLI does when a crash scenario is selected.
func WithCrash() Option { return func(o *options) { o.crash = true } }

// startOptions are the options service s's servers start with: a
// variant's durability; under WithCrash (crash), the service's durability
// and lazyfs, or (lazy false: FUSE is not available) crashable without it.
func startOptions(s *service, crash, lazy bool) []servers.Option {
	var opts []servers.Option
	if s.variant || crash {
		opts = append(opts, servers.WithDurability(s.durability))
	}
	switch {
	case crash && lazy:
		opts = append(opts, servers.WithLazyFS())
	case crash:
		opts = append(opts, servers.WithCrash())
	}
	return opts
}

// startCrashable starts s under WithCrash: on lazyfs, or where FUSE is not
// available without it, noPower saying why its power cannot be lost.
func startCrashable(ctx context.Context, s *service) (srv servers.Server, noPower string, err error) {
	srv, err = s.start(ctx, startOptions(s, true, true)...)
	if errors.Is(err, lazyfs.ErrUnavailable) {
		noPower = fmt.Sprintf("%s cannot lose power here: %v", s.name, err)
		srv, err = s.start(ctx, startOptions(s, true, false)...)
	}
	return srv, noPower, err
}

// crashing makes a service's suite.Servers a suite.Crasher: it crashes the
// servers Start started WithCrash, one crash at a time in an Env and never
// while Close stops them (servers.Crasher's rule).
type crashing struct {
	c servers.Crasher
	// cannot, if not empty, is why the service cannot crash at all;
	// noPower why it cannot lose power.
	cannot, noPower string
	mu              *sync.Mutex // the Env's
}

// notCrashable is why the servers of an Env started without WithCrash do
// not crash.
const notCrashable = "the harness started its servers without local.WithCrash (their fast settings, etcd and NATS inside its own process): the CLI starts them crashable when a crash scenario is selected"

// crashingOf is how the Env crashes the server srv it started (with
// crash: WithCrash; noPower: why it cannot lose power).
func (e *Env) crashingOf(srv servers.Server, crash bool, noPower string) *crashing {
	c, ok := srv.(servers.Crasher)
	switch {
	case !crash:
		return &crashing{cannot: notCrashable}
	case !ok:
		return &crashing{cannot: srv.Name() + " cannot be crashed and restarted by the harness"}
	}
	return &crashing{c: c, noPower: noPower, mu: &e.crashMu}
}

// unsupportedf is an error wrapping errors.ErrUnsupported whose text is
// the reason alone.
func unsupportedf(format string, args ...any) error { return noClock(fmt.Sprintf(format, args...)) }

// CanCrash says why the service cannot crash (or lose power), if it
// cannot.
func (c *crashing) CanCrash(powerLoss bool) error {
	switch {
	case c == nil:
		return unsupportedf("the harness cannot crash this service")
	case c.cannot != "":
		return unsupportedf("%s", c.cannot)
	case powerLoss && c.noPower != "":
		return unsupportedf("%s", c.noPower)
	}
	return nil
}

// Crash crashes the service (servers.Crasher.Crash) and reports it as
// suite.CrashReport.
func (c *crashing) Crash(ctx context.Context, powerLoss bool) (suite.CrashReport, error) {
	if err := c.CanCrash(powerLoss); err != nil {
		return suite.CrashReport{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.c.Crash(ctx, powerLoss)
	return suite.CrashReport{PowerLoss: r.PowerLoss, Killed: r.Killed, Serving: r.Serving,
		DroppedBytes: r.Dropped.Bytes, DroppedFiles: r.Dropped.Files}, err
}

// Sync syncs the service's data directories (servers.Crasher.Sync).
func (c *crashing) Sync() error {
	if c.CanCrash(false) != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c.Sync()
}

// crashable is a suite.Servers of this package's, told how it crashes.
type crashable interface {
	suite.Servers
	setCrashing(*crashing)
}

func (s *serverMembers) setCrashing(c *crashing)  { s.crashing = c }
func (s *clusterServers) setCrashing(c *crashing) { s.crashing = c }
func (k *kubeMembers) setCrashing(c *crashing)    { k.crashing = c }

var (
	_ suite.Crasher = (*serverMembers)(nil)
	_ suite.Crasher = (*clusterServers)(nil)
	_ suite.Crasher = (*asyncServers)(nil)
	_ suite.Crasher = (*kubeMembers)(nil)
	_ crashable     = (*serverMembers)(nil)
	_ crashable     = (*clusterServers)(nil)
	_ crashable     = (*asyncServers)(nil)
	_ crashable     = (*kubeMembers)(nil)
)
