package local

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
)

// redisNodes is n independent redis-servers, for Redlock.
type redisNodes []*servers.Redis

func (r redisNodes) Name() string { return "redis-3" }

// Endpoint is the servers' host:port, comma-separated.
func (r redisNodes) Endpoint() string {
	eps := make([]string, len(r))
	for i, s := range r {
		eps[i] = s.Endpoint()
	}
	return strings.Join(eps, ",")
}

func (r redisNodes) Stop() error {
	for _, s := range r {
		_ = s.Stop()
	}
	return nil
}

func startRedisNodes(ctx context.Context, n int) (servers.Server, error) {
	var out redisNodes
	for range n {
		s, err := servers.StartRedis(ctx)
		if err != nil {
			out.Stop()
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// probeNodes checks that every Redis server LOCKSUITE_REDIS_NODES names
// answers, with its URL's credentials, and over TLS (with
// LOCKSUITE_REDIS_CACERT's CA, if set) for a rediss:// URL.
func probeNodes(ctx context.Context, c *conn) error {
	const fix = "check LOCKSUITE_REDIS_NODES (comma-separated host:port or redis:// URLs of independent servers), or unset it to let the harness start three redis-servers"
	if len(c.addrs()) == 0 {
		return &servers.Unavailable{Backend: "redis-3", Err: errors.New("no server in LOCKSUITE_REDIS_NODES"), Fix: fix}
	}
	for _, a := range c.addrs() {
		nc := &conn{endpoint: a}
		if strings.HasPrefix(a, "rediss://") {
			nc.tls = withServerName(c.tls, hostOnly(urlHost(a)))
		}
		if err := probeRedis(ctx, nc); err != nil {
			// The problem as REDIS_URL's would be named; the fix is this
			// variable's.
			if problem, _ := diagnoseRedis(symptoms{err: err, msg: err.Error(), c: nc, addr: urlHost(a)}); problem != "" {
				err = fmt.Errorf("%s (%w)", problem, err)
			}
			return &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", redact.URL(a), redact.Error(err, c.secrets...)),
				Fix: fix + "; credentials and TLS as in REDIS_URL (rediss://user:password@host:port/0, and " + RedisCACertEnv + " for a private CA)"}
		}
	}
	return nil
}
