package services

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
)

// Symptoms is what a failed probe shows: its error, its text, and the
// connection it used.
type Symptoms struct {
	Err  error
	Msg  string
	C    *Conn
	Addr string // the server's host:port
}

// Has reports whether the error's text contains any of subs.
func (s Symptoms) Has(subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s.Msg, sub) {
			return true
		}
	}
	return false
}

// Untrusted reports a certificate the client does not trust.
func (s Symptoms) Untrusted() bool {
	return s.Has("x509:", "certificate signed by unknown authority", "certificate is not valid", "certificate is valid for")
}

// PlainToTLS reports a plain client refused by a server that wants TLS.
func (s Symptoms) PlainToTLS() bool { return s.C.TLS == nil && SpeaksTLS(s.Addr) }

// Diagnose explains why a named server of service sv could not be
// reached: the problem (authentication failed, server requires TLS,
// certificate not trusted, ...; sv.diagnose names those of its service)
// and which variable fixes it. Secrets are masked.
func Diagnose(sv *Service, c *Conn, err error) error {
	addr := sv.HostPort(c.Endpoint)
	if c.TLS != nil && !sv.StartTLS {
		// A TLS failure can hide behind a timeout (gRPC retries until its
		// deadline): shake hands once more, alone, to see it.
		var op *net.OpError
		if terr := tlsProblem(addr, c.TLS); terr != nil && !(errors.As(terr, &op) && op.Op == "dial") {
			err = fmt.Errorf("%w; TLS handshake: %v", err, terr)
		}
	}
	problem, fix := "", ""
	if sv.Diagnose != nil {
		problem, fix = sv.Diagnose(Symptoms{Err: err, Msg: err.Error(), C: c, Addr: addr})
	}
	if problem == "" {
		// A server that accepts the connection but fails the probe in no
		// way recognized above is most likely another kind of server.
		if tc, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
			tc.Close()
			problem = fmt.Sprintf("%s accepts connections but does not answer as %s (is it another kind of server?)", addr, sv.Name)
		}
	}
	if problem != "" {
		err = fmt.Errorf("%s (%w)", problem, err)
	}
	return &servers.Unavailable{Backend: sv.Name, Err: redact.Error(err, c.Secrets...), Fix: fix}
}

// tlsProblem returns the error a TLS client with configuration t meets at
// addr within two seconds (the handshake, or the alert a server sends
// after it, as TLS 1.3 servers do for a missing client certificate), or nil.
func tlsProblem(addr string, t *tls.Config) error {
	t = WithServerName(t, HostOnly(addr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: t}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// SpeaksTLS reports whether the server at addr completes a TLS handshake
// (certificates not checked) within two seconds: a plain client was
// refused because the server wants TLS.
func SpeaksTLS(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
