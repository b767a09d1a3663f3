package node

import (
	"context"
	"testing"
	"time"
)

// SPEC §4.2 (the status page's ticket table): a list shows, for each
// ticket, the blocking grants queued for it on the leader — read on the
// leader, and through a follower, whose list the leader answers over the
// forwarding frames; a ticket nobody waits for shows none, and the count
// falls back to none once the waiters went away.
func TestListShowsWaiters(t *testing.T) {
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
	for _, name := range []string{"job", "quiet"} {
		if _, err := lc.tn.c.Grant(bg, name, "h0", 30); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 2)
	for _, who := range []string{"w1", "w2"} {
		go func() {
			_, err := fc.tn.c.GrantWait(ctx, "job", who, 30, time.Minute)
			done <- err
		}()
	}
	waitFor(t, "the leader to queue both waiters", 10*time.Second, func() bool { w, _ := lc.n.waits.counts(); return w == 2 })
	waiters := func(via *clusterMember) map[string]uint32 {
		t.Helper()
		l, err := via.tn.c.List(bg, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, tk := range l.Tickets {
			out[tk.Name] = tk.Waiters
		}
		return out
	}
	for who, via := range map[string]*clusterMember{"leader": lc, "follower": fc} {
		if got := waiters(via); got["job"] != 2 || got["quiet"] != 0 || len(got) != 2 {
			t.Errorf("list via the %s: waiters %v, want job 2, quiet 0", who, got)
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err == nil {
			t.Fatal("a cancelled wait was granted")
		}
	}
	waitFor(t, "the leader to drop the waiters", 10*time.Second, func() bool { w, _ := lc.n.waits.counts(); return w == 0 })
	if got := waiters(fc); got["job"] != 0 {
		t.Errorf("after the waiters went away: %v", got)
	}
}
