package clustertest

import (
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// FreePorts hands out distinct ports below the ephemeral range, bindable
// for TCP and UDP once it returns, and never the same port twice in one
// process.
func TestFreePorts(t *testing.T) {
	seen := map[int]bool{}
	for range 5 {
		ports := Ports(t, 8)
		if len(ports) != 8 {
			t.Fatalf("%d ports, want 8", len(ports))
		}
		for _, p := range ports {
			if p < portLow || p >= portLow+portCount || p >= 32768 {
				t.Fatalf("port %d outside %d–%d (below the ephemeral range)", p, portLow, portLow+portCount-1)
			}
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d not free for TCP after FreePorts returned: %v", p, err)
			}
			u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d not free for UDP after FreePorts returned: %v", p, err)
			}
			l.Close()
			u.Close()
		}
	}
	if got := JoinPorts([]int{20001, 20002, 31999}); got != "20001 20002 31999" {
		t.Fatalf("JoinPorts: %q", got)
	}
}

// A port taken for UDP only (a gossip port in use) or for TCP only is
// never handed out: in a window of 60 ports with every other one half
// taken, 10 ports drawn are all from the free half.
func TestFreePortsSkipsHalfTakenPorts(t *testing.T) {
	const window = 60
	low := portLow + mrand.IntN(portCount-window)
	busy := map[int]bool{}
	for p := low; p < low+window; p += 2 {
		a := "127.0.0.1:" + strconv.Itoa(p)
		var c io.Closer
		var err error
		if (p-low)%4 == 0 {
			c, err = net.ListenPacket("udp", a)
		} else {
			c, err = net.Listen("tcp", a)
		}
		if err != nil {
			continue // taken already: busy either way
		}
		t.Cleanup(func() { c.Close() })
		busy[p] = true
	}
	if len(busy) < window/4 {
		t.Fatalf("could hold only %d of %d ports in %d–%d", len(busy), window/2, low, low+window-1)
	}
	ports, err := freePorts(10, low, window)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if busy[p] {
			t.Fatalf("port %d handed out while one of its TCP and UDP sides is taken", p)
		}
	}
}
