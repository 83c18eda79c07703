package local

import (
	"context"
	"errors"
	"fmt"

	"github.com/locksuite/locksuite/harness/lazyfs"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
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
func startOptions(s *services.Service, crash, lazy bool) []servers.Option {
	var opts []servers.Option
	if s.Variant || crash {
		opts = append(opts, servers.WithDurability(s.Durability))
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
func startCrashable(ctx context.Context, s *services.Service) (srv servers.Server, noPower string, err error) {
	srv, err = s.Start(ctx, startOptions(s, true, true)...)
	if errors.Is(err, lazyfs.ErrUnavailable) {
		noPower = fmt.Sprintf("%s cannot lose power here: %v", s.Name, err)
		srv, err = s.Start(ctx, startOptions(s, true, false)...)
	}
	return srv, noPower, err
}

// notCrashable is why the servers of an Env started without WithCrash do
// not crash.
const notCrashable = "the harness started its servers without local.WithCrash (their fast settings, etcd and NATS inside its own process): the CLI starts them crashable when a crash scenario is selected"

// crashingOf is how the Env crashes the server srv it started (with
// crash: WithCrash; noPower: why it cannot lose power).
func (e *Env) crashingOf(srv servers.Server, crash bool, noPower string) *services.Crashing {
	c, ok := srv.(servers.Crasher)
	switch {
	case !crash:
		return &services.Crashing{Cannot: notCrashable}
	case !ok:
		return &services.Crashing{Cannot: srv.Name() + " cannot be crashed and restarted by the harness"}
	}
	return &services.Crashing{C: c, NoPower: noPower, Mu: &e.crashMu}
}
