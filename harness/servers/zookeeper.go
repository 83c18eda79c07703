package servers

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/internal/spawn"
)

// zkJars: the harness runs Debian's ZooKeeper (package zookeeper, 3.8) as a plain java
// process: the server's jar, whose manifest names its dependencies in
// /usr/share/java, and slf4j-simple for a log on stderr. Running java
// directly, not zkServer.sh, makes the server the single process of its
// process group, so that SIGSTOP (a Member's Stop) freezes the server itself
// and Stop leaves nothing behind.
// Debian's manifest omits netty-codec and netty-resolver, which the Netty
// connection factory of the TLS port needs.
var zkJars = []string{
	"/usr/share/java/zookeeper.jar",
	"/usr/share/java/slf4j-simple.jar",
	"/usr/share/java/netty-codec.jar",
	"/usr/share/java/netty-resolver.jar",
}

// ZooKeeperTick is the tickTime of the servers the harness starts. A session
// expires on the first tick boundary after its timeout has passed, so a
// stalled session is freed between its timeout and its timeout plus one tick
// after its last message; the shortest session the server allows is
// minSessionTimeout, set to 2 × tickTime, ZooKeeper's default ratio.
const ZooKeeperTick = 100 * time.Millisecond

// zkInstall is the fix for a missing ZooKeeper.
const zkInstall = "install ZooKeeper (apt-get install zookeeper, or run ci/setup.sh), or name a server with ZOOKEEPER_ADDRS"

