package clustertest

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The range FreePorts draws from: below the kernel's ephemeral range
// (ip_local_port_range, 32768–60999 by default), so the port-0 listeners
// and outbound connections of other tests cannot take a port between
// FreePorts' check and the process binding it (seen: a gossip port taken
// that way).
const (
	portLow   = 20000
	portCount = 12000
	maxTries  = 4000
)

var (
	givenMu sync.Mutex
	given   = map[int]bool{} // every port FreePorts returned in this process
)

// FreePorts returns n distinct loopback ports, each free for TCP and UDP
// at the time of the call (memberlist's gossip binds both on one port),
// drawn below the ephemeral range, and none that an earlier call in this
// process returned: two calls never hand out the same port, even though
// nothing holds the ports once FreePorts returns.
func FreePorts(n int) ([]int, error) { return freePorts(n, portLow, portCount) }

// freePorts is FreePorts drawing from [low, low+count).
func freePorts(n, low, count int) ([]int, error) {
	givenMu.Lock()
	defer givenMu.Unlock()
	var ports []int
	var held []func() error
	defer func() {
		for _, c := range held {
			_ = c()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == maxTries {
			return nil, fmt.Errorf("clustertest: found only %d of %d free loopback ports in %d–%d", len(ports), n, low, low+count-1)
		}
		port := low + mrand.IntN(count)
		if given[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			_ = l.Close()
			continue
		}
		held = append(held, l.Close, u.Close)
		given[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

// Ports is FreePorts for a test: it fails the test when the ports cannot
// be found.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	ports, err := FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// JoinPorts is the ports space-separated, as deploy/cluster-keys.sh and
// deploy/demo.sh take them (TCKCLK_API_PORTS, TCKCLK_GOSSIP_PORTS).
func JoinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}
