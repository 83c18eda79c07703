package services

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"k8s.io/client-go/rest"
)

// Conn is how to reach one backend: its endpoint, and the credentials and
// TLS settings the environment gave for it.
type Conn struct {
	// Endpoint: host:port (redis without a URL, consul, etcd), a URL
	// (redis, etcd), a DSN (postgres; " " for the PG* variables).
	Endpoint string
	TLS      *tls.Config // redis, etcd, consul, zookeeper; nil = plain
	User     string      // etcd, zookeeper
	Password string      // etcd, zookeeper
	Token    string      // consul
	// Rest and Namespace: the Kubernetes API's client configuration and
	// the namespace of the suite's Leases (kube).
	Rest      *rest.Config
	Namespace string
	// Env is the variables (name=value) the user set for this backend, to
	// pass to worker processes.
	Env []string
	// Secrets are the values that must never be printed.
	Secrets []string
}

// Addrs splits a comma-separated endpoint.
func (c *Conn) Addrs() []string {
	var out []string
	for _, a := range strings.Split(c.Endpoint, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// HostPorts are Addrs without their http:// or https:// schemes.
func (c *Conn) HostPorts() []string {
	out := c.Addrs()
	for i, a := range out {
		out[i] = StripScheme(a)
	}
	return out
}

// HostPort is the host:port of the first server of s at ep.
func (s *Service) HostPort(ep string) string {
	if s.HostPortOf != nil {
		return s.HostPortOf(ep)
	}
	return strings.TrimSpace(ep)
}

// StripScheme is ep without http:// or https://.
func StripScheme(ep string) string {
	ep = strings.TrimSpace(ep)
	return strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
}

func HostOnly(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return hp
}

func LoadCA(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// WithServerName returns a copy of t that verifies the certificate of
// host (a client dialing a fault proxy would otherwise check the proxy's
// address), or nil for nil.
func WithServerName(t *tls.Config, host string) *tls.Config {
	if t == nil {
		return nil
	}
	t = t.Clone()
	if t.ServerName == "" {
		t.ServerName = host
	}
	return t
}
