package redis

import (
	"crypto/tls"
	"strings"
	"testing"
)

// TestConfigCredentialsAndTLS: a rediss:// URL's user, password and TLS
// survive the Addr override (the fault proxy), with the URL's host still
// the name TLS verifies; the explicit fields win; a bad URL's error does not
// print its password.
func TestConfigCredentialsAndTLS(t *testing.T) {
	l, err := New(Config{URL: "rediss://app:s3cret@redis.example:6380/0", Addr: "127.0.0.1:7000", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	o := l.(*locker).c.Options()
	if o.Addr != "127.0.0.1:7000" || o.Username != "app" || o.Password != "s3cret" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" {
		t.Errorf("options addr %s user %q password %q TLS %v: want Addr, the URL's credentials and TLS for redis.example", o.Addr, o.Username, o.Password, o.TLSConfig)
	}
	l, err = New(Config{Addr: "127.0.0.1:7000", Username: "u2", Password: "p2", TLS: &tls.Config{MinVersion: tls.VersionTLS13}, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	o = l.(*locker).c.Options()
	if o.Username != "u2" || o.Password != "p2" || o.TLSConfig == nil || o.TLSConfig.ServerName != "127.0.0.1" || o.TLSConfig.MinVersion != tls.VersionTLS13 {
		t.Errorf("options user %q password %q TLS %+v: want the fields, TLS for Addr's host", o.Username, o.Password, o.TLSConfig)
	}
	_, err = New(Config{URL: "redis://app:s3cret@redis.example:63%zz/0", Key: "k"})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad URL: error %v: want one without the password", err)
	}
}

// TestConfigSentinel: SentinelAddrs needs MasterName, and a URL's
// credentials and database carry over to the failover client.
func TestConfigSentinel(t *testing.T) {
	_, err := New(Config{SentinelAddrs: []string{"127.0.0.1:26379"}, Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "MasterName") {
		t.Errorf("SentinelAddrs without MasterName: error %v, want one naming MasterName", err)
	}
	l, err := New(Config{SentinelAddrs: []string{"127.0.0.1:26379"}, MasterName: "m", URL: "redis://app:s3cret@ignored:6379/3", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	o := l.(*locker).c.Options()
	if o.Username != "app" || o.Password != "s3cret" || o.DB != 3 {
		t.Errorf("failover client user %q password %q db %d: want the URL's", o.Username, o.Password, o.DB)
	}
}
