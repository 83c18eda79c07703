package adapt

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		key   string
		lease time.Duration
		want  time.Duration // the lease after Check
		err   string        // in the error; "" for none
	}{
		{"default", "k", 0, time.Second, ""},
		{"kept", "k", 3 * time.Millisecond, 3 * time.Millisecond, ""},
		{"no key", "", time.Second, time.Second, "Config.Key is empty: name the lock key"},
		{"negative", "k", -time.Second, -time.Second, "lease -1s is negative"},
		{"below min", "k", time.Microsecond, time.Microsecond, "below the 1ms resolution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.lease
			err := Check("x", tc.key, "the lock key", &d, time.Second, time.Millisecond, "the 1ms resolution")
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if d != tc.want {
				t.Errorf("lease %v, want %v", d, tc.want)
			}
		})
	}
}

type grant struct{}

func (grant) Fence() uint64                 { return 1 }
func (grant) Release(context.Context) error { return nil }

// TestPoll: Poll tries until try grants, and stops at ctx's end and at
// Close (ErrClosed), without another try.
func TestPoll(t *testing.T) {
	var closed atomic.Bool
	tries := 0
	g, err := Poll(context.Background(), &closed, time.Millisecond, func(context.Context) (backends.Lease, error) {
		if tries++; tries < 3 {
			return nil, nil
		}
		return grant{}, nil
	})
	if err != nil || g == nil || tries != 3 {
		t.Errorf("granted %v, %v after %d tries; want a lease after 3", g, err, tries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := Poll(ctx, &closed, time.Millisecond, func(context.Context) (backends.Lease, error) { return nil, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("taken until ctx ends: %v, want context.DeadlineExceeded", err)
	}
	closed.Store(true)
	if _, err := Poll(context.Background(), &closed, time.Millisecond, func(context.Context) (backends.Lease, error) {
		t.Error("tried after Close")
		return nil, nil
	}); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("after Close: %v, want backends.ErrClosed", err)
	}
}

// TestRetry: a retryable error starts over; another one is returned at once.
func TestRetry(t *testing.T) {
	again, fatal := errors.New("again"), errors.New("fatal")
	tries := 0
	_, err := Retry(context.Background(), func(context.Context) (backends.Lease, error) {
		if tries++; tries < 3 {
			return nil, again
		}
		return nil, fatal
	}, func(err error) bool { return err == again })
	if err != fatal || tries != 3 {
		t.Errorf("%v after %d tries, want fatal after 3", err, tries)
	}
}

// TestLost: Mark closes the channel once, however often it is called, and
// Renew marks it when renew reports the lease gone.
func TestLost(t *testing.T) {
	var l Lost
	select {
	case <-l.C():
		t.Fatal("lost before Mark")
	default:
	}
	l.Mark()
	l.Mark()
	<-l.C()
	var r Lost
	n := 0
	Renew(context.Background(), time.Millisecond, &r, func(context.Context) bool { n++; return n < 3 })
	select {
	case <-r.C():
	default:
		t.Errorf("Renew returned after %d renewals without marking the lease lost", n)
	}
}

func TestSession(t *testing.T) {
	type conn struct{ ended bool }
	var opened, forgot int
	k := Session[*conn]{
		Open:   func(context.Context) (*conn, error) { opened++; return &conn{}, nil },
		Ended:  func(c *conn) bool { return c.ended },
		Forget: func(*conn) { forgot++ },
	}
	a, _ := k.Get(context.Background())
	if b, _ := k.Get(context.Background()); b != a || opened != 1 {
		t.Fatalf("a live session was not kept: opened %d", opened)
	}
	a.ended = true
	b, _ := k.Get(context.Background())
	if b == a || opened != 2 || forgot != 1 {
		t.Fatalf("an ended session: same %v, opened %d, forgot %d", b == a, opened, forgot)
	}
	k.Drop(a) // not the kept one: nothing
	if forgot != 1 {
		t.Fatalf("Drop of a session not kept forgot it")
	}
	k.Drop(b)
	if c, _ := k.Get(context.Background()); c == b || opened != 3 || forgot != 2 {
		t.Fatalf("after Drop: same %v, opened %d, forgot %d", c == b, opened, forgot)
	}
	if c := k.Take(); c == nil || k.Take() != nil {
		t.Fatal("Take did not hand over the kept session, or kept it")
	}
	k.Open = func(context.Context) (*conn, error) { return nil, errors.New("refused") }
	if c, err := k.Get(context.Background()); c != nil || err == nil {
		t.Fatalf("a failed Open: %v, %v", c, err)
	}
}
