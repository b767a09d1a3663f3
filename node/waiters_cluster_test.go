package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// SPEC §4.2, §4.1: a blocking grant through a follower waits on the
// leader (counted on both); the caller going away at the follower ends the
// wait on the leader too; a release grants the follower's waiter; a
// leader change ends a wait with a 503 the client retries.
func TestClusterGrantWaitForwarded(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	var fc *clusterMember
	for _, name := range tc.names {
		if name != leader {
			fc = tc.nodes[name]
			break
		}
	}
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := fc.n.mode.route()
		return ok
	})
	held, err := lc.tn.c.Grant(bg, "job", "h0", 30)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(n *server, want int) func() bool {
		return func() bool { w, _ := n.waits.counts(); return w == want }
	}
	got := make(chan waitResult, 1)
	// queued waits until the leader queues one waiter, failing at once if
	// the wait answered instead.
	queued := func(who string) {
		t.Helper()
		waitFor(t, "the leader to queue "+who, 10*time.Second, func() bool {
			select {
			case r := <-got:
				t.Fatalf("%s answered before it was queued: %+v %v", who, r.l, r.err)
			default:
			}
			return waiting(lc.n, 1)()
		})
	}

	// The caller goes away at the follower: the leader drops the waiter.
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() {
		_, err := fc.tn.c.GrantWait(ctx, "job", "gone", 30, time.Minute)
		gone <- err
	}()
	waitFor(t, "the leader to queue the forwarded waiter", 10*time.Second, waiting(lc.n, 1))
	if w, _ := fc.n.waits.counts(); w != 1 {
		t.Fatalf("the follower counts %d waits it forwards, want 1", w)
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a cancelled forwarded wait was granted")
	}
	waitFor(t, "the leader to drop it", 10*time.Second, waiting(lc.n, 0))
	waitFor(t, "the follower to drop it", 10*time.Second, waiting(fc.n, 0))

	// A release grants the follower's waiter.
	go func() {
		l, err := fc.tn.c.GrantWait(bg, "job", "w1", 30, time.Minute)
		got <- waitResult{"w1", l, err}
	}()
	queued("w1")
	if _, err := lc.tn.c.Release(bg, "job", "h0", held.Token); err != nil {
		t.Fatal(err)
	}
	r := nextResult(t, got)
	if r.err != nil || r.l.Holder != "w1" || r.l.Token <= held.Token {
		t.Fatalf("forwarded waiter after the release: %+v %v", r.l, r.err)
	}

	// A watch through the follower answers the next change on the leader.
	w0, err := fc.tn.c.Watch(bg, "job", 0, 0)
	if err != nil || w0.Ticket == nil || w0.Ticket.Holder != "w1" || w0.Index != r.l.Token {
		t.Fatalf("watch through the follower: %+v %v", w0, err)
	}
	watched := make(chan *client.Watched, 1)
	go func() {
		w, err := fc.tn.c.Watch(bg, "job", w0.Index, time.Minute)
		if err != nil {
			t.Errorf("blocking watch through the follower: %v", err)
		}
		watched <- w
	}()
	waitFor(t, "the leader to hold the forwarded watch", 10*time.Second, func() bool { _, w := lc.n.waits.counts(); return w == 1 })
	if _, err := lc.tn.c.Renew(bg, "job", "w1", r.l.Token, 30); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-watched:
		if w == nil || w.Ticket == nil || w.Index <= w0.Index {
			t.Fatalf("forwarded watch after a renew: %+v", w)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the forwarded watch did not answer the renew")
	}

	// A leader change ends the next wait with a 503.
	go func() {
		l, err := fc.tn.c.GrantWait(bg, "job", "w2", 30, time.Minute)
		got <- waitResult{"w2", l, err}
	}()
	queued("w2")
	if err := lc.n.TransferLeadership(bg, ""); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	r = nextResult(t, got)
	var ce *client.Error
	if !errors.As(r.err, &ce) || ce.StatusCode != 503 {
		t.Fatalf("a wait across a leader change: %+v %v, want a 503", r.l, r.err)
	}
	waitFor(t, "the old leader to drop w2", 10*time.Second, waiting(lc.n, 0))
}

