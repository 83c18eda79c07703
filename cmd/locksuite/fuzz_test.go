package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// FuzzParseRun: any argument list is either accepted, giving options the
// run can use, or refused with a usage error (exit status 2) or help; it
// never panics. Arguments are the input split on spaces.
func FuzzParseRun(f *testing.F) {
	for _, s := range []string{
		"", "--backends etcd", "--backends redis,hazelcast", "--scenarios all --fencing off,on",
		"--lease 200ms --pause 1.5s --pauses 3", "--lease -1s", "--duration 0s", "--repeat 0",
		"--workers 1", "--seed 18446744073709551615", "--seed -1", "--lease 9223372036854775807ns",
		"--interval 1h --stall-every 2", "--store sqlite", "extra", "--json", "-h", "--chaos-duration 1e9",
		"--backends ,,, --scenarios baseline,baseline", "--lease 1µs", "--pause 5m0.5s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Fields(in)
		o, err := parseRun(args, io.Discard)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("%q: error %v is neither a usage error nor help", args, err)
			}
			if ue != nil && ue.msg == "" {
				t.Fatalf("%q: empty usage error", args)
			}
			return
		}
		switch {
		case len(o.backends) == 0 || len(o.scenarios) == 0 || len(o.fencing) == 0:
			t.Fatalf("%q accepted with nothing to run: %+v", args, o)
		case o.repeat < 1 || o.clients < 2 || o.duration <= 0:
			t.Fatalf("%q accepted with repeat %d, clients %d, duration %v", args, o.repeat, o.clients, o.duration)
		case o.lease < 0 || o.pause < 0 || o.interval < 0 || o.longLease < 0 || o.chaosDuration < 0:
			t.Fatalf("%q accepted a negative duration: %+v", args, o)
		case o.workers < 0 || o.workers == 1 || o.pauses < 0 || o.stallEvery < 0:
			t.Fatalf("%q accepted workers %d, pauses %d, stall-every %d", args, o.workers, o.pauses, o.stallEvery)
		}
	})
}

// FuzzParseDurations: the sweep's duration lists are sorted positive
// durations, or a usage error naming the flag.
func FuzzParseDurations(f *testing.F) {
	for _, s := range []string{"200ms,1s,2s", "300ms,800ms,1.5s", "", ",", "0s", "-1s", "soon", "1h,1ns", " 5s , 1s ", "9223372036854775807ns", "1e3s", "2562047h47m16.854775808s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ds, err := parseDurations("leases", in)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(ue.msg, "--leases") {
				t.Fatalf("%q: error %v does not name the flag", in, err)
			}
			return
		}
		if len(ds) == 0 {
			t.Fatalf("%q: accepted, empty", in)
		}
		for i, d := range ds {
			if d <= 0 || (i > 0 && d < ds[i-1]) {
				t.Fatalf("%q: %v is not a sorted list of positive durations", in, ds)
			}
		}
	})
}
