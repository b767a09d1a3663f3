package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

var bg = context.Background()

// SPEC §4, §8: the single node grants, renews, releases; a restart on the
// same data dir keeps every ticket byte for byte and tokens keep rising.
func TestSingleNodeRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	tn := startNode(t, testConfig(t, dir), Deps{Wall: clk})
	g, err := tn.c.Grant(bg, "job.1", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	nowMs := uint64(clk.Now().UnixMilli())
	if g.Holder != "alice" || g.LeaseS != 30 || g.Token == 0 || g.ConservativeValidBeforeUnixMs != nowMs+30000 || g.RemainingMs != 30000 {
		t.Fatalf("grant %+v (now %d)", g.Grant, nowMs)
	}
	got, err := tn.c.Get(bg, "job.1")
	if err != nil {
		t.Fatal(err)
	}
	// SPEC §4-rounding: now rounded up + lease + Δ; the client bound rounded down, no Δ.
	if got.ServerExpiryUnixMs != nowMs+1+30000+500 || got.ConservativeValidBeforeUnixMs != nowMs+30000 {
		t.Fatalf("get %+v (now %d.25)", got, nowMs)
	}
	if _, err := tn.c.Grant(bg, "job.1", "bob", 30); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("grant by bob: %v", err)
	}
	clk.Advance(10 * time.Second)
	r, err := tn.c.Renew(bg, "job.1", "alice", g.Token, 60)
	if err != nil || r.Token != g.Token || r.LeaseS != 60 {
		t.Fatalf("renew %+v %v", r, err)
	}
	if _, err := tn.c.Grant(bg, "job.2", "carol", 5); err != nil {
		t.Fatal(err)
	}
	before, err := tn.c.List(bg, "", 0)
	if err != nil || len(before.Tickets) != 2 {
		t.Fatalf("list %+v %v", before, err)
	}
	if err := tn.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	tn2 := startNode(t, testConfig(t, dir), Deps{Wall: clk})
	after, err := tn2.c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Tickets) != len(before.Tickets) {
		t.Fatalf("after restart %d tickets, before %d", len(after.Tickets), len(before.Tickets))
	}
	for i := range before.Tickets {
		if after.Tickets[i] != before.Tickets[i] {
			t.Fatalf("ticket changed across restart:\n%+v\n%+v", before.Tickets[i], after.Tickets[i])
		}
	}
	if _, err := tn2.c.Release(bg, "job.2", "carol", before.Tickets[1].Token); err != nil {
		t.Fatal(err)
	}
	g3, err := tn2.c.Grant(bg, "job.2", "dave", 5)
	if err != nil || g3.Token <= before.Tickets[0].Token || g3.Token <= before.Tickets[1].Token {
		t.Fatalf("token after restart %+v %v", g3, err)
	}
}
