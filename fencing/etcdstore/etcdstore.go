// Package etcdstore is a fencing.Store in etcd: two keys per counter.
package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/locksuite/locksuite/fencing"
)

// Store is a counter in etcd: the value at Prefix+"/value" and the last
// fence seen at Prefix+"/fence", the fence zero-padded to 20 digits so that
// etcd's byte-wise comparison orders it numerically. A fenced read or write
// is one transaction: if the fence key is newer than the token, refuse; else
// record the token (and, for a write, the value).
type Store struct {
	c        *clientv3.Client
	value    string
	fence    string
	prefix   string
	fenced   bool
	rejected atomic.Uint64
}

var _ fencing.Store = (*Store)(nil)

// New returns the Store of the counter under prefix, creating it at 0 with
// fence 0 if it does not exist yet.
func New(ctx context.Context, c *clientv3.Client, prefix string, fenced bool) (*Store, error) {
	s := &Store{c: c, value: prefix + "/value", fence: prefix + "/fence", prefix: prefix, fenced: fenced}
	_, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.value), "=", 0), clientv3.Compare(clientv3.CreateRevision(s.fence), "=", 0)).
		Then(clientv3.OpPut(s.value, "0"), clientv3.OpPut(s.fence, pad(0))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: create counter %q: %w", prefix, err)
	}
	return s, nil
}

func pad(f uint64) string { return fmt.Sprintf("%020d", f) }

func (s *Store) Fenced() bool     { return s.fenced }
func (s *Store) Rejected() uint64 { return s.rejected.Load() }

// newer is the condition under which a fenced operation with fence is stale.
func (s *Store) newer(fence uint64) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(s.fence), ">", pad(fence))
}

func (s *Store) Read(ctx context.Context, fence uint64) (int64, error) {
	var kvs []*mvccpb.KeyValue
	if s.fenced {
		resp, err := s.c.Txn(ctx).If(s.newer(fence)).
			Else(clientv3.OpPut(s.fence, pad(fence)), clientv3.OpGet(s.value)).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcdstore: read counter %q: %w", s.prefix, err)
		}
		if resp.Succeeded {
			s.rejected.Add(1)
			return 0, fmt.Errorf("%w (read with fence %d)", fencing.ErrStale, fence)
		}
		kvs = resp.Responses[1].GetResponseRange().Kvs
	} else {
		return s.Value(ctx)
	}
	if len(kvs) == 0 {
		return 0, fmt.Errorf("etcdstore: counter %q is gone", s.prefix)
	}
	return strconv.ParseInt(string(kvs[0].Value), 10, 64)
}

func (s *Store) Value(ctx context.Context) (int64, error) {
	resp, err := s.c.Get(ctx, s.value)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: read counter %q: %w", s.prefix, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("etcdstore: counter %q is gone", s.prefix)
	}
	return strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
}

func (s *Store) Write(ctx context.Context, value int64, fence uint64) error {
	puts := []clientv3.Op{clientv3.OpPut(s.value, strconv.FormatInt(value, 10)), clientv3.OpPut(s.fence, pad(fence))}
	if !s.fenced {
		if _, err := s.c.Txn(ctx).Then(puts...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: write counter %q: %w", s.prefix, err)
		}
		return nil
	}
	resp, err := s.c.Txn(ctx).If(s.newer(fence)).Else(puts...).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: write counter %q: %w", s.prefix, err)
	}
	if resp.Succeeded {
		s.rejected.Add(1)
		return fmt.Errorf("%w (write with fence %d)", fencing.ErrStale, fence)
	}
	return nil
}

// Close deletes the counter's two keys.
func (s *Store) Close(ctx context.Context) error {
	_, err := s.c.Txn(ctx).Then(clientv3.OpDelete(s.value), clientv3.OpDelete(s.fence)).Commit()
	return err
}
