package servers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is an etcd server embedded in this process by StartEtcd.
type Etcd struct {
	e    *embed.Etcd
	dir  string
	addr string
	once sync.Once
}

func (s *Etcd) Name() string     { return "etcd" }
func (s *Etcd) Endpoint() string { return s.addr }

// StartEtcd embeds a single-member etcd server (go.etcd.io/etcd/server/v3
// embed) on free loopback ports, with a 100 ms heartbeat and a 500 ms election
// timeout so that the server's lease TTL floor is 1 s (1.5 × election
// timeout, rounded up to a second) instead of the default 2 s.
func StartEtcd(ctx context.Context) (*Etcd, error) {
	fail := func(err error) error {
		return &Unavailable{"etcd", err, "free loopback ports and a writable temporary directory, or name a server with ETCDCTL_ENDPOINTS"}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, fail(err)
	}
	dir, err := os.MkdirTemp("", "locksuite-etcd-")
	if err != nil {
		return nil, fail(err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "locksuite"
	cfg.Dir = dir
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 100, 500
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{dir + "/etcd.log"}
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err)
	}
	s := &Etcd{e: e, dir: dir, addr: cu.Host}
	select {
	case <-e.Server.ReadyNotify():
		return s, nil
	case err := <-e.Err():
		s.Stop()
		return nil, fail(err)
	case <-time.After(20 * time.Second):
		s.Stop()
		return nil, fail(fmt.Errorf("not ready after 20s"))
	case <-ctx.Done():
		s.Stop()
		return nil, fail(ctx.Err())
	}
}

func (s *Etcd) Stop() error {
	s.once.Do(func() {
		s.e.Close()
		os.RemoveAll(s.dir)
	})
	return nil
}
