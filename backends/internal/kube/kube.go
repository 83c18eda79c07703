// Package kube is what the two Kubernetes Lease adapters (k8slease,
// leaderelection) share: a client of their own for the coordination.k8s.io
// API, the defaults and checks of their configuration, the lease a Locker
// holds (for its Close), and the Lease's removal.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/dialer"
)

// Client is one Locker's connection to the API server.
type Client struct {
	// Leases are the Lease objects of the Locker's namespace.
	Leases coordinationv1client.LeaseInterface
	// Coordination is the API group's client (client-go's LeaseLock takes it).
	Coordination *coordinationv1client.CoordinationV1Client
	hc           *http.Client
	prefix       string // the adapter's name, which prefixes errors
}

// NewClient makes a client of the coordination.k8s.io/v1 API from a copy of
// rc, dialling through dial (a TCP dialer if nil), for namespace ns.
//
// The client has a transport of its own: client-go shares one transport,
// and so its connections, between clients of equal configurations unless
// the configuration has a Dial, and one Locker is one process. Its requests
// are not rate-limited: client-go's default limit (5 requests a second,
// bursts of 10) is sized for a 15 s lease, and a lease scaled down to 1 s
// makes 15 times as many requests.
func NewClient(prefix string, rc *rest.Config, dial dialer.Func, ns string) (*Client, error) {
	if rc == nil {
		return nil, fmt.Errorf("%s: Config.Rest is nil: pass the API server's rest.Config (harness/services/kube's API.RestConfig, or clientcmd's from a kubeconfig)", prefix)
	}
	rc = rest.CopyConfig(rc)
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	rc.Dial = dial
	if rc.RateLimiter == nil {
		rc.QPS, rc.Burst = -1, 0
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: client for %s: %w", prefix, rc.Host, err)
	}
	c, err := coordinationv1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("%s: client for %s: %w", prefix, rc.Host, err)
	}
	return &Client{Leases: c.Leases(ns), Coordination: c, hc: hc, prefix: prefix}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Check gives a zero *ttl client-go's default LeaseDuration, 15 s, and
// checks the namespace, the Lease's name and *ttl:
// Lease.spec.leaseDurationSeconds is a whole number of seconds, at least 1.
// It then gives a zero *retry client-go's default proportion, *ttl × 2/15
// (2 s of 15 s), and an empty *identity "locksuite-" and 12 random hex
// digits (Identity).
func Check(prefix, ns, name string, ttl, retry *time.Duration, identity *string) error {
	if *ttl == 0 {
		*ttl = 15 * time.Second
	}
	if err := check(prefix, ns, name, *ttl); err != nil {
		return err
	}
	if *retry == 0 {
		*retry = *ttl * 2 / 15
	}
	if *identity == "" {
		*identity = Identity("locksuite-")
	}
	return nil
}

func check(prefix, ns, name string, ttl time.Duration) error {
	if ns == "" {
		return fmt.Errorf("%s: Config.Namespace is empty: name the namespace of the Lease", prefix)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("%s: namespace %q: %v", prefix, ns, errs)
	}
	if name == "" {
		return fmt.Errorf("%s: Config.Name is empty: name the Lease object", prefix)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s: Lease name %q: %v", prefix, name, errs)
	}
	if ttl < time.Second || ttl%time.Second != 0 {
		return fmt.Errorf("%s: TTL %v: a Lease's duration is a whole number of seconds (leaseDurationSeconds), at least 1s", prefix, ttl)
	}
	return nil
}

// Identity returns prefix followed by 12 random hex digits: a holder
// identity no other client has.
func Identity(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Holding is what a Locker keeps for its Close: whether it is closed, and
// the lease it granted and has not released. The zero Holding is ready to
// use.
type Holding struct {
	closed atomic.Bool
	mu     sync.Mutex
	held   backends.Lease
}

// Closed reports whether Close was called.
func (h *Holding) Closed() bool { return h.closed.Load() }

// Hold records l as the lease held.
func (h *Holding) Hold(l backends.Lease) {
	h.mu.Lock()
	h.held = l
	h.mu.Unlock()
}

// Released forgets l if it is the lease held.
func (h *Holding) Released(l backends.Lease) {
	h.mu.Lock()
	if h.held == l {
		h.held = nil
	}
	h.mu.Unlock()
}

// Close marks the Locker closed and, the first time it is called, calls
// release with the lease held (if one is) and then closes c; later calls do
// nothing. It is the Locker's Close.
func (h *Holding) Close(c *Client, release func(backends.Lease)) {
	if h.closed.Swap(true) {
		return
	}
	h.mu.Lock()
	l := h.held
	h.mu.Unlock()
	if l != nil {
		release(l)
	}
	c.Close()
}

// Delete deletes the Lease name; a Lease already gone is no error.
func (c *Client) Delete(ctx context.Context, name string) error {
	err := c.Leases.Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: delete Lease %s: %w", c.prefix, name, err)
	}
	return nil
}

// Fatal reports whether err is one that asking again will not mend: the
// request is refused (authentication, authorization, validation) or the
// namespace does not exist.
func Fatal(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotFound(err) && st.Status().Details != nil && st.Status().Details.Kind == "namespaces"
}
