package servertest

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/lazyfs"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// Crashable is a server or cluster that a CrashCase starts.
type Crashable interface {
	servers.Server
	servers.Crasher
}

// KV writes and reads a key of a server with a new client each time (a
// client outlives no restart).
type KV struct {
	Put func(ctx context.Context, key, value string) error
	// Get returns "" for a key that is not there.
	Get func(ctx context.Context, key string) (string, error)
}

// Outcome is what became of a key across a crash.
type Outcome int

const (
	Lost Outcome = iota
	Kept
	Either // timing decides; see the case's doc
	Down   // the server does not serve again (Crash fails)
	// KeptUnlessFailover: kept by the primary; lost only when the crash
	// ended in a failover to a replica that had not received it
	// (asynchronous replication).
	KeptUnlessFailover
)

func (o Outcome) String() string {
	return [...]string{"lost", "kept", "either", "down", "kept unless failover"}[o]
}

// Crashed is a server a CrashCase started, and what Crash needs of it.
type Crashed struct {
	S  Crashable
	KV KV
	// Dirs are the directories Stop must remove: the server's first.
	Dirs []string
	// Pids are the server's processes now, which a crash restarts; nil:
	// its Members' (every Cluster, and a single server of this module).
	Pids func() []int
}

// CrashCase is a row of Crash: a server started with its data on lazyfs
// at a durability setting, and the outcomes it must have.
type CrashCase struct {
	Name        string
	Start       func(ctx context.Context) (Crashed, error)
	Crash, Loss Outcome // k1 after Crash(false), k2 after Crash(true)
	// WriteK0 writes a key k0 right before k2 (Redis's appendfsync
	// everysec fsyncs at once after a write when none ran within the
	// current second: k2 right after another write makes its loss likely);
	// with Loss Either, k2 must be lost exactly when AOF data was dropped.
	WriteK0 bool
}

// ErrSkip wraps the error of a case that cannot run here.
var ErrSkip = errors.New("skipped")

// Crash runs each case as a subtest: it starts the server, and measures
// which of two keys survive: k1, written and synced (Crasher.Sync) before a
// crash without power loss (the server is killed and restarted on the same
// data and address; its writes are in the page cache), and k2, written and
// not synced before a crash with a power loss (what the server did not
// fsync is gone); the case fails when the measurement disagrees with its
// outcomes. A key lost to a power loss that dropped nothing, by a server
// that keeps its keys across a crash, would be the harness's bug. Then it
// stops the server and checks that its processes and directories are gone.
// A case whose Start fails with lazyfs.ErrUnavailable or ErrSkip is
// skipped.
func Crash(t *testing.T, cases []CrashCase) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := Slow(t, "starts real servers", 3*time.Minute)
			t0 := time.Now()
			c, err := tc.Start(ctx)
			if errors.Is(err, lazyfs.ErrUnavailable) || errors.Is(err, ErrSkip) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			s, db := c.S, c.KV
			if c.Pids == nil {
				c.Pids = func() []int { return memberPids(s) }
			}
			defer s.Stop()
			defer DumpLogs(t, s)
			t.Logf("serving in %v", time.Since(t0).Round(time.Millisecond))
			endpoint := s.Endpoint()
			pids := c.Pids()

			if err := db.Put(ctx, "k1", "v1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			r, err := s.Crash(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			got := keyOutcome(t, ctx, db, "k1", "v1")
			t.Logf("crash: k1 %v; down %v", got, r.Restart().Round(time.Millisecond))
			if got != tc.Crash {
				t.Errorf("k1 (synced) after a crash: %v, want %v", got, tc.Crash)
			}
			if r.PowerLoss || r.Dropped.Bytes != 0 || !r.Serving.After(r.Killed) {
				t.Errorf("crash report %+v: want no power loss, nothing dropped, Serving after Killed", r)
			}
			if s.Endpoint() != endpoint {
				t.Errorf("endpoint %s after the crash, was %s", s.Endpoint(), endpoint)
			}
			for i, p := range c.Pids() {
				if p == 0 || p == pids[i] {
					t.Errorf("process %d: pid %d after the crash, was %d: not restarted", i, p, pids[i])
				}
			}

			if tc.WriteK0 {
				if err := db.Put(ctx, "k0", "v0"); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Put(ctx, "k2", "v2"); err != nil {
				t.Fatal(err)
			}
			var before string
			if tc.Loss == KeptUnlessFailover {
				before = primary(ctx, s)
			}
			r, err = s.Crash(ctx, true)
			if tc.Loss == Down {
				t.Logf("power loss: %v", err)
				if err == nil {
					t.Errorf("the server serves again after the power loss; want it down")
				}
				servercheck.StopGone(t, s, c.Dirs[0])
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got = keyOutcome(t, ctx, db, "k2", "v2")
			t.Logf("power loss: k2 %v; dropped %d bytes of %d files %v; down %v", got, r.Dropped.Bytes,
				len(r.Dropped.Files), r.Dropped.Files[:min(6, len(r.Dropped.Files))], r.Restart().Round(time.Millisecond))
			switch {
			case !r.PowerLoss:
				t.Errorf("crash report %+v: want a power loss", r)
			case tc.Loss == KeptUnlessFailover:
				after := primary(ctx, s)
				t.Logf("primary %s before the power loss, %s after", before, after)
				if got == Lost && before == after {
					t.Errorf("k2 lost on the same primary (%s): want it kept unless the sentinels failed over", after)
				}
			case got == Lost && r.Dropped.Bytes == 0 && tc.Crash == Kept:
				t.Errorf("k2 lost, but the power loss dropped nothing: the restart lost it")
			case tc.Loss == Either:
				aof := false
				for _, f := range r.Dropped.Files {
					aof = aof || strings.HasSuffix(f, ".incr.aof")
				}
				if (got == Lost) != aof {
					t.Errorf("k2 %v, AOF data dropped: %v; want k2 lost exactly when the AOF lost data", got, aof)
				}
			case got != tc.Loss:
				t.Errorf("k2 (not synced by the harness) after a power loss: %v, want %v", got, tc.Loss)
			}
			if v, err := db.Get(ctx, "k1"); tc.Crash == Kept && (err != nil || v != "v1") {
				t.Errorf("k1 after the power loss: %q, %v; want it kept", v, err)
			}
			servercheck.StopGone(t, s, c.Dirs[0], c.Pids()...)
			for _, d := range c.Dirs[1:] {
				servercheck.StopGone(t, s, d)
			}
		})
	}
}

