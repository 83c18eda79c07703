package servers

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATS starts the embedded server (timed), writes a JetStream KV key
// through it, stops it, and checks that its store is gone. WithAuth and
// WithTLS: the user's password over TLS gets in, a wrong password and a
// plain connection do not; also with the server a child process
// (WithCrash), crashed and restarted once before.
func TestNATS(t *testing.T) {
	crashed := struct {
		name string
		opts []Option
	}{"auth+tls, crashed", []Option{WithAuth(), WithTLS(), WithCrash()}}
	for _, tc := range append(secureVariants, crashed) {
		t.Run(tc.name, func(t *testing.T) {
			s := timedStart(t, func(ctx context.Context) (*NATS, error) { return StartNATS(ctx, tc.opts...) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer s.Stop()
			if tc.name == crashed.name {
				if _, err := s.Crash(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
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
			stopGone(t, s, s.dir)
		})
	}
}
