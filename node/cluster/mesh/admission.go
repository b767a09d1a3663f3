package mesh

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limits of the inbound handshakes in progress (SPEC §5 "Mesh"; the flood
// defence). Connections are never refused at the door: a new one always
// gets a place, and when its source or the whole table is full the
// handshake that has made the least progress (then the oldest) gives its
// place up and is closed. A peer writes its hello (or its TLS
// ClientHello) as soon as it connects, so its handshake has bytes waiting
// when it is accepted; a connection held open without a byte is the first
// to go, however many newer ones arrive.
const (
	maxHandshakes          = 64 // in progress, all sources
	maxHandshakesPerSource = 8  // in progress from one source (an IPv4 address or an IPv6 /64)
)

// Progress of an inbound handshake, lowest first to be dropped.
const (
	progressNone  = iota // connected, nothing received
	progressBytes        // bytes arrived (read, or waiting in the socket)
	progressTLS          // the TLS handshake completed (a certificate from the cluster's CA)
	progressHello        // a hello from a trusted id with its trusted and advertised key
)

// admission is the table of inbound handshakes in progress.
type admission struct {
	max, perSource int
	// pending reports whether bytes wait unread on a connection (a
	// handshake whose goroutine has not run yet still shows its hello).
	pending func(net.Conn) bool

	mu       sync.Mutex
	list     []*inflight // arrival order
	bySource map[string]int
}

// inflight is one inbound handshake in the table.
type inflight struct {
	conn     net.Conn
	source   string
	progress int
	evicted  bool   // dropped to make room; set under admission.mu
	why      string // why it was dropped
}

func newAdmission(max, perSource int) *admission {
	return &admission{max: max, perSource: perSource, pending: bytesWaiting, bySource: map[string]int{}}
}

// sourceOf groups remote addresses: an IPv4 address, or an IPv6 /64 (one
// host usually holds a whole /64).
func sourceOf(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// admit enters c into the table and returns it, and the handshake that
// gave up its place for it (already out of the table), if any: the caller
// closes that one's connection.
func (a *admission) admit(c net.Conn) (h, victim *inflight) {
	h = &inflight{conn: c, source: sourceOf(c.RemoteAddr())}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.bySource[h.source] >= a.perSource:
		victim = a.pick(func(x *inflight) bool { return x.source == h.source })
		victim.why = fmt.Sprintf("%d handshakes in progress from %s, the most one source may have; the least advanced gave way to a new connection", a.perSource, h.source)
	case len(a.list) >= a.max:
		largest := 0
		for _, n := range a.bySource {
			largest = max(largest, n)
		}
		victim = a.pick(func(x *inflight) bool { return a.bySource[x.source] == largest })
		victim.why = fmt.Sprintf("%d handshakes in progress, the most this node runs; the least advanced from the busiest source (%s) gave way to a new connection", a.max, victim.source)
	}
	if victim != nil {
		victim.evicted = true
		a.remove(victim)
	}
	a.list = append(a.list, h)
	a.bySource[h.source]++
	return h, victim
}

// pick returns the least advanced, then oldest, handshake matching ok
// (called with a.mu held; one always matches).
func (a *admission) pick(ok func(*inflight) bool) *inflight {
	var best *inflight
	bestP := 0
	for _, x := range a.list {
		if !ok(x) {
			continue
		}
		p := x.progress
		if p == progressNone && a.pending(x.conn) {
			p = progressBytes
		}
		if best == nil || p < bestP {
			best, bestP = x, p
		}
	}
	return best
}

// bytesWaiting peeks at a TCP connection's receive queue without reading
// or blocking; false for connections it cannot look into.
func bytesWaiting(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	var b [1]byte
	// Control, not Read: a Read would queue behind the handshake's own
	// blocked Read on the same connection.
	if err := rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	}); err != nil {
		return false
	}
	return waiting
}

// advance records the progress of h.
func (a *admission) advance(h *inflight, p int) {
	a.mu.Lock()
	h.progress = max(h.progress, p)
	a.mu.Unlock()
}

// done takes h out of the table when its handshake ended; false when it
// had been dropped already (its connection is closed).
func (a *admission) done(h *inflight) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h.evicted {
		return false
	}
	a.remove(h)
	return true
}

// remove takes h out of the table (called with a.mu held).
func (a *admission) remove(h *inflight) {
	for i, x := range a.list {
		if x == h {
			a.list = append(a.list[:i], a.list[i+1:]...)
			break
		}
	}
	if a.bySource[h.source]--; a.bySource[h.source] <= 0 {
		delete(a.bySource, h.source)
	}
}

// inProgress is the number of handshakes in the table.
func (a *admission) inProgress() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.list)
}
