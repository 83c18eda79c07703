package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the sentinels monitor the primary under.
const SentinelMaster = "locksuite"

// RedisSentinel is a Redis primary with one asynchronous replica, watched by
// three Sentinels (quorum 2) that promote the replica when the primary
// fails. Started by StartRedisSentinel.
type RedisSentinel struct {
	group     // the Redis servers: redis-1 starts as the primary
	hosts     *Hosts
	sentinels []*Proc
	saddrs    []string

	mu      sync.Mutex
	primary string // the primary's address, as the sentinels last agreed
}

func (s *RedisSentinel) Name() string { return "redis-sentinel" }

// Endpoint is the sentinels' addresses, comma-separated: a client asks them
// for the primary of SentinelMaster.
func (s *RedisSentinel) Endpoint() string { return strings.Join(s.saddrs, ",") }

// SentinelAddrs are the sentinels' addresses.
func (s *RedisSentinel) SentinelAddrs() []string { return s.saddrs }

// MasterName is the name the sentinels know the primary by.
func (s *RedisSentinel) MasterName() string { return SentinelMaster }

// StartRedisSentinel starts Debian's redis-server twice (a primary, and a
// replica of it: asynchronous replication, no persistence) and
// redis-sentinel three times, each monitoring the primary with quorum 2,
// down-after-milliseconds 1000 and failover-timeout 2000, on free loopback
// ports; and waits until the sentinels agree on the primary, know each
// other and the replica, and the replica is in sync.
//
// The sentinels' INFO and hello periods are shortened with SENTINEL DEBUG
// (Redis 7) from 10 s and 2 s to 1 s and 500 ms, so that a restarted
// replica is known, and a failover completes, in seconds.
// down-after-milliseconds is 1 s, not less: at 500 ms the sentinels took
// each just-promoted primary for down half a second after promoting it,
// tried to fail it over, found no replica, and then waited 2 ×
// failover-timeout before the next real failover.
func StartRedisSentinel(ctx context.Context, opts ...Option) (*RedisSentinel, error) {
	return StartRedisSentinelOn(ctx, nil, SentinelOptions{}, opts...)
}

// SentinelOptions change the Redis servers of StartRedisSentinelOn.
type SentinelOptions struct {
	// MinReplicasToWrite and MinReplicasMaxLag (seconds) are Redis's own
	// mitigation of a split brain (min-replicas-to-write,
	// min-replicas-max-lag), set on both servers: a primary refuses writes
	// while fewer than MinReplicasToWrite replicas have acknowledged it
	// within MinReplicasMaxLag seconds. 0: not set (Redis's default).
	MinReplicasToWrite, MinReplicasMaxLag int
	_                                     struct{}
}

