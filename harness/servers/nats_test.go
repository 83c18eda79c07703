package servers

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATS starts the embedded server (timed), writes a JetStream KV key
// through it, stops it, and checks that its store is gone. WithAuth and
// WithTLS: the user's password over TLS gets in, a wrong password and a
// plain connection do not.
func TestNATS(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"plain", nil}, {"auth+tls", []Option{WithAuth(), WithTLS()}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t0 := time.Now()
			s, err := StartNATS(ctx, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s ready at %s in %v", s.Name(), s.Endpoint(), time.Since(t0).Round(time.Millisecond))
			defer s.Stop()
			var nopts []nats.Option
			if tc.opts != nil {
				tlsc, err := s.Secrets().ClientTLS()
				if err != nil {
					t.Fatal(err)
				}
				nopts = append(nopts, nats.Secure(tlsc))
				if _, err := nats.Connect(s.Endpoint(), append(nopts, nats.UserInfo(s.Secrets().User, "nope"))...); err == nil {
					t.Error("wrong password: connected")
				}
				if _, err := nats.Connect(s.URL()); err == nil {
					t.Error("plain connection accepted WithTLS")
				}
			}
			nc, err := nats.Connect(s.URL(), nopts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "check"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
				t.Fatalf("get: %v %v", e, err)
			}
			nc.Close()
			s.Stop()
			if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
				t.Errorf("directory %s still exists after Stop (%v)", s.dir, err)
			}
		})
	}
}
