package zksession

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/internal/wait"
)

// Call runs req, one or more go-zookeeper requests, and returns its result,
// or ctx's error as soon as ctx is done, whatever go-zookeeper is doing.
// go-zookeeper's requests take no context: one waits in the client's queue
// while the client reconnects, and its answer may take as long as the
// server's. An abandoned request is not withdrawn: it runs on in its own
// goroutine, may still reach the server and take effect, and ends when
// go-zookeeper answers it or the session's connection is closed (Close).
// A request that changes anything must be one whose late effect is
// harmless or cleaned up (see Protected).
func Call[T any](ctx context.Context, req func() (T, error)) (T, error) {
	r, err, _ := call(ctx, req)
	return r, err
}

// Do is Call for a request that returns only an error.
func Do(ctx context.Context, req func() error) error {
	_, err := Call(ctx, func() (struct{}, error) { return struct{}{}, req() })
	return err
}

// result is a request's answer.
type result[T any] struct {
	v   T
	err error
}

// call is Call; when it returns ctx's error, late is closed once the
// abandoned request has its answer (it is nil otherwise).
func call[T any](ctx context.Context, req func() (T, error)) (T, error, <-chan struct{}) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err, nil
	}
	ch := make(chan result[T], 1)
	late := make(chan struct{})
	go func() {
		v, err := req()
		ch <- result[T]{v, err}
		close(late)
	}()
	select {
	case r := <-ch:
		return r.v, r.err, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err(), late
	}
}

// Protected is one client's protected ephemeral sequential znode, the
// recipe's guard against a create whose answer was lost: its name is
// "_c_" + a random GUID + "-" + a prefix, so the client finds it among the
// lock's children (Find) whatever became of the create's answer, and no
// other client or later Acquire takes it for its own.
type Protected struct {
	s    *Session
	dir  string // the lock's znode
	name string // "_c_<guid>-" + prefix
	acl  []zk.ACL

	late []<-chan struct{} // abandoned creates, still unanswered
	made bool              // a create may have made the znode
}

// NewProtected is a znode for s under dir, named prefix after a new GUID;
// nothing is created yet.
func (s *Session) NewProtected(dir, prefix string, acl []zk.ACL) (*Protected, error) {
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return nil, err
	}
	return &Protected{s: s, dir: dir, name: "_c_" + hex.EncodeToString(guid[:]) + "-" + prefix, acl: acl}, nil
}

// Create creates the znode, ephemeral and sequential, and returns its path.
// After an error the znode may or may not exist: Find tells.
func (p *Protected) Create(ctx context.Context) (string, error) {
	p.made = true
	path, err, late := call(ctx, func() (string, error) {
		return p.s.Conn.Create(p.dir+"/"+p.name, nil, zk.FlagEphemeral|zk.FlagSequence, p.acl)
	})
	if late != nil {
		p.late = append(p.late, late)
	}
	return path, err
}

// Find returns the path of the znode among children (the names under the
// lock's znode), or "" if none of them is it.
func (p *Protected) Find(children []string) string {
	for _, c := range children {
		if strings.HasPrefix(c, p.name) {
			return p.dir + "/" + c
		}
	}
	return ""
}

// Remove deletes the znode if a create may have made it, in the
// background: it waits for the answers of abandoned creates, then deletes
// every child of the lock's znode that has the znode's name. It tries
// again while requests fail with the connection or the session, until it
// succeeds or the session's client is closed (Close: the server deletes
// the session's ephemeral znodes itself). Until then the znode keeps its
// place in the lock's queue: while it is first the lock goes to no one,
// and then to the next client.
func (p *Protected) Remove() {
	if !p.made {
		return
	}
	late := p.late
	go func() {
		for _, l := range late {
			<-l
		}
		for {
			err := p.removeOnce()
			if err == nil || !Retryable(err) {
				return
			}
			_ = wait.For(context.Background(), 10*time.Millisecond)
		}
	}()
}

func (p *Protected) removeOnce() error {
	kids, _, err := p.s.Conn.Children(p.dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range kids {
		if !strings.HasPrefix(c, p.name) {
			continue
		}
		if err := p.s.Conn.Delete(p.dir+"/"+c, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return nil
}
