package servers

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestStartSecured starts each server WithAuth and WithTLS and checks that a
// client with the Secrets gets in, and that one without the password (or
// token) and one without TLS are refused; etcd and Consul also as
// crashable servers (a child process, a server with a data directory),
// crashed and restarted once before.
func TestStartSecured(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := []Option{WithAuth(), WithTLS()}
	// check runs op with the right credentials, then with wrong ones and
	// without TLS, and wants the error of each to contain want.
	type attempt struct {
		name string
		err  error
		want string // "" = must succeed
	}
	report := func(t *testing.T, as []attempt) {
		for _, a := range as {
			switch {
			case a.want == "" && a.err != nil:
				t.Errorf("%s: %v", a.name, a.err)
			case a.want != "" && a.err == nil:
				t.Errorf("%s: succeeded, want an error containing %q", a.name, a.want)
			case a.want != "" && !strings.Contains(a.err.Error(), a.want):
				t.Errorf("%s: error %q does not contain %q", a.name, a.err, a.want)
			}
		}
	}
	t.Run("redis", func(t *testing.T) {
		s := mustStart(t, func() (*Redis, error) { return StartRedis(ctx, opts...) })
		sec := s.Secrets()
		tc := mustTLS(t, sec)
		ping := func(o *goredis.Options) error {
			o.Addr, o.MaxRetries, o.DialTimeout = s.Endpoint(), -1, 2*time.Second
			c := goredis.NewClient(o)
			defer c.Close()
			return c.Ping(ctx).Err()
		}
		report(t, []attempt{
			{"secrets", ping(&goredis.Options{Username: sec.User, Password: sec.Password, TLSConfig: tc}), ""},
			{"wrong password", ping(&goredis.Options{Username: sec.User, Password: "nope", TLSConfig: tc}), "WRONGPASS"},
			{"no password", ping(&goredis.Options{TLSConfig: tc}), "NOAUTH"},
		})
		if err := ping(&goredis.Options{Username: sec.User, Password: sec.Password}); err == nil {
			t.Error("plain connection to the TLS port succeeded")
		}
	})
	t.Run("postgres", func(t *testing.T) {
		s := mustStart(t, func() (*Postgres, error) { return StartPostgres(ctx, opts...) })
		conn := func(dsn string) error {
			c, err := pgx.Connect(ctx, dsn)
			if err == nil {
				c.Close(ctx)
			}
			return err
		}
		if strings.Contains(s.Endpoint(), s.Secrets().Password) {
			t.Errorf("Endpoint %s carries the password", s.Endpoint())
		}
		report(t, []attempt{
			{"secrets", conn(s.URL()), ""},
			{"wrong password", conn(strings.Replace(s.URL(), s.Secrets().Password, "nope", 1)), "password authentication failed"},
			{"no TLS", conn(strings.Replace(s.URL(), "sslmode=verify-full", "sslmode=disable", 1)), "no encryption"},
		})
	})
	for _, mode := range crashModes("etcd", opts) {
		t.Run(mode.name, func(t *testing.T) {
			s := startMode(t, ctx, mode, StartEtcd)
			sec := s.Secrets()
			tc := mustTLS(t, sec)
			put := func(cfg clientv3.Config) error {
				cfg.Endpoints, cfg.DialTimeout, cfg.Logger = []string{s.Endpoint()}, 2*time.Second, zap.NewNop()
				c, err := clientv3.New(cfg)
				if err != nil {
					return err
				}
				defer c.Close()
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				_, err = c.Put(cctx, "locksuite/probe", "x")
				return err
			}
			report(t, []attempt{
				{"secrets", put(clientv3.Config{TLS: tc, Username: sec.User, Password: sec.Password}), ""},
				{"wrong password", put(clientv3.Config{TLS: tc, Username: sec.User, Password: "nope"}), "authentication failed"},
			})
			if err := put(clientv3.Config{Username: sec.User, Password: sec.Password}); err == nil {
				t.Error("plain connection to the TLS port succeeded")
			}
		})
	}
	for _, mode := range crashModes("consul", opts) {
		t.Run(mode.name, func(t *testing.T) {
			s := startMode(t, ctx, mode, StartConsul)
			sec := s.Secrets()
			put := func(addr, token string) error {
				c, err := consulapi.NewClient(&consulapi.Config{Address: addr, Token: token, TLSConfig: consulapi.TLSConfig{CAFile: sec.CAFile}})
				if err != nil {
					return err
				}
				_, err = c.KV().Put(&consulapi.KVPair{Key: "locksuite/probe", Value: []byte("x")}, nil)
				return err
			}
			report(t, []attempt{
				{"secrets", put(s.URL(), sec.Token), ""},
				{"no token", put(s.URL(), ""), "Permission denied"},
				{"wrong token", put(s.URL(), "00000000-0000-4000-8000-000000000000"), "ACL not found"},
				{"no TLS", put("http://"+s.Endpoint(), sec.Token), "HTTP request to an HTTPS server"},
			})
		})
	}
	t.Run("zookeeper", func(t *testing.T) {
		s, err := StartZooKeeper(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		sec := s.Secrets()
		tc, err := sec.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		// create opens a session (over TLS if tc), authenticates as
		// user:password if given, and creates a znode. The digest scheme
		// takes any password: the server enforces that a session
		// authenticates, the znodes' ACLs decide who may touch them.
		create := func(tc *tls.Config, auth string) error {
			dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
				d := &net.Dialer{Timeout: timeout}
				if tc == nil {
					return d.Dial(network, addr)
				}
				return tls.DialWithDialer(d, network, addr, tc)
			}
			c, _, err := zk.Connect([]string{s.Endpoint()}, time.Second, zk.WithDialer(dial), zk.WithLogger(log.New(io.Discard, "", 0)))
			if err != nil {
				return err
			}
			defer c.Close()
			for deadline := time.Now().Add(2 * time.Second); c.State() != zk.StateHasSession; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("no session in 2 s (state %v)", c.State())
				}
			}
			if auth != "" {
				if err := c.AddAuth("digest", []byte(auth)); err != nil {
					return err
				}
			}
			_, err = c.Create("/locksuite-probe", nil, zk.FlagEphemeral, zk.DigestACL(zk.PermAll, sec.User, sec.Password))
			return err
		}
		report(t, []attempt{
			{"secrets", create(tc, sec.User+":"+sec.Password), ""},
			{"no auth", create(tc, ""), "-124"},
			{"no TLS", create(nil, sec.User+":"+sec.Password), "no session"},
		})
	})
}

// crashMode is a subtest of TestStartSecured: the server started with
// opts, or crashable (WithCrash) and crashed once before the checks (the
// credentials and TLS survive the restart).
type crashMode struct {
	name  string
	opts  []Option
	crash bool
}

func crashModes(name string, opts []Option) []crashMode {
	return []crashMode{{name, opts, false}, {name + ", crashed", append(opts[:len(opts):len(opts)], WithCrash()), true}}
}

// startMode starts a server for t with start and mode's options (see
// mustStart), and crashes it once if mode says so.
func startMode[S interface {
	Server
	Crasher
}](t *testing.T, ctx context.Context, mode crashMode, start func(context.Context, ...Option) (S, error)) S {
	t.Helper()
	s := mustStart(t, func() (S, error) { return start(ctx, mode.opts...) })
	if mode.crash {
		if _, err := s.Crash(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// mustStart starts a server for t with start; it stops when t ends.
func mustStart[S Server](t *testing.T, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// mustTLS is a client TLS configuration that trusts sec's CA.
func mustTLS(t *testing.T, sec Secrets) *tls.Config {
	t.Helper()
	tc, err := sec.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