// StartRedisSentinelOn is StartRedisSentinel with its processes placed by h
// (nil: loopback), in this order: redis-1 (the first primary), redis-2,
// sentinel-1, sentinel-2, sentinel-3. The Redis servers take
// WithDurability (as StartRedis's: without it no persistence) and
// WithLazyFS; Crash crashes them, not the sentinels (their configuration,
// rewritten and synced by themselves, is not on lazyfs).
func StartRedisSentinelOn(ctx context.Context, h *Hosts, o SentinelOptions, opts ...Option) (*RedisSentinel, error) {
	fail := func(err error, fix string) error { return &Unavailable{"redis-sentinel", err, FixFUSE(err, fix)} }
	so, err := ClusterSettings("redis-sentinel", opts, DurabilityAppendFsyncEverysec, DurabilityAppendFsyncAlways)
	if err != nil {
		return nil, err
	}
	if err := h.Check("redis-sentinel", 5); err != nil {
		return nil, fail(err, "place all five processes")
	}
	srv, err := lookPath("redis-server")
	if err != nil {
		return nil, fail(err, "install it (apt-get install redis-server, or run ci/setup.sh)")
	}
	sen, err := lookPath("redis-sentinel")
	if err != nil {
		return nil, fail(err, "install it (apt-get install redis-sentinel, or run ci/setup.sh)")
	}
	ports, dir, err := PortsAndDir(5, "redis-sentinel")
	if err != nil {
		return nil, fail(err, "free loopback ports and a writable temporary directory")
	}
	s := &RedisSentinel{group: group{dir: dir}, hosts: h, primary: net.JoinHostPort(h.Host(0), strconv.Itoa(ports[0]))}
	for i := range 2 {
		name, mdir, data, err := s.memberData("redis", i, "data", so)
		if err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		host := h.Host(i)
		addr := net.JoinHostPort(host, strconv.Itoa(ports[i]))
		start := h.Starter(i)
		if _, err := s.addOn(name, mdir, host, ports[i], func() (*Proc, error) {
			argv := append([]string{srv, "--port", strconv.Itoa(ports[i]), "--bind", host,
				"--dir", data.path, "--daemonize", "no", "--repl-diskless-sync-delay", "0"}, redisPersistence(so.Durability)...)
			if h != nil {
				// Off loopback Redis wants a password otherwise; these are
				// the harness's own isolated addresses.
				argv = append(argv, "--protected-mode", "no")
			}
			if o.MinReplicasToWrite > 0 {
				argv = append(argv, "--min-replicas-to-write", strconv.Itoa(o.MinReplicasToWrite),
					"--min-replicas-max-lag", strconv.Itoa(max(o.MinReplicasMaxLag, 1)))
			}
			// Anything but the primary (the replica, or a primary that was
			// failed over and comes back) replicates from the primary.
			if p := s.primaryAddr(); p != addr {
				h, pt, _ := net.SplitHostPort(p)
				argv = append(argv, "--replicaof", h, pt)
			}
			return Launch(start, name, mdir, nil, nil, argv...)
		}); err != nil {
			s.Stop()
			return nil, fail(err, "check that "+srv+" runs")
		}
	}
	for i := range 3 {
		name, sdir, err := s.memberDir("sentinel", i)
		if err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		port := ports[2+i]
		host := h.Host(2 + i)
		conf := fmt.Sprintf(`port %d
bind %s
daemonize no
protected-mode no
dir %s
sentinel monitor %s %s %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 2000
sentinel parallel-syncs %s 1
`, port, host, sdir, SentinelMaster, h.Host(0), ports[0], SentinelMaster, SentinelMaster, SentinelMaster)
		cf := filepath.Join(sdir, "sentinel.conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		p, err := Launch(h.Starter(2+i), name, sdir, nil, nil, sen, cf)
		if err != nil {
			s.Stop()
			return nil, fail(err, "check that "+sen+" runs")
		}
		s.sentinels = append(s.sentinels, p)
		s.saddrs = append(s.saddrs, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	for i, a := range s.saddrs {
		err := WaitReady(ctx, s.sentinels[i], 10*time.Second, func(ctx context.Context) error {
			return s.do(ctx, a, func(c *goredis.Client) error {
				for _, kv := range [][2]string{{"info-period", "1000"}, {"publish-period", "500"}} {
					if err := c.Do(ctx, "SENTINEL", "DEBUG", kv[0], kv[1]).Err(); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			s.Stop()
			return nil, fail(err, "redis-sentinel 7 or newer (SENTINEL DEBUG)")
		}
	}
	if err := s.waitStarted(ctx, 30*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, fail(err, "see the error and the sentinel logs above")
	}
	return s, nil
}

func (s *RedisSentinel) primaryAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// do runs f with a one-off client of addr.
func (s *RedisSentinel) do(ctx context.Context, addr string, f func(*goredis.Client) error) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1, Dialer: s.hosts.Dial})
	defer c.Close()
	return f(c)
}

// sentinelPrimary asks every sentinel for the primary and returns the
// member they agree on, after checking that each can reach a quorum.
func (s *RedisSentinel) sentinelPrimary(ctx context.Context) (*Member, error) {
	for _, p := range s.sentinels {
		if err := p.Exited(); err != nil {
			return nil, err
		}
	}
	agreed := ""
	for _, a := range s.saddrs {
		err := s.do(ctx, a, func(c *goredis.Client) error {
			addr, err := c.Do(ctx, "SENTINEL", "get-master-addr-by-name", SentinelMaster).StringSlice()
			if err != nil {
				return err
			}
			if len(addr) != 2 {
				return fmt.Errorf("no primary: %v", addr)
			}
			p := net.JoinHostPort(addr[0], addr[1])
			if agreed != "" && p != agreed {
				return fmt.Errorf("sentinels disagree on the primary (%s, %s)", agreed, p)
			}
			agreed = p
			return c.Do(ctx, "SENTINEL", "ckquorum", SentinelMaster).Err()
		})
		if err != nil {
			return nil, fmt.Errorf("sentinel %s: %w", a, err)
		}
	}
	for _, m := range s.members {
		if m.addr == agreed {
			s.mu.Lock()
			s.primary = agreed
			s.mu.Unlock()
			return m, nil
		}
	}
	return nil, fmt.Errorf("the sentinels' primary %s is not a member", agreed)
}

// Healthy: the sentinels agree on a running primary that says it is one
// and can each reach a quorum; every other running server is its replica
// with its link up, and every sentinel lists that replica as up.
func (s *RedisSentinel) Healthy(ctx context.Context) error {
	p, err := s.sentinelPrimary(ctx)
	if err != nil {
		return err
	}
	ms, err := Running(s.members)
	if err != nil {
		return err
	}
	if !p.Running() {
		return fmt.Errorf("the primary %s is not running; the sentinels' last events: %s", p.name, s.events())
	}
	for _, m := range ms {
		err := s.do(ctx, m.addr, func(c *goredis.Client) error {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if m == p {
				if !strings.Contains(info, "role:master") {
					return errors.New("the sentinels' primary is not a master")
				}
				return nil
			}
			_, port, _ := net.SplitHostPort(p.addr)
			if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+port+"\r") ||
				!strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("not an up-to-date replica of %s", p.addr)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if m == p {
			continue
		}
		for _, a := range s.saddrs {
			err := s.do(ctx, a, func(c *goredis.Client) error {
				reps, err := c.Do(ctx, "SENTINEL", "replicas", SentinelMaster).Slice()
				if err != nil {
					return err
				}
				for _, r := range reps {
					f := fields(r)
					if net.JoinHostPort(f["ip"], f["port"]) == m.addr {
						if fl := f["flags"]; strings.Contains(fl, "down") || strings.Contains(fl, "disconnected") {
							return fmt.Errorf("lists replica %s as %s", m.name, fl)
						}
						return nil
					}
				}
				return fmt.Errorf("does not know replica %s yet", m.name)
			})
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", a, err)
			}
		}
	}
	return nil
}

// events are the last few warnings (+sdown, +odown, +try-failover,
// -failover-abort-…, +tilt) in each sentinel's log: why a failover has not
// happened.
func (s *RedisSentinel) events() string {
	var out []string
	for _, p := range s.sentinels {
		b, _ := os.ReadFile(p.log)
		var ev []string
		for _, l := range strings.Split(string(b), "\n") {
			// "pid:X 04 Dec 2026 08:24:54.015 # +odown master …"
			if _, e, ok := strings.Cut(l, " # "); ok {
				ev = append(ev, e)
			}
		}
		out = append(out, fmt.Sprintf("%s [%s]", p.name, strings.Join(ev[max(0, len(ev)-4):], "; ")))
	}
	return strings.Join(out, ", ")
}

// fields turns a sentinel reply (a flat list of names and values, or a
// map) into a map.
func fields(r any) map[string]string {
	out := map[string]string{}
	switch v := r.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			out[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return out
}

// Leader is the primary the sentinels agree on.
func (s *RedisSentinel) Leader(ctx context.Context) (*Member, error) { return s.sentinelPrimary(ctx) }

// Restart starts every killed server again as a replica of the current
// primary, and waits until it is in sync and the sentinels list it.
func (s *RedisSentinel) Restart(ctx context.Context) error {
	if _, err := s.sentinelPrimary(ctx); err != nil {
		return err
	}
	return s.restart(ctx, 30*time.Second, s.Healthy)
}

// HoldReplication makes the replicas fall behind the primary from now on:
// it waits until every replica has what the primary has (WAIT), stops
// them (SIGSTOP) and drops their replication links on the primary (CLIENT
// KILL TYPE replica), so that writes acknowledged from now on exist on the
// primary only, as writes within an asynchronous replica's lag do. resume
// continues the replicas; they resynchronise if the primary is still there.
// A stopped replica must be resumed within down-after-milliseconds (1 s)
// to stay eligible for promotion.
func (s *RedisSentinel) HoldReplication(ctx context.Context) (resume func() error, err error) {
	p, err := s.sentinelPrimary(ctx)
	if err != nil {
		return nil, err
	}
	var reps []*Member
	for _, m := range s.members {
		if m != p && m.Running() {
			reps = append(reps, m)
		}
	}
	if len(reps) == 0 {
		return nil, errors.New("no running replica")
	}
	resume = func() error {
		var errs []error
		for _, m := range reps {
			errs = append(errs, m.Cont())
		}
		return errors.Join(errs...)
	}
	err = s.do(ctx, p.addr, func(c *goredis.Client) error {
		n, err := c.Wait(ctx, len(reps), 2*time.Second).Result()
		if err != nil {
			return err
		}
		if n < int64(len(reps)) {
			return fmt.Errorf("only %d of %d replicas acknowledged the primary's writes", n, len(reps))
		}
		for _, m := range reps {
			if err := m.Stop(); err != nil {
				return err
			}
		}
		return c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err()
	})
	if err != nil {
		_ = resume()
		return nil, fmt.Errorf("hold replication: %w", err)
	}
	return resume, nil
}

// Stop ends every server and sentinel and removes the directory.
func (s *RedisSentinel) Stop() error {
	s.stop(syscall.SIGTERM, 3*time.Second, func() {
		for _, p := range s.sentinels {
			p.stop(syscall.SIGTERM, 3*time.Second)
		}
	})
	return nil
}
