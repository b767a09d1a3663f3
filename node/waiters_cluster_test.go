package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// SPEC §4.2, §4.1: a blocking grant through a follower waits on the
// leader (counted on both); the caller going away at the follower ends the
// wait on the leader too; a release grants the follower's waiter; a
// leader change ends a wait with a 503 the client retries.
func TestClusterGrantWaitForwarded(t *testing.T) {
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
		_, ok := fc.n.forwardRoute()
		return ok
	})
	held, err := lc.tn.c.Grant(bg, "job", "h0", 30)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(n *Node, want int) func() bool {
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
