package servers_test

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

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// TestStartSecured starts each server WithAuth and WithTLS and checks that a
// client with the Secrets gets in, and that one without the password (or
// token) and one without TLS are refused; Consul also as a crashable
// server (with a data directory), crashed and restarted once before. etcd's
// and NATS's are in their packages' tests.
func TestStartSecured(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := []servers.Option{servers.WithAuth(), servers.WithTLS()}
	t.Run("redis", func(t *testing.T) {
		s := servercheck.MustStart(t, func() (*servers.Redis, error) { return servers.StartRedis(ctx, opts...) })
		sec := s.Secrets()
		tc := servertest.MustTLS(t, sec)
		ping := func(o *goredis.Options) error {
			o.Addr, o.MaxRetries, o.DialTimeout = s.Endpoint(), -1, 2*time.Second
			c := goredis.NewClient(o)
			defer c.Close()
			return c.Ping(ctx).Err()
		}
		servertest.Report(t, []servertest.Attempt{
			{Name: "secrets", Err: ping(&goredis.Options{Username: sec.User, Password: sec.Password, TLSConfig: tc}), Want: ""},
			{Name: "wrong password", Err: ping(&goredis.Options{Username: sec.User, Password: "nope", TLSConfig: tc}), Want: "WRONGPASS"},
			{Name: "no password", Err: ping(&goredis.Options{TLSConfig: tc}), Want: "NOAUTH"},
		})
		if err := ping(&goredis.Options{Username: sec.User, Password: sec.Password}); err == nil {
			t.Error("plain connection to the TLS port succeeded")
		}
	})
	t.Run("postgres", func(t *testing.T) {
		s := servercheck.MustStart(t, func() (*servers.Postgres, error) { return servers.StartPostgres(ctx, opts...) })
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
		servertest.Report(t, []servertest.Attempt{
			{Name: "secrets", Err: conn(s.URL()), Want: ""},
			{Name: "wrong password", Err: conn(strings.Replace(s.URL(), s.Secrets().Password, "nope", 1)), Want: "password authentication failed"},
			{Name: "no TLS", Err: conn(strings.Replace(s.URL(), "sslmode=verify-full", "sslmode=disable", 1)), Want: "no encryption"},
		})
	})
	for _, mode := range servertest.CrashModes("consul", opts) {
		t.Run(mode.Name, func(t *testing.T) {
			s := servertest.StartMode(t, ctx, mode, servers.StartConsul)
			sec := s.Secrets()
			put := func(addr, token string) error {
				c, err := consulapi.NewClient(&consulapi.Config{Address: addr, Token: token, TLSConfig: consulapi.TLSConfig{CAFile: sec.CAFile}})
				if err != nil {
					return err
				}
				_, err = c.KV().Put(&consulapi.KVPair{Key: "locksuite/probe", Value: []byte("x")}, nil)
				return err
			}
			servertest.Report(t, []servertest.Attempt{
				{Name: "secrets", Err: put(s.URL(), sec.Token), Want: ""},
				{Name: "no token", Err: put(s.URL(), ""), Want: "Permission denied"},
				{Name: "wrong token", Err: put(s.URL(), "00000000-0000-4000-8000-000000000000"), Want: "ACL not found"},
				{Name: "no TLS", Err: put("http://"+s.Endpoint(), sec.Token), Want: "HTTP request to an HTTPS server"},
			})
		})
	}
	t.Run("zookeeper", func(t *testing.T) {
		s, err := servers.StartZooKeeper(ctx, opts...)
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
		servertest.Report(t, []servertest.Attempt{
			{Name: "secrets", Err: create(tc, sec.User+":"+sec.Password), Want: ""},
			{Name: "no auth", Err: create(tc, ""), Want: "-124"},
			{Name: "no TLS", Err: create(nil, sec.User+":"+sec.Password), Want: "no session"},
		})
	})
}
