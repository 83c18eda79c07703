package adapt

import (
	"context"
	"sync"
)

// Session is the one session (a connection, an etcd session) that a Locker
// keeps for its attempts: Get opens it when first needed and again once it
// has ended, Drop forgets one that an attempt found broken, and Take hands
// it to Close. Set Open and Ended before the first Get.
type Session[S comparable] struct {
	// Open opens a new session. Get calls it with the Session locked, so
	// one attempt opens it while the others wait.
	Open func(context.Context) (S, error)
	// Ended tells whether a kept session has ended.
	Ended func(S) bool
	// Forget, if not nil, frees what this process keeps for a session that
	// Get or Drop lets go (an etcd session's keep-alive: Orphan).
	Forget func(S)

	mu sync.Mutex
	s  S
}

// Get returns the kept session, opening a new one if there is none or it
// has ended.
func (k *Session[S]) Get(ctx context.Context) (S, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var none S
	if k.s != none {
		if !k.Ended(k.s) {
			return k.s, nil
		}
		k.forget(k.s)
		k.s = none
	}
	s, err := k.Open(ctx)
	if err != nil {
		return none, err
	}
	k.s = s
	return s, nil
}

// Drop forgets s, if it is the kept session, so that the next Get opens a
// new one.
func (k *Session[S]) Drop(s S) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.s == s {
		k.forget(s)
		var none S
		k.s = none
	}
}

// Take returns the kept session (the zero S if none) and keeps none.
func (k *Session[S]) Take() S {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.s
	var none S
	k.s = none
	return s
}

func (k *Session[S]) forget(s S) {
	if k.Forget != nil {
		k.Forget(s)
	}
}
