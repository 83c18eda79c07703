package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Option changes how a Start function starts its server. Without options a
// server takes plain connections with no authentication.
type Option func(*Settings)

// Settings are what a Start function's options ask for (Apply): a
// service package's Start function reads them.
type Settings struct {
	Auth, TLS   bool // WithAuth, WithTLS
	fakeClock   bool // Postgres only: run under libfaketime (a test's measurement)
	Durability  Durability
	Crash, Lazy bool // WithCrash, WithLazyFS (which sets Crash too)
}

// WithAuth makes the server require authentication, with credentials made
// up at random for this server (see Secrets): a Redis ACL user (the default
// user is off), a Postgres role with a SCRAM password (pg_hba: scram-sha-256
// only), etcd's root user with auth enabled, Consul's ACLs with default
// policy deny and an initial management token, ZooKeeper's enforced digest
// authentication with a user "locksuite".
func WithAuth() Option { return func(o *Settings) { o.Auth = true } }

// WithTLS makes the server take TLS connections only, with a certificate for
// 127.0.0.1 and localhost signed by a test CA generated for this server in
// its temporary directory (see Secrets): Redis on its tls-port only,
// Postgres with ssl = on and hostssl lines only, etcd on an https client URL
// (client certificates accepted, not required), Consul on its HTTPS port
// only, ZooKeeper on a secureClientPort only.
func WithTLS() Option { return func(o *Settings) { o.TLS = true } }

// Apply returns the Settings that opts ask for, applied in order; with no
// options, the zero Settings (plain, unauthenticated, DurabilityHarness,
// not crashable).
func Apply(opts []Option) Settings {
	var o Settings
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Secrets are what a client needs to reach a server started WithAuth or
// WithTLS. The files are in the server's temporary directory and go with it
// on Stop.
type Secrets struct {
	// User and Password: the Redis ACL user, the Postgres role, the etcd
	// user ("root"), the ZooKeeper digest user. Empty without WithAuth
	// (Consul has none).
	User, Password string
	// Token is Consul's initial management token. Empty otherwise.
	Token string
	// CAFile is the test CA's certificate (PEM); empty without WithTLS.
	CAFile string
	// CertFile and KeyFile are a client certificate (CN "locksuite-client")
	// and its private key, signed by the CA.
	CertFile, KeyFile string
	_                 struct{}
}

// ClientTLS returns a TLS configuration that trusts s.CAFile and presents
// the client certificate, or nil if s has no CA.
func (s Secrets) ClientTLS() (*tls.Config, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", s.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if s.CertFile != "" {
		c, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// RandomSecret is 24 random hex digits: letters and digits only, so that it
// reads the same in a URL, JSON or a shell.
func RandomSecret() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RandomUUID is a random version-4 UUID (Consul tokens are UUIDs).
func RandomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// PKI is the test CA's output in a server's directory (NewPKI): the paths
// of the CA's certificate, the server's certificate and key, and a client
// certificate and key, all PEM.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// NewPKI writes a test CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate into dir (keys mode 0600). uid and
// gid, if not -1, own the files (Postgres reads its key as its own user
// and refuses a key that others can read).
func NewPKI(dir string, uid, gid int) (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "locksuite test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	if err := WritePEM(p.CA, "CERTIFICATE", caDER, 0o644, uid, gid); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(7 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			t.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			t.DNSNames = []string{"localhost"}
			// etcd's server also dials itself as a client with this pair.
			t.ExtKeyUsage = append(t.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		der, err := x509.CreateCertificate(rand.Reader, t, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := WritePEM(certPath, "CERTIFICATE", der, 0o644, uid, gid); err != nil {
			return err
		}
		return WritePEM(keyPath, "PRIVATE KEY", kb, 0o600, uid, gid)
	}
	if err := leaf(2, "locksuite-server", x509.ExtKeyUsageServerAuth, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	if err := leaf(3, "locksuite-client", x509.ExtKeyUsageClientAuth, p.ClientCert, p.ClientKey); err != nil {
		return nil, err
	}
	return p, nil
}

// WritePEM writes der as one PEM block of type typ ("CERTIFICATE",
// "PRIVATE KEY", ...) to the file path with mode, owned by uid and gid
// unless uid is -1; its error is the write's or the chown's.
func WritePEM(path, typ string, der []byte, mode os.FileMode, uid, gid int) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return err
	}
	if uid >= 0 {
		return os.Chown(path, uid, gid)
	}
	return nil
}

// SetSecrets sets s's CAFile, CertFile and KeyFile to p's CA and client
// certificate and key; a nil p (no TLS) leaves s as it is.
func (p *PKI) SetSecrets(s *Secrets) {
	if p == nil {
		return
	}
	s.CAFile, s.CertFile, s.KeyFile = p.CA, p.ClientCert, p.ClientKey
}
