package faultnet

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is a memberlist transport of the node from whose packets and
// streams obey the Net's rules (see the package doc); everything else is
// the wrapped transport's.
type Transport struct {
	memberlist.NodeAwareTransport
	n    *Net
	from string

	mu     sync.Mutex
	shut   bool
	timers map[*time.Timer]struct{} // delayed packets not sent yet
	wg     sync.WaitGroup           // delayed packets being sent
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Transport wraps t (typically a *memberlist.NetTransport) for the node
// from. Register the address t is bound to as from, so other nodes'
// packets to it are filtered by their rules.
func (n *Net) Transport(from string, t memberlist.NodeAwareTransport) *Transport {
	return &Transport{NodeAwareTransport: t, n: n, from: from, timers: map[*time.Timer]struct{}{}}
}

// WriteTo sends a packet to addr under the rule from → (addr's node).
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet under the rule from → (a.Addr's node): a
// dropped packet is reported sent, as on a lossy network; a delayed one is
// sent later on a timer that Shutdown stops.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to := t.n.Name(a.Addr)
	r := t.n.Rule(t.from, to)
	now := time.Now()
	if t.n.dropped(t.from, to, r) {
		return now, nil
	}
	d := t.n.wait(t.from, to, r)
	if d <= 0 {
		return t.NodeAwareTransport.WriteToAddress(b, a)
	}
	buf := append([]byte(nil), b...)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shut {
		return now, nil
	}
	var tm *time.Timer
	t.wg.Add(1)
	tm = time.AfterFunc(d, func() {
		defer t.wg.Done()
		t.mu.Lock()
		_, pending := t.timers[tm]
		delete(t.timers, tm)
		t.mu.Unlock()
		if pending {
			_, _ = t.NodeAwareTransport.WriteToAddress(buf, a)
		}
	})
	t.timers[tm] = struct{}{}
	return now, nil
}

// DialTimeout dials a stream to addr (see DialAddressTimeout).
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout fails with ErrCut while either direction between
// from and a.Addr's node is cut; otherwise its conn obeys the rules as a
// Dialer's does.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	to := t.n.Name(a.Addr)
	if t.n.cutEither(t.from, to) {
		return nil, fmt.Errorf("faultnet: gossip stream to %s (%s) from %s: %w", a.Addr, to, t.from, ErrCut)
	}
	c, err := t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return t.n.Conn(t.from, to, c), nil
}

// Shutdown drops the delayed packets not sent yet, waits for those being
// sent and shuts the wrapped transport down.
func (t *Transport) Shutdown() error {
	t.mu.Lock()
	t.shut = true
	for tm := range t.timers {
		if tm.Stop() {
			t.wg.Done()
		}
		delete(t.timers, tm)
	}
	t.mu.Unlock()
	t.wg.Wait()
	return t.NodeAwareTransport.Shutdown()
}