// CrashRow is a CrashCase's Start: start with its data on lazyfs and opts,
// reached with ops, its directory dir's.
func CrashRow[S Crashable](start func(context.Context, ...servers.Option) (S, error), ops func(S) KV, dir func(S) string, opts ...servers.Option) func(context.Context) (Crashed, error) {
	return func(ctx context.Context) (Crashed, error) {
		s, err := start(ctx, append([]servers.Option{servers.WithLazyFS()}, opts...)...)
		if err != nil {
			return Crashed{}, err
		}
		return Crashed{S: s, KV: ops(s), Dirs: []string{dir(s)}}, nil
	}
}

// ThreeMembers is a cluster's start with three members, for CrashRow.
func ThreeMembers[C any](start func(context.Context, int, ...servers.Option) (C, error)) func(context.Context, ...servers.Option) (C, error) {
	return func(ctx context.Context, opts ...servers.Option) (C, error) { return start(ctx, 3, opts...) }
}

// primary names the member s reports as its primary or leader, or ""
// when it has none or cannot say.
func primary(ctx context.Context, s Crashable) string {
	l, ok := s.(interface {
		Leader(context.Context) (*servers.Member, error)
	})
	if !ok {
		return ""
	}
	m, err := l.Leader(ctx)
	if err != nil {
		return ""
	}
	return m.Name()
}

// keyOutcome reads key: kept with value, or lost.
func keyOutcome(t *testing.T, ctx context.Context, db KV, key, value string) Outcome {
	t.Helper()
	v, err := db.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	switch v {
	case value:
		return Kept
	case "":
		return Lost
	}
	t.Fatalf("get %s: %q, want %q or nothing", key, v, value)
	return Lost
}

// memberPids are the process ids of the server's (or cluster's) Members.
func memberPids(s servers.Server) []int {
	var out []int
	if ms, ok := s.(interface{ Members() []*servers.Member }); ok {
		for _, m := range ms.Members() {
			out = append(out, m.Pid())
		}
	}
	return out
}

// DumpLogs logs the server's log (each member's), if the test failed.
func DumpLogs(t *testing.T, s servers.Server) {
	if !t.Failed() {
		return
	}
	var logs []string
	if l, ok := s.(servers.Logger); ok {
		logs = append(logs, l.Log())
	}
	if c, ok := s.(servers.Cluster); ok {
		for _, m := range c.Members() {
			logs = append(logs, m.Log())
		}
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		t.Logf("%s:\n%s", l, b[max(0, len(b)-6000):])
	}
}
