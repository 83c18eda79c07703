package servers

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePorts: the ports are distinct, free (they can be bound), never
// handed out twice by this process, and below the kernel's ephemeral
// range, where no outgoing connection can take one before its server
// binds it (a kube-apiserver once failed with "address already in use").
func TestFreePorts(t *testing.T) {
	lo := ephemeralLow()
	seen := map[int]bool{}
	for range 20 {
		ps, err := freePorts(5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
			if lo > minPort && (p < minPort || p >= lo) {
				t.Errorf("port %d is outside [%d, %d): the ephemeral range starts at %d", p, minPort, lo, lo)
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Errorf("port %d: %v", p, err)
				continue
			}
			l.Close()
		}
	}
	if lo == 0 {
		t.Log("no ip_local_port_range: the kernel's ports were used")
	}
}
