package local

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

func pingRedis(ctx context.Context, ep string) error {
	o := &goredis.Options{Addr: ep}
	if strings.Contains(ep, "://") {
		var err error
		if o, err = goredis.ParseURL(ep); err != nil {
			return err
		}
	}
	c := goredis.NewClient(o)
	defer c.Close()
	return c.Ping(ctx).Err()
}

// probeNodes checks that every Redis server LOCKSUITE_REDIS_NODES names
// answers.
func probeNodes(ctx context.Context, ep string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, a := range strings.Split(ep, ",") {
		if err := pingRedis(ctx, a); err != nil {
			return &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", redact.URL(a), redact.Error(err)),
				Fix: "check LOCKSUITE_REDIS_NODES (comma-separated host:port or redis:// URLs of independent servers), or unset it to let the harness start three redis-servers"}
		}
	}
	return nil
}
