package suite_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// delRelease is the Redis lock with the classic release bug: DEL without
// the ownership compare, so a holder whose lease expired deletes the next
// holder's lock.
type delRelease struct {
	backends.Locker
	c   *goredis.Client
	key string
}

func (d *delRelease) Acquire(ctx context.Context) (backends.Lease, error) {
	l, err := d.Locker.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &delLease{l, d}, nil
}

func (d *delRelease) Close() error { d.c.Close(); return d.Locker.Close() }

type delLease struct {
	backends.Lease
	d *delRelease
}

func (l *delLease) Release(ctx context.Context) error { return l.d.c.Del(ctx, l.d.key).Err() }

// TestMutantsAreCaught: the specs fail for locks broken on purpose, every
// time, so a "kept" means something.
func TestMutantsAreCaught(t *testing.T) {
	env, err := local.Start(context.Background(), []string{"redis"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.Unavailable["redis"]; err != nil {
		t.Fatal(err)
	}
	base := env.Config("redis", false)
	mutant := base
	mutant.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		l, err := base.NewLocker(ctx, c)
		if err != nil {
			return nil, err
		}
		return &delRelease{Locker: l, c: goredis.NewClient(&goredis.Options{Addr: c.Endpoint}), key: c.Key}, nil
	}
	const runs = 5
	for _, tc := range []struct {
		name     string
		cfg      suite.Config
		scenario string
		want     string
	}{
		{"redis adapter releases only its own lock", base, suite.ReleaseAfterExpiry, report.Kept},
		{"DEL without compare is caught", mutant, suite.ReleaseAfterExpiry, report.Broken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range runs {
				row, err := suite.Run(context.Background(), tc.cfg, tc.scenario)
				if err != nil {
					t.Fatal(err)
				}
				if row.Verdict != tc.want {
					t.Fatalf("run %d of %d: verdict %s, want %s (%s)", i+1, runs, row.Verdict, tc.want, row.Reason)
				}
			}
		})
	}
}
