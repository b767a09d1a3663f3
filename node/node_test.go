package node

import (
	"context"
	"errors"
	"strings"
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

// Probes, status and metrics are served from the first moment, while Raft
// opens and replays (run with -race: no data race with start-up).
func TestEndpointsDuringStartup(t *testing.T) {
	dir := t.TempDir()
	seeded(t, dir, testConfig(t, dir), Deps{})
	tn, err := tryStart(t, testConfig(t, dir), Deps{}, false)
	if err != nil {
		t.Fatal(err)
	}
	sawNotReady := false
	waitFor(t, "readiness", 20*time.Second, func() bool {
		for _, p := range []string{"/livez", "/v1/status", "/metrics", "/v1/tickets/a", "/v1/tickets"} {
			if a := do(t, tn, "GET", p, ""); a.status != 200 && a.status != 503 {
				t.Fatalf("%s during start-up: %d %s", p, a.status, a.raw)
			}
		}
		a := do(t, tn, "GET", "/readyz", "")
		sawNotReady = sawNotReady || a.status == 503 && a.body.Error == "" && strings.Contains(a.raw, `"stage"`)
		return a.status == 200
	})
	if got, err := tn.c.Get(bg, "a"); err != nil || got.Holder != "h" {
		t.Fatalf("after start-up: %+v %v", got, err)
	}
	t.Logf("saw a not-ready stage: %v", sawNotReady)
}