// zkCommand is the argv that runs the server with configuration file cfg.
func zkCommand(cfg string) ([]string, error) {
	java, err := lookPath("java")
	if err != nil {
		return nil, err
	}
	for _, f := range zkJars {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	return []string{java,
		// A small heap and the serial collector: a throwaway server on a
		// shared machine; no JIT beyond C1, which starts faster; no
		// performance data file (the JVM's /tmp/hsperfdata_<user>, which
		// a killed server would leave behind).
		"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-cp", strings.Join(zkJars, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}, nil
}

// zkConfig is the configuration every harness server shares: the short tick
// and the session floor, no admin server (it would take port 8080), the
// four-letter words the harness asks (srvr for the mode, mntr for the
// leader's synced followers, conf, ruok); no cap on connections from one
// address; and no fsync of the transaction log (forceSync=no) unless d is
// DurabilityPackaged (forceSync=yes, the default: each transaction is
// fsynced before it is acknowledged).
func zkConfig(dataDir string, clientPort int, d Durability, extra ...string) string {
	port := []string{"clientPort=" + strconv.Itoa(clientPort), "clientPortAddress=127.0.0.1"}
	if clientPort == 0 {
		port = nil // TLS only: the secure port is in extra
	}
	lines := append(append([]string{
		"tickTime=" + strconv.FormatInt(ZooKeeperTick.Milliseconds(), 10),
		"minSessionTimeout=" + strconv.FormatInt(2*ZooKeeperTick.Milliseconds(), 10),
		"maxSessionTimeout=60000",
		"initLimit=20",
		"syncLimit=5",
		"dataDir=" + dataDir,
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr,mntr,conf,ruok",
		// No cap on connections per client address (default 60): every
		// client of a test is on 127.0.0.1, and locksuite bench runs 64.
		"maxClientCnxns=0",
		"forceSync=" + map[bool]string{true: "yes", false: "no"}[d == DurabilityPackaged],
		"autopurge.purgeInterval=0",
	}, port...), extra...)
	return strings.Join(lines, "\n") + "\n"
}

// FourLetterWord sends one of ZooKeeper's four-letter commands (srvr, mntr,
// ruok, ...) to addr and returns the server's whole answer. The server must
// allow the command (4lw.commands.whitelist; the harness's servers allow
// srvr, mntr, conf and ruok).
func FourLetterWord(ctx context.Context, addr, cmd string) (string, error) {
	return fourLetterWord(ctx, addr, cmd, nil)
}

// FourLetterWordTLS is FourLetterWord over TLS with cfg (a server's
// secureClientPort), or plain when cfg is nil.
func FourLetterWordTLS(ctx context.Context, addr, cmd string, cfg *tls.Config) (string, error) {
	return fourLetterWord(ctx, addr, cmd, cfg)
}

// fourLetterWord is FourLetterWord over TLS when cfg is not nil.
func fourLetterWord(ctx context.Context, addr, cmd string, cfg *tls.Config) (string, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		d := tls.Dialer{Config: cfg}
		c, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	s := string(b)
	if strings.Contains(s, "is not executed because it is not in the whitelist") {
		return "", fmt.Errorf("%s: %s", addr, strings.TrimSpace(s))
	}
	return s, nil
}

// zkMode is the server's mode from srvr: "standalone", "leader" or
// "follower", or an error while it does not serve (it is electing, or
// loading).
func zkMode(ctx context.Context, addr string, cfg *tls.Config) (string, error) {
	s, err := fourLetterWord(ctx, addr, "srvr", cfg)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s does not serve: %s", addr, strings.TrimSpace(s))
}

// ZooKeeper is a standalone ZooKeeper server started by StartZooKeeper.
type ZooKeeper struct{ base }

func (s *ZooKeeper) Name() string { return "zookeeper" }

// Endpoint is the client port's host:port (WithTLS, the secure port's).
func (s *ZooKeeper) Endpoint() string { return s.addr }

// StartZooKeeper starts a standalone ZooKeeper server (Debian's package,
// run as described at zkJars) on a free loopback port, with its data in a
// temporary directory, tickTime 100 ms and minSessionTimeout 200 ms (see
// ZooKeeperTick), and waits until it serves (srvr reports its mode).
//
// WithAuth makes the server refuse every request of a session that has not
// authenticated with the digest scheme (enforce.auth.schemes=digest), and
// makes up a user "locksuite" with a random password (Secrets) for the
// clients. The digest scheme accepts any user and password: what it
// protects is the znodes whose ACL names that user (the adapters' ACLs), not
// the server. WithTLS replaces the plain port by a secureClientPort (the
// Netty connection factory) with a certificate of the test CA; client
// certificates are accepted, not required.
func StartZooKeeper(ctx context.Context, opts ...Option) (*ZooKeeper, error) {
	o := Apply(opts)
	fail := func(err error, fix string) error { return &Unavailable{"zookeeper", err, FixFUSE(err, fix)} }
	if err := o.CheckDurability("zookeeper"); err != nil {
		return nil, err
	}
	ports, dir, err := PortsAndDir(1, "zookeeper")
	if err != nil {
		return nil, fail(err, "free loopback ports and a writable temporary directory")
	}
	port := ports[0]
	s := &ZooKeeper{base{dir: dir, sig: syscall.SIGTERM, grace: 3 * time.Second, addr: fmt.Sprintf("127.0.0.1:%d", port)}}
	if s.data, err = newDataDir(dir, "data", o.Lazy, nil); err != nil {
		os.RemoveAll(dir)
		return nil, fail(err, "a writable temporary directory")
	}
	var extra []string
	if o.Auth {
		s.secrets.User, s.secrets.Password = "locksuite", RandomSecret()
		extra = append(extra, "enforce.auth.enabled=true", "enforce.auth.schemes=digest")
	}
	plain := port
	var probeTLS *tls.Config
	if o.TLS {
		certs, err := NewPKI(dir, -1, -1)
		if err == nil {
			err = zkKeyStore(certs, filepath.Join(dir, "server.pem"))
		}
		if err == nil {
			certs.SetSecrets(&s.secrets)
			probeTLS, err = s.secrets.ClientTLS()
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err, "a writable temporary directory")
		}
		plain = 0
		extra = append(extra, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
			"secureClientPort="+strconv.Itoa(port), "secureClientPortAddress=127.0.0.1",
			"ssl.keyStore.location="+filepath.Join(dir, "server.pem"), "ssl.keyStore.type=PEM",
			"ssl.trustStore.location="+certs.CA, "ssl.trustStore.type=PEM", "ssl.clientAuth=want")
	}
	cfg := filepath.Join(dir, "zoo.cfg")
	err = os.WriteFile(cfg, []byte(zkConfig(s.data.path, plain, o.Durability, extra...)), 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err, "a writable temporary directory")
	}
	argv, err := zkCommand(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err, zkInstall)
	}
	start := func() (*Proc, error) { return Launch(spawn.Start, "zookeeper", dir, nil, nil, argv...) }
	err = s.run(ctx, "zookeeper", 30*time.Second, start, func(ctx context.Context) error {
		m, err := zkMode(ctx, s.addr, probeTLS)
		if err == nil && m != "standalone" {
			err = fmt.Errorf("mode %q, want standalone", m)
		}
		return err
	})
	if err != nil {
		s.Stop()
		return nil, fail(err, "see the log above")
	}
	return s, nil
}

// zkKeyStore writes the server's key and certificate into one PEM file, the
// form ZooKeeper's PEM key store reads.
func zkKeyStore(certs *PKI, path string) error {
	key, err := os.ReadFile(certs.ServerKey)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(certs.ServerCert)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(key, cert...), 0o600)
}