// heldBy is what node holds of the leader's blocking grants and watches.
func (h *waitHub) heldBy(node string) (waits, watches int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waits.byNode[node], h.watches.byNode[node]
}

// SPEC §4.2: one follower filling the leader's cap with blocking grants
// and watches takes only its share: it is refused (a 429 naming its node
// share) while blocking grants and watches through the other follower and
// on the leader itself are still served.
func TestClusterWaitShares(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3")
	tc.slow = true // one leader throughout, on two loaded cores
	caps := func(c *Config) {
		c.API.MaxWaiters, c.API.MaxWaitersPerCaller = 12, 12 // one caller per node here: test the node shares
		c.API.MaxWatchers, c.API.MaxWatchersPerCaller = 12, 12
	}
	first := tc.startWith("n1", "", 3, caps)
	tc.startWith("n2", first.gossipAddr(), 3, caps)
	tc.startWith("n3", first.gossipAddr(), 3, caps)
	leader := tc.leader()
	lc := tc.nodes[leader]
	waitFor(t, "the leader to see three alive", 10*time.Second, func() bool { return aliveCount(lc.n) == 3 })
	fs := tc.others(leader)
	busy, other := fs[0], fs[1]
	busyID := busy.n.cfg.Cluster.Name
	for _, f := range fs {
		waitFor(t, "the followers to know the leader", 10*time.Second, func() bool { _, ok := f.n.mode.route(); return ok })
	}
	for i := range 20 {
		if _, err := lc.tn.c.Grant(bg, fmt.Sprint("t", i), "h0", 60); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	answered := make(chan error, 64)
	// Guarantee ⌊12 / (2×3)⌋ = 2 each; the busy follower may take what is
	// not kept for the other two: 12 − 2×2 = 8.
	const busyShare = 8
	fill := func(kind string, start func(c *client.Client, ticket string) error, held func(node string) int) {
		t.Helper()
		for i := 0; ; i++ {
			go func() { answered <- start(busy.tn.c, fmt.Sprint("t", i)) }()
			var refused error
			waitFor(t, fmt.Sprintf("%s %d through %s to wait or be refused", kind, i, busyID), 10*time.Second, func() bool {
				select {
				case refused = <-answered:
					return true
				default:
					return held(busyID) == i+1
				}
			})
			if refused == nil {
				continue
			}
			var ce *client.Error
			if !errors.As(refused, &ce) || ce.StatusCode != 429 || ce.Reason != "node_share" || !strings.Contains(ce.Message, "through node "+busyID) {
				t.Fatalf("%s %d through %s: %v, want a 429 naming its node share", kind, i, busyID, refused)
			}
			if i != busyShare {
				t.Fatalf("%s through %s refused after %d, want %d", kind, busyID, i, busyShare)
			}
			t.Logf("%s through %s: %d held, then %v", kind, busyID, i, refused)
			return
		}
	}
	grants := func(c *client.Client, ticket string) error {
		_, err := c.GrantWait(ctx, ticket, "waiter", 30, time.Minute)
		return err
	}
	watches := func(c *client.Client, ticket string) error {
		_, err := c.Watch(ctx, ticket, 1<<40, time.Minute)
		return err
	}
	waitsOf := func(node string) int { w, _ := lc.n.waits.heldBy(node); return w }
	watchesOf := func(node string) int { _, w := lc.n.waits.heldBy(node); return w }
	fill("blocking grant", grants, waitsOf)
	fill("watch", watches, watchesOf)

	// The other follower's callers and the leader's own are served.
	for _, via := range []*clusterMember{other, lc} {
		id := via.n.cfg.Cluster.Name
		go func() { answered <- grants(via.tn.c, "t19") }()
		go func() { answered <- watches(via.tn.c, "t19") }()
		waitFor(t, "a blocking grant and a watch through "+id, 10*time.Second, func() bool {
			select {
			case err := <-answered:
				t.Fatalf("through %s while %s holds its share: %v", id, busyID, err)
			default:
			}
			return waitsOf(id) == 1 && watchesOf(id) == 1
		})
	}
	cancel()
	waitFor(t, "every wait to end on the leader", 10*time.Second, func() bool {
		w, ws := lc.n.waits.counts()
		return w == 0 && ws == 0
	})
}
