package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/harness/bench"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/etcd"
)

// TestBench runs locksuite bench end to end on an embedded etcd, with tiny
// durations: every point and takeover is measured, the tables, the JSON,
// the Markdown and the HTML say so, and nothing is left on the server.
func TestBench(t *testing.T) {
	ctx := servertest.Slow(t, "starts embedded etcd", 3*time.Minute)
	et := servertest.Start(t, ctx, etcd.Start)
	t.Setenv("ETCDCTL_ENDPOINTS", et.Endpoint())
	dir := t.TempDir()
	jsonPath, mdPath, htmlPath := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.md"), filepath.Join(dir, "b.html")
	var out, errb bytes.Buffer
	code := cli([]string{"bench", "--backends", "etcd", "--duration", "200ms", "--rounds", "1", "--clients", "1,3",
		"--json", jsonPath, "--markdown", mdPath, "--html", htmlPath}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || !rep.Results[0].Ceiling || rep.Results[1].Backend != "etcd" {
		t.Fatalf("results %+v: want the in-process ceiling, then etcd", rep.Results)
	}
	if rep.Machine.Cores == 0 || rep.Rounds != 1 || rep.Status != "" {
		t.Errorf("machine %+v, rounds %d, status %q", rep.Machine, rep.Rounds, rep.Status)
	}
	for _, res := range rep.Results {
		if res.Error != "" || len(res.Points) != 6 {
			t.Fatalf("%s: %d points, error %q: want 6 (empty, write off, write on × 1, 3 clients)", res.Backend, len(res.Points), res.Error)
		}
		for _, p := range res.Points {
			if p.Error != "" || p.Skipped != "" || p.Rounds != 1 || p.Grants == 0 {
				t.Errorf("%s: point %+v did not measure", res.Backend, p)
			}
		}
	}
	etcd := rep.Results[1]
	if etcd.LeaseMS != 1000 || etcd.ExpiryMS != 1500 || !etcd.Fence {
		t.Errorf("etcd: lease %v, expiry %v, fence %v; want 1000, 1500, true", etcd.LeaseMS, etcd.ExpiryMS, etcd.Fence)
	}
	for _, f := range []bench.Fault{bench.Killed, bench.Frozen} {
		if tk, ok := etcd.Takeover(f); !ok || tk.Rounds != 1 || tk.TimeMS.Min <= 0 {
			t.Errorf("etcd: takeover from a %s holder %+v: want one round timed", f, tk)
		}
	}
	if p, _ := etcd.Point(3, bench.Empty, false); p.RepliesPerGrant.Median == 0 {
		t.Errorf("etcd: no reply counted: %+v", p)
	}
	for _, want := range []string{"in-process (ceiling)", "Grants per second, empty critical section", "Takeover:", "etcd     1000   1500"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"locksuite bench: etcd: 3 clients, empty section:", "locksuite bench: etcd: takeover from a frozen holder:"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks the progress line %q:\n%s", want, errb.String())
		}
	}
	md, _ := os.ReadFile(mdPath)
	page, _ := os.ReadFile(htmlPath)
	if !strings.Contains(string(md), "| etcd | 1000 | 1500 |") || !strings.Contains(string(page), `data-backend="etcd"`) {
		t.Errorf("the Markdown or the HTML lacks etcd:\n%s", md)
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{et.Endpoint()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	left, err := c.Get(context.Background(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range left.Kvs {
		t.Errorf("left on the server: %s", kv.Key)
	}
}