// ZooKeeperEnsemble is a ZooKeeper ensemble of three (or n) servers, each
// its own process with its own ports and data directory, started by
// StartZooKeeperEnsemble.
type ZooKeeperEnsemble struct {
	group
}

func (s *ZooKeeperEnsemble) Name() string { return "zookeeper-ensemble" }

// Endpoint is every server's client address, comma-separated (the form of
// a ZooKeeper connect string without a chroot).
func (s *ZooKeeperEnsemble) Endpoint() string { return strings.Join(s.Addrs(), ",") }

// StartZooKeeperEnsemble starts n ZooKeeper servers (three for the failover
// scenario) on free loopback ports, configured as StartZooKeeper's server is
// (tickTime 100 ms: a follower gives up on a silent leader after syncLimit,
// 5 ticks), and waits until they have elected a leader that every server
// follows. It takes WithDurability (forceSync, as StartZooKeeper) and
// WithLazyFS.
func StartZooKeeperEnsemble(ctx context.Context, n int, opts ...Option) (*ZooKeeperEnsemble, error) {
	fail := func(err error, fix string) error { return &Unavailable{"zookeeper-ensemble", err, FixFUSE(err, fix)} }
	o, err := ClusterSettings("zookeeper-ensemble", opts)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fail(fmt.Errorf("%d servers", n), "ask for at least one (three for failover)")
	}
	ports, dir, err := PortsAndDir(3*n, "zookeeper-ensemble")
	if err != nil {
		return nil, fail(err, "free loopback ports and a writable temporary directory")
	}
	s := &ZooKeeperEnsemble{group{dir: dir, grace: 3 * time.Second}}
	s.healthy = s.Healthy
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
	}
	for i := range n {
		name, mdir, err := s.memberDir("zookeeper", i)
		if err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		data, err := s.dataDir(mdir, name, "data", o)
		if err == nil {
			err = os.WriteFile(filepath.Join(data.setup, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o600)
		}
		if err == nil {
			err = data.mount()
		}
		if err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		cfg := filepath.Join(mdir, "zoo.cfg")
		if err := os.WriteFile(cfg, []byte(zkConfig(data.path, ports[3*i], o.Durability, peers...)), 0o600); err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		argv, err := zkCommand(cfg)
		if err != nil {
			s.Stop()
			return nil, fail(err, zkInstall)
		}
		if _, err := s.add(name, mdir, ports[3*i], func() (*Proc, error) { return startMemberProc(name, mdir, nil, argv...) }); err != nil {
			s.Stop()
			return nil, fail(err, "check that "+argv[0]+" runs")
		}
	}
	if err := s.waitStarted(ctx, 60*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, fail(err, "see the error and the servers' logs above")
	}
	return s, nil
}

// status asks every running server for its mode (srvr) and returns the one
// leader, after checking that every other running server follows and that
// the leader counts each of them as a synced follower (mntr).
func (s *ZooKeeperEnsemble) status(ctx context.Context) (*Member, error) {
	ms, err := Running(s.members)
	if err != nil {
		return nil, err
	}
	var leader *Member
	for _, m := range ms {
		mode, err := zkMode(ctx, m.addr, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		switch mode {
		case "leader":
			if leader != nil {
				return nil, fmt.Errorf("%s and %s both lead", leader.name, m.name)
			}
			leader = m
		case "follower":
		default:
			return nil, fmt.Errorf("%s is in mode %q", m.name, mode)
		}
	}
	if leader == nil {
		return nil, errors.New("no running server leads")
	}
	if len(ms) > 1 {
		st, err := FourLetterWord(ctx, leader.addr, "mntr")
		if err != nil {
			return nil, fmt.Errorf("%s: mntr: %w", leader.name, err)
		}
		synced := -1
		for _, line := range strings.Split(st, "\n") {
			if v, ok := strings.CutPrefix(line, "zk_synced_followers\t"); ok {
				synced, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if synced < len(ms)-1 {
			return nil, fmt.Errorf("the leader %s has %d synced followers, want the %d running ones", leader.name, synced, len(ms)-1)
		}
	}
	return leader, nil
}

// Healthy: every running server serves, exactly one leads, the others
// follow, and the leader has every running follower in sync.
func (s *ZooKeeperEnsemble) Healthy(ctx context.Context) error {
	_, err := s.status(ctx)
	return err
}

func (s *ZooKeeperEnsemble) Leader(ctx context.Context) (*Member, error) { return s.status(ctx) }
