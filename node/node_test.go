package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/stage"
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

// SPEC §3.5, §5: probes, status and metrics are served from the first
// moment, while start-up is held at a stage; tickets are not. Start-up is
// held at clock_check: the agent answers, but the manual probe ticker
// gives only the first of the 3 samples until the test fires it (run with
// -race: no data race with start-up). The data dir holds tickets, so the
// release also replays a log.
func TestEndpointsDuringStartup(t *testing.T) {
	dir := t.TempDir()
	an := newAgentNode(t, dir, []byte(clockSecret), nil)
	seeded(t, dir, testConfig(t, dir), Deps{Wall: an.clk})
	tn, err := tryStart(t, an.cfg, an.deps, false)
	if err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	waitFor(t, "stage clock_check after one sample", 10*time.Second, func() bool {
		_, err := tn.c.Ready(bg)
		return errors.As(err, &ce) && ce.Stage == string(stage.ClockCheck) && strings.Contains(ce.Message, "1 of 3")
	})
	// Held: nothing fires the probe ticker, so the stage cannot move on.
	if a := do(t, tn, "GET", "/livez", ""); a.status != 200 || !strings.Contains(a.raw, `"ok"`) {
		t.Errorf("/livez during clock_check: %d %s", a.status, a.raw)
	}
	var h wire.Health
	if a := do(t, tn, "GET", "/readyz", ""); a.status != 503 {
		t.Errorf("/readyz during clock_check: %d %s", a.status, a.raw)
	} else if mustJSON(t, a.raw, &h); h.Stage != string(stage.ClockCheck) || h.Status != "unavailable" {
		t.Errorf("/readyz during clock_check names %+v", h)
	}
	var st wire.Status
	if a := do(t, tn, "GET", "/v1/status", ""); a.status != 200 {
		t.Errorf("/v1/status during clock_check: %d %s", a.status, a.raw)
	} else if mustJSON(t, a.raw, &st); st.Stage != string(stage.ClockCheck) || st.Ready {
		t.Errorf("/v1/status during clock_check: stage %q ready %v", st.Stage, st.Ready)
	}
	if a := do(t, tn, "GET", "/metrics", ""); a.status != 200 {
		t.Errorf("/metrics during clock_check: %d", a.status)
	}
	if v := metricLine(t, tn, `node_readiness_stage{stage="clock_check"}`); v != "1" {
		t.Errorf(`node_readiness_stage{stage="clock_check"} %q during clock_check`, v)
	}
	for _, p := range []string{"/v1/tickets/a", "/v1/tickets"} {
		if a := do(t, tn, "GET", p, ""); a.status != 503 || a.body.Stage != string(stage.ClockCheck) {
			t.Errorf("GET %s during clock_check: %d %s (want 503 naming clock_check)", p, a.status, a.raw)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Release: the two missing samples; Raft opens, replays, leads.
	for range 2 {
		if !an.ts.Fire("probe", 5*time.Second) {
			t.Fatal("probe ticker not taken")
		}
	}
	waitFor(t, "ready after clock_check", 20*time.Second, func() bool { _, err := tn.c.Ready(bg); return err == nil })
	if got, err := tn.c.Get(bg, "a"); err != nil || got.Holder != "h" {
		t.Fatalf("seeded ticket after start-up: %+v %v", got, err)
	}
	if _, err := tn.c.Grant(bg, "after", "late", 30); err != nil {
		t.Fatalf("grant after start-up: %v", err)
	}
	if got, err := tn.c.Get(bg, "after"); err != nil || got.Holder != "late" {
		t.Fatalf("get after start-up: %+v %v", got, err)
	}
	if v := metricLine(t, tn, `node_readiness_stage{stage="ready"}`); v != "1" {
		t.Errorf(`node_readiness_stage{stage="ready"} %q once ready`, v)
	}
}
