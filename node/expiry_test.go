package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

func gone(tn *testNode, name string) func() bool {
	return func() bool {
		_, err := tn.c.Get(bg, name)
		return errors.Is(err, client.ErrNotFound)
	}
}

// SPEC §4-4: the leader proposes Expire once its wall time (rounded down)
// reaches the server-side expiry — not a millisecond before.
func TestExpiryLoop(t *testing.T) {
	clk := newManualClock()
	g := &switchGuard{}
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Wall: clk, Guard: g})
	if _, err := tn.c.Grant(bg, "short", "h", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.Grant(bg, "long", "h", 100); err != nil {
		t.Fatal(err)
	}
	got, _ := tn.c.Get(bg, "short")
	// One ms before the expiry: let the loop run several times, nothing goes.
	clk.Advance(time.Duration(got.ServerExpiryUnixMs-uint64(clk.Now().UnixMilli())-1) * time.Millisecond)
	calls := g.calls.Load()
	waitFor(t, "five expiry-loop rounds", 5*time.Second, func() bool { return g.calls.Load() >= calls+5 })
	if gone(tn, "short")() {
		t.Fatal("expired a millisecond early")
	}
	clk.Advance(time.Millisecond)
	waitFor(t, "short to expire", 5*time.Second, gone(tn, "short"))
	if gone(tn, "long")() {
		t.Fatal("long expired too")
	}
	// Expired tickets can be granted again with a higher token.
	g2, err := tn.c.Grant(bg, "short", "other", 5)
	if err != nil || g2.Token <= got.Token {
		t.Fatalf("regrant %+v %v", g2, err)
	}
}

// SPEC §3.4, §3.2: a failing clock check refuses Grant and Renew with 503
// and the reason, stops the expiry loop, and fails /readyz; Release still
// works.
func TestClockGuardRefuses(t *testing.T) {
	clk := newManualClock()
	g := &switchGuard{}
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Wall: clk, Guard: g})
	a, err := tn.c.Grant(bg, "a", "h", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tn.c.Grant(bg, "b", "h", 30)
	if err != nil {
		t.Fatal(err)
	}
	g.set(errors.New("bound 260 ms > Δ/2"))
	_, err = tn.c.Grant(bg, "c", "h", 30)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 503 || !strings.Contains(ce.Reason, "bound 260 ms") || ce.Stage != "clock" {
		t.Fatalf("grant with a failing clock: %v", err)
	}
	if _, err := tn.c.Renew(bg, "b", "h", b.Token, 30); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("renew with a failing clock: %v", err)
	}
	if _, err := tn.c.Ready(bg); !errors.As(err, &ce) || ce.Stage != "clock" {
		t.Fatalf("readyz with a failing clock: %v", err)
	}
	clk.Advance(time.Minute)
	calls := g.calls.Load()
	waitFor(t, "expiry-loop rounds", 5*time.Second, func() bool { return g.calls.Load() >= calls+5 })
	if gone(tn, "a")() {
		t.Fatal("expired while the clock check fails")
	}
	if _, err := tn.c.Release(bg, "b", "h", b.Token); err != nil {
		t.Fatalf("release with a failing clock: %v", err)
	}
	g.set(nil)
	waitFor(t, "expiry after the clock recovers", 5*time.Second, gone(tn, "a"))
	_ = a
}

// SPEC §4 (single-node restart after FAILED): until the hold-off instant
// Grant and Expire are refused with the reason; Renew and Release work.
func TestHoldOff(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	tn := startNode(t, testConfig(t, dir), Deps{Wall: clk})
	a, err := tn.c.Grant(bg, "a", "h", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tn.c.Grant(bg, "b", "h", 60)
	if err != nil {
		t.Fatal(err)
	}
	tn.stop()

	until := clk.Now().Add(250*time.Second + 500*time.Millisecond)
	g := &switchGuard{}
	var ready *testNode
	ready, err = tryStart(t, testConfig(t, dir), Deps{Wall: clk, Guard: g, HoldOffUntil: until}, false)
	if err != nil {
		t.Fatal(err)
	}
	tn = ready
	var ce *client.Error
	waitFor(t, "the node to reach hold_off", 10*time.Second, func() bool {
		_, err := tn.c.Ready(bg)
		return errors.As(err, &ce) && ce.Stage == "hold_off"
	})
	_, err = tn.c.Grant(bg, "c", "h", 30)
	if !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Reason != "hold_off" || !strings.Contains(ce.Message, "250 s + Δ") {
		t.Fatalf("grant during hold-off: %v", err)
	}
	if _, err := tn.c.Renew(bg, "b", "h", b.Token, 60); err != nil {
		t.Fatalf("renew during hold-off: %v", err)
	}
	clk.Advance(200 * time.Second) // "a" is long past its expiry
	calls := g.calls.Load()
	waitFor(t, "expiry-loop rounds", 5*time.Second, func() bool { return g.calls.Load() >= calls+5 })
	if gone(tn, "a")() {
		t.Fatal("Expire proposed during hold-off")
	}
	st, _ := tn.c.Status(bg)
	if st.HoldOffUntilUnixMs == 0 || st.Ready {
		t.Fatalf("status during hold-off %+v", st)
	}
	clk.Advance(51 * time.Second)
	waitFor(t, "expiry after hold-off", 5*time.Second, gone(tn, "a"))
	if _, err := tn.c.Grant(bg, "c", "h", 30); err != nil {
		t.Fatalf("grant after hold-off: %v", err)
	}
	if _, err := tn.c.Ready(bg); err != nil {
		t.Fatalf("readyz after hold-off: %v", err)
	}
	_ = a
}
